"""Round trip of every request and response version kio knows: dict -> bytes -> dict."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.protocol import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    message_spec,
    parse_request_header,
)
from services.common.protocol.schema import Kind

from .helpers import ALL_MESSAGES, decode_body, encode_body, examples, message_id
from .strategies import entity_strategy

_SETTINGS = settings(
    max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("msg", ALL_MESSAGES, ids=message_id)
@_SETTINGS
@given(data=st.data())
def test_body_round_trip(msg: tuple[int, int, Kind], data: st.DataObject) -> None:
    key, version, kind = msg
    body = data.draw(entity_strategy(message_spec(key, version, kind)))
    raw = encode_body(key, version, kind, body)
    decoded, end = decode_body(key, version, kind, raw)
    assert end == len(raw)
    assert decoded == body


@pytest.mark.parametrize("msg", ALL_MESSAGES, ids=message_id)
def test_empty_dict_encodes_schema_defaults(msg: tuple[int, int, Kind]) -> None:
    from services.common.protocol import default_dict

    key, version, kind = msg
    spec = message_spec(key, version, kind)
    decoded, _ = decode_body(key, version, kind, encode_body(key, version, kind, {}))
    assert decoded == default_dict(spec)


@pytest.mark.parametrize("key,version", [(0, 9), (1, 12), (3, 12), (18, 3), (19, 7), (32, 4)])
@settings(max_examples=25, deadline=None)
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_full_frames_round_trip(
    key: int, version: int, data: st.DataObject, correlation_id: int
) -> None:
    request = data.draw(entity_strategy(message_spec(key, version, "request")))
    frame = encode_request(key, version, correlation_id, "client-1", request)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    header, offset = parse_request_header(frame[4:])
    assert (header.api_key, header.api_version) == (key, version)
    assert (header.correlation_id, header.client_id) == (correlation_id, "client-1")
    assert decode_request(key, version, frame[4:], offset) == request

    response: dict[str, Any] = data.draw(entity_strategy(message_spec(key, version, "response")))
    frame = encode_response(key, version, correlation_id, response)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    assert decode_response(key, version, frame[4:]) == (correlation_id, response)
