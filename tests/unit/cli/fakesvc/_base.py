"""One fake service process.

Behaviour is steered by environment variables so a test can script failures:
``FAKESVC_CRASH=storage-1`` (exit 3 at start), ``FAKESVC_NEVER_READY=gateway-0`` (/readyz 503),
``FAKESVC_IGNORE_TERM=controller-0`` (ignore SIGTERM), ``FAKESVC_CHILD=1`` (spawn a sleeping
child in the same process group, to check that nothing is left behind).
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
from pathlib import Path

ID_FLAG = {
    "controller": "controller.id",
    "storage": "broker.id",
    "group_coordinator": "node.id",
    "transaction_coordinator": "node.id",
    "gateway": "node.id",
}


def _flags(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    it = iter(argv)
    for key in it:
        if not key.startswith("--"):
            raise SystemExit(f"unexpected argument {key}")
        out[key[2:]] = next(it)
    return out


def _listed(var: str, name: str) -> bool:
    return name in os.environ.get(var, "").split(",")


class _Ready(http.server.BaseHTTPRequestHandler):
    ready = True

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        ok = self.path == "/readyz" and self.ready
        self.send_response(200 if ok else 503)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


class _Kafka(socketserver.BaseRequestHandler):
    """Answers ApiVersions v0 with error code 0 and no api keys."""

    def handle(self) -> None:
        sock: socket.socket = self.request
        while True:
            head = sock.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return
            (size,) = struct.unpack(">i", head)
            body = sock.recv(size, socket.MSG_WAITALL)
            cid = struct.unpack(">i", body[4:8])[0]
            payload = struct.pack(">ihi", cid, 0, 0)
            sock.sendall(struct.pack(">i", len(payload)) + payload)


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main(role: str) -> None:
    flags = _flags(sys.argv[1:])
    name = f"{role}-{flags[ID_FLAG[role]]}"
    print(f"fake {name} argv={sys.argv[1:]}", flush=True)
    if _listed("FAKESVC_CRASH", name):
        print(f"{name}: boom, crashing on purpose", flush=True)
        sys.exit(3)
    if role == "storage":
        log_dir = Path(flags["log.dirs"])
        assert log_dir.is_dir(), log_dir
        (log_dir / "fake-starts").open("a").write("x")
    host, _, port = flags["listeners"].rpartition(":")
    _Ready.ready = not _listed("FAKESVC_NEVER_READY", name)
    admin = _Server((flags.get("admin.host", "127.0.0.1"), int(flags["admin.port"])), _Ready)
    main_srv = _Server(
        (host, int(port)), _Kafka if role == "gateway" else socketserver.BaseRequestHandler
    )
    for srv in (admin, main_srv):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    if os.environ.get("FAKESVC_CHILD"):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    stop = threading.Event()
    if _listed("FAKESVC_IGNORE_TERM", name):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    print(f"{name}: SIGTERM, exiting", flush=True)
    sys.exit(0)
