"""A host for remote workers: ``python -m harness.host [HOST:PORT]`` (``bin/gatehouse host``) serves execnet
socket gateways, one at a time, for a controller's ``pytest --dist load --tx socket=HOST:PORT//chdir=CHECKOUT``.

It is execnet's own socket server (``execnet/script/socketserver.py``) imported as a module: run as a script,
that file's folder comes first on ``sys.path`` and its name shadows the standard library's ``socketserver``, so
``http.server`` (the browser lane's server) fails to import in the worker. The server runs any code a client
sends: bind it to a private address (the default is the loopback).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from execnet.gateway_base import get_execmodel
    from execnet.script import socketserver as server

    args = sys.argv[1:] if argv is None else argv
    hostport = args[0] if args else "127.0.0.1:8888"
    server.execmodel = get_execmodel("thread")   # the global the script's __main__ block would set
    sock = server.bind_and_listen(hostport, server.execmodel)
    server.startserver(sock, loop=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
