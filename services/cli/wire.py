"""One Kafka request/response exchange over a blocking socket, with kafka-py's protocol codec,
for the CLI's requests that confluent-kafka's AdminClient has no call for; over TLS and SASL
when the client configuration says so (``configure``, wire_security.py)."""

from __future__ import annotations

import functools
import itertools
import socket
import struct
from collections.abc import Mapping
from typing import Any

from services.cli.common import CliError
from services.cli.probes import recv_exact
from services.cli.wire_security import WireSecurity
from services.common.protocol.messages import decode_response, encode_request

CLIENT_ID = "kafka-py-cli"
_correlation = itertools.count(1)
_security = WireSecurity()


def configure(conf: Mapping[str, Any]) -> None:
    """Use the TLS/SASL settings of the CLI's client configuration (``--command-config``) for
    every connection from now on (wire_security.py)."""
    global _security
    _security = WireSecurity.from_client_config(conf)


def _round_trip(
    sock: socket.socket, where: str, api_key: int, version: int, body: dict[str, Any]
) -> Any:
    correlation = next(_correlation)
    sock.sendall(encode_request(api_key, version, correlation, CLIENT_ID, body))
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    got, decoded = decode_response(api_key, version, recv_exact(sock, size))
    if got != correlation:
        raise CliError(f"{where} answered with correlation id {got}, not {correlation}")
    return decoded


def exchange(
    host: str, port: int, api_key: int, version: int, body: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """Send one request to ``host:port`` (over TLS and SASL as configured) and return the
    decoded response body."""
    sec, where = _security, f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            raw.settimeout(timeout_s)
            sock = sec.ssl_context().wrap_socket(raw, server_hostname=host) if sec.tls else raw
            with sock:
                if sec.sasl:
                    sec.authenticate(functools.partial(_round_trip, sock, where), where)
                return dict(_round_trip(sock, where, api_key, version, body))
    except (OSError, ConnectionError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise CliError(f"request to {where} failed: {reason}") from None


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
