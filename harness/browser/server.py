"""A static server for the bench page and the artifacts, on 127.0.0.1, cross-origin isolated.

Every response carries ``Cross-Origin-Opener-Policy: same-origin`` and
``Cross-Origin-Embedder-Policy: require-corp`` (plus ``Cross-Origin-Resource-Policy``), without which
the page has no ``SharedArrayBuffer`` and onnxruntime-web silently runs one thread.  The server runs
as its own process (``python -m harness.browser.server``) so a hung page or a killed test can never
keep a port; :class:`StaticServer` starts it, waits for its ``READY <port>`` line, and stops it.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from ..errors import HarnessError

READY = "READY"
ISOLATION_HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
}
_TYPES = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm",
          ".json": "application/json", ".onnx": "application/octet-stream", ".html": "text/html; charset=utf-8",
          ".txt": "text/plain; charset=utf-8", ".map": "application/json"}


class ServerError(HarnessError):
    """The static server could not start (a taken port, a missing directory) or did not stop."""


class _Handler(http.server.SimpleHTTPRequestHandler):
    mounts: dict[str, Path] = {}
    isolate = True
    protocol_version = "HTTP/1.1"

    def translate_path(self, path: str) -> str:
        clean = path.split("?", 1)[0].split("#", 1)[0]
        from urllib.parse import unquote

        clean = unquote(clean).lstrip("/")
        for prefix in sorted(self.mounts, key=len, reverse=True):
            if clean == prefix or clean.startswith(prefix + "/"):
                root = self.mounts[prefix].resolve()
                target = (root / clean[len(prefix):].lstrip("/")).resolve()
                if target == root or root in target.parents:
                    return str(target)
        return "/nonexistent-gatehouse-path"

    def guess_type(self, path) -> str:
        return _TYPES.get(Path(str(path)).suffix, None) or super().guess_type(path)

    def end_headers(self):
        if self.isolate:
            for key, value in ISOLATION_HEADERS.items():
                self.send_header(key, value)
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        sys.stderr.write("%s %s\n" % (time.strftime("%H:%M:%S"), format % args))
        sys.stderr.flush()


def serve(mounts: dict[str, Path], port: int, isolate: bool = True, out: IO[str] = sys.stdout) -> None:
    """Serve until SIGTERM/SIGINT; print ``READY <port>`` once listening (port 0 picks a free one)."""
    for prefix, root in mounts.items():
        if not Path(root).is_dir():
            raise ServerError(f"mount {prefix!r}: {root} is not a directory")
    handler = type("Handler", (_Handler,), {"mounts": {k.strip("/"): Path(v) for k, v in mounts.items()},
                                            "isolate": isolate})
    http.server.ThreadingHTTPServer.allow_reuse_address = False
    try:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise ServerError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from exc
    httpd.daemon_threads = True
    stop = threading.Event()

    def _stop(signum, frame):
        if not stop.is_set():
            stop.set()
            threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"{READY} {httpd.server_address[1]}", file=out, flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        httpd.server_close()


class StaticServer:
    """The server as a child process: ``with StaticServer(mounts, log_path) as s: s.url("web/x.html")``."""

    def __init__(self, mounts: dict[str, Path | str], log_path: Path | str, port: int = 0, isolate: bool = True,
                 start_timeout_s: float = 15.0):
        self.mounts = {k: str(v) for k, v in mounts.items()}
        self.log_path = Path(log_path)
        self.requested_port = port
        self.isolate = isolate
        self.start_timeout_s = start_timeout_s
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.origin}/{path.lstrip('/')}"

    def start(self) -> "StaticServer":
        for prefix, root in self.mounts.items():
            if not Path(root).is_dir():
                raise ServerError(f"mount {prefix!r}: {root} is not a directory")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "harness.browser.server", "--port", str(self.requested_port),
               "--mounts", json.dumps(self.mounts)] + ([] if self.isolate else ["--no-isolation"])
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env, text=True)
        log.close()
        line = _readline(self.proc.stdout, self.start_timeout_s)
        if not line.startswith(READY):
            self.stop()
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise ServerError(f"static server on 127.0.0.1:{self.requested_port} did not start within "
                              f"{self.start_timeout_s:.0f} s: {' | '.join(tail) or line or 'no output'} "
                              f"(log {self.log_path})")
        self.port = int(line.split()[1])
        return self

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """Stop the child (SIGTERM, then SIGKILL); returns its exit status."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout_s)
        if proc.stdout:
            proc.stdout.close()
        return proc.returncode

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def __enter__(self) -> "StaticServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _readline(stream, timeout_s: float) -> str:
    """One line from a child's stdout, or '' after ``timeout_s`` (the child may hang or die)."""
    box: list[str] = []
    t = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    t.start()
    t.join(timeout_s)
    return box[0].strip() if box else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--mounts", required=True, help='JSON object {"url prefix": "directory"}')
    p.add_argument("--no-isolation", action="store_true", help="omit COOP/COEP (for the isolation check's own test)")
    a = p.parse_args(argv)
    try:
        serve({k: Path(v) for k, v in json.loads(a.mounts).items()}, a.port, isolate=not a.no_isolation)
    except ServerError as exc:
        print(f"ERROR {exc}", flush=True)
        print(str(exc), file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
