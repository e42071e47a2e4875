"""Small blocking network probes used by the local-cluster tooling and the CLI."""

from __future__ import annotations

import http.client
import socket
import struct

API_VERSIONS_KEY = 18


def port_free(host: str, port: int) -> bool:
    """True when a server could bind ``host:port`` now (SO_REUSEADDR, like our servers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def http_ready(host: str, port: int, path: str = "/readyz", timeout: float = 1.0) -> bool:
    """True when ``GET path`` answers 200."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def api_versions_request(correlation_id: int, client_id: str = "kafka-py-probe") -> bytes:
    """A size-prefixed ApiVersions v0 request (request header v1, empty body)."""
    cid = client_id.encode()
    payload = struct.pack(">hhih", API_VERSIONS_KEY, 0, correlation_id, len(cid)) + cid
    return struct.pack(">i", len(payload)) + payload


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from a blocking socket (ConnectionError if it closes first)."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        buf += chunk
    return bytes(buf)


def kafka_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when ``host:port`` answers an ApiVersions v0 request with error code 0."""
    correlation_id = 0x6B70  # arbitrary, checked on the way back
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(api_versions_request(correlation_id))
            (size,) = struct.unpack(">i", recv_exact(s, 4))
            if size < 6:
                return False
            head = recv_exact(s, 6)
            got_cid, error_code = struct.unpack(">ih", head)
            return got_cid == correlation_id and error_code == 0
    except (OSError, struct.error):
        return False


def split_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` -> ``[("h1", 9092), ("h2", 9093)]``; ValueError on bad input."""
    out: list[tuple[str, int]] = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bad bootstrap server {item!r}: expected host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no bootstrap server given")
    return out


def unreachable_reason(bootstrap: str, timeout: float = 5.0) -> str | None:
    """None when some bootstrap server accepts a TCP connection, else why none did."""
    reasons: list[str] = []
    for host, port in split_bootstrap(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return None
        except TimeoutError:
            reasons.append(f"{host}:{port}: timed out after {timeout:g}s")
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or exc}")
    return "; ".join(reasons)
