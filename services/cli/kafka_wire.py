"""One Kafka request on a connection of its own, with kafka-py's protocol codec (for the APIs
the CLI's clients do not offer: ApiVersions per broker, DescribeLogDirs)."""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

from services.cli.common import CliError
from services.cli.probes import recv_exact
from services.common.protocol import ApiKey
from services.common.protocol.messages import decode_response, encode_request

CLIENT_ID = "kafka-py-cli"
_correlation = itertools.count(1)


def request_once(
    host: str, port: int, api_key: ApiKey, version: int, body: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """Send one request to ``host:port`` and return the decoded answer's body."""
    correlation = next(_correlation)
    frame = encode_request(api_key, version, correlation, CLIENT_ID, body)
    name = "".join(part.capitalize() for part in api_key.name.split("_"))
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(frame)
            size = struct.unpack(">i", recv_exact(sock, 4))[0]
            answer = recv_exact(sock, size)
    except OSError as exc:
        raise CliError(f"{name} to {host}:{port} failed: {exc.strerror or exc}") from None
    got, decoded = decode_response(api_key, version, answer)
    if got != correlation:
        raise CliError(f"{name} to {host}:{port}: unexpected correlation id {got}")
    return decoded
