"""Readiness probes: raw ApiVersions framing, HTTP /readyz, port checks, bootstrap parsing."""

from __future__ import annotations

import http.server
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from services.cli import probes


def test_api_versions_request_framing() -> None:
    frame = probes.api_versions_request(7, "abc")
    size, key, version, cid, clen = struct.unpack(">ihhih", frame[:14])
    assert (size, key, version, cid, clen) == (len(frame) - 4, 18, 0, 7, 3)
    assert frame[14:] == b"abc"


def _serve_once(reply: bytes) -> tuple[int, threading.Thread]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def run() -> None:
        conn, _ = srv.accept()
        with conn, srv:
            size = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]
            body = conn.recv(size, socket.MSG_WAITALL)
            cid = struct.unpack(">i", body[4:8])[0]
            conn.sendall(reply.replace(b"CID!", struct.pack(">i", cid)))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return srv.getsockname()[1], t


def test_kafka_answers_checks_correlation_id_and_error_code() -> None:
    good = struct.pack(">i", 10) + b"CID!" + struct.pack(">hi", 0, 0)
    port, t = _serve_once(good)
    assert probes.kafka_answers("127.0.0.1", port)
    t.join(5)
    bad = struct.pack(">i", 10) + b"CID!" + struct.pack(">hi", 35, 0)
    port, t = _serve_once(bad)
    assert not probes.kafka_answers("127.0.0.1", port)
    t.join(5)
    wrong_cid = struct.pack(">i", 10) + struct.pack(">ihi", 1, 0, 0)
    port, t = _serve_once(wrong_cid)
    assert not probes.kafka_answers("127.0.0.1", port)
    t.join(5)


@pytest.fixture
def http_server() -> Iterator[tuple[int, list[int]]]:
    status = [503]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(status[0])
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1], status
    srv.shutdown()
    srv.server_close()


def test_http_ready(http_server: tuple[int, list[int]]) -> None:
    port, status = http_server
    assert not probes.http_ready("127.0.0.1", port)
    status[0] = 200
    assert probes.http_ready("127.0.0.1", port)


def test_port_free_and_unreachable_reason() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not probes.port_free("127.0.0.1", port)
        assert probes.unreachable_reason(f"127.0.0.1:{port}") is None
    assert probes.port_free("127.0.0.1", port)
    assert "Connection refused" in (probes.unreachable_reason(f"127.0.0.1:{port}") or "")


def test_split_bootstrap() -> None:
    assert probes.split_bootstrap("a:1, PLAINTEXT://b:2,[::1]:3") == [
        ("a", 1),
        ("b", 2),
        ("::1", 3),
    ]
    for bad in ("", "host", "h:x", ":9"):
        with pytest.raises(ValueError):
            probes.split_bootstrap(bad)
