"""Shared test helpers: every (api_key, version, kind) kio knows, body-only encode/decode."""

from __future__ import annotations

import os
from typing import Any

from services.common.protocol import SUPPORTED_VERSIONS, get_codec, known_api_keys, known_versions
from services.common.protocol.schema import Kind

# PROTOCOL_EXAMPLES=200 runs the property tests much deeper than the CI default.
EXAMPLES_SCALE = float(os.environ.get("PROTOCOL_EXAMPLES", "1"))


def examples(n: int) -> int:
    return max(1, int(n * EXAMPLES_SCALE))


ALL_MESSAGES: list[tuple[int, int, Kind]] = [
    (key, version, kind)
    for key in sorted(known_api_keys())
    for version in known_versions(key)
    for kind in ("request", "response")
]
SUPPORTED_REQUESTS: list[tuple[int, int]] = [
    (int(key), version)
    for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
    for version in range(low, high + 1)
]


def encode_body(api_key: int, version: int, kind: Kind, body: dict[str, Any]) -> bytes:
    out: list[Any] = []
    get_codec(api_key, version, kind).encode(body, out)
    return b"".join(out)


def decode_body(api_key: int, version: int, kind: Kind, data: bytes) -> tuple[dict[str, Any], int]:
    from services.common.protocol import decode_request_body, decode_response_body

    if kind == "request":
        return decode_request_body(api_key, version, data)
    return decode_response_body(api_key, version, data)


def message_id(msg: tuple[int, int, Kind]) -> str:
    key, version, kind = msg
    return f"{key}-v{version}-{kind[:4]}"
