"""One Kafka request/response exchange over a blocking socket, with kafka-py's protocol codec,
for the CLI's requests that confluent-kafka's AdminClient has no call for."""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

from services.cli.common import CliError
from services.cli.probes import recv_exact
from services.common.protocol.messages import decode_response, encode_request

CLIENT_ID = "kafka-py-cli"
_correlation = itertools.count(1)


def exchange(
    host: str, port: int, api_key: int, version: int, body: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """Send one request to ``host:port`` and return the decoded response body."""
    correlation = next(_correlation)
    frame = encode_request(api_key, version, correlation, CLIENT_ID, body)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(frame)
            size = struct.unpack(">i", recv_exact(sock, 4))[0]
            answer = recv_exact(sock, size)
    except (OSError, ConnectionError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise CliError(f"request to {host}:{port} failed: {reason}") from None
    got, decoded = decode_response(api_key, version, answer)
    if got != correlation:
        raise CliError(f"{host}:{port} answered with correlation id {got}, not {correlation}")
    return decoded


def bootstrap_exchange(
    bootstrap: str, api_key: int, version: int, body: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """``exchange`` with the first bootstrap server that answers."""
    last: CliError | None = None
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            return exchange(host.strip("[]"), int(port), api_key, version, body, timeout_s)
        except CliError as exc:
            last = exc
    raise last or CliError("no bootstrap server given")
