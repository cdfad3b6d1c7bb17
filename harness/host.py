"""A host for remote workers: ``python -m harness.host [HOST:PORT] [--workers N]`` (``bin/gatehouse host``) serves
execnet socket gateways for a controller's ``pytest --dist load --tx socket=HOST:PORT//chdir=CHECKOUT``.

One server runs one worker at a time (execnet's socket gateway executes in the server's own process), so
``--workers N`` starts N servers on ports PORT .. PORT+N-1, one ``--tx`` each. The workers of one host share its
artifact cache and its machine lock: timing tests still take turns there.

It is execnet's own socket server (``execnet/script/socketserver.py``) imported as a module: run as a script,
that file's folder comes first on ``sys.path`` and its name shadows the standard library's ``socketserver``, so
``http.server`` (the browser lane's server) fails to import in the worker. The server runs any code a client
sends: bind it to a private address (the default is the loopback).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys


def serve(hostport: str) -> None:
    from execnet.gateway_base import get_execmodel
    from execnet.script import socketserver as server

    server.execmodel = get_execmodel("thread")   # the global the script's __main__ block would set
    sock = server.bind_and_listen(hostport, server.execmodel)
    server.startserver(sock, loop=True)


def ports(hostport: str, workers: int) -> list[str]:
    """``HOST:PORT`` and N -> the N consecutive addresses the servers listen on (a bad value is refused)."""
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535 - (workers - 1):
        raise ValueError(f"expected HOST:PORT with room for {workers} consecutive port(s), got {hostport!r}")
    return [f"{host}:{int(port) + i}" for i in range(workers)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.host", description=__doc__.split("\n\n")[0])
    ap.add_argument("hostport", nargs="?", default="127.0.0.1:8888")
    ap.add_argument("--workers", type=int, default=1, help="servers on consecutive ports, one worker each")
    ns = ap.parse_args(argv)
    if ns.workers < 1:
        ap.error(f"--workers: expected 1 or more, got {ns.workers}")
    try:
        addresses = ports(ns.hostport, ns.workers)
    except ValueError as exc:
        ap.error(str(exc))
    if ns.workers == 1:
        serve(addresses[0])
        return 0
    print(" ".join(f"--tx socket={a}" for a in addresses), flush=True)
    children = [subprocess.Popen([sys.executable, "-m", "harness.host", a]) for a in addresses]

    def stop(signum, frame):
        for c in children:
            c.terminate()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    return max(c.wait() for c in children)


if __name__ == "__main__":
    sys.exit(main())
