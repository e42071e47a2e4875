"""Malformed input raises DecodeError — never IndexError, struct.error or MemoryError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.protocol import (
    ApiKey,
    DecodeError,
    decode_request,
    decode_response,
    message_spec,
    parse_request_header,
)

from .helpers import SUPPORTED_REQUESTS, encode_body, examples
from .strategies import entity_strategy

_FUZZ = settings(
    max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _ids(item: tuple[int, int]) -> str:
    return f"{item[0]}-v{item[1]}"


def _decode_or_reject(key: int, version: int, data: bytes) -> None:
    try:
        assert isinstance(decode_request(key, version, data), dict)
    except DecodeError:
        pass


@pytest.mark.parametrize("msg", SUPPORTED_REQUESTS, ids=_ids)
@_FUZZ
@given(data=st.binary(max_size=64))
def test_random_bytes(msg: tuple[int, int], data: bytes) -> None:
    _decode_or_reject(*msg, data)
    try:
        decode_response(msg[0], msg[1], data)
    except DecodeError:
        pass


@pytest.mark.parametrize("msg", SUPPORTED_REQUESTS, ids=_ids)
@_FUZZ
@given(data=st.data())
def test_truncations_and_mutations(msg: tuple[int, int], data: st.DataObject) -> None:
    key, version = msg
    body = data.draw(entity_strategy(message_spec(key, version, "request")))
    raw = encode_body(key, version, "request", body)
    for cut in range(len(raw)):  # every strict prefix is missing bytes the decoder needs
        with pytest.raises(DecodeError):
            decode_request(key, version, raw[:cut])
    if not raw:  # ApiVersions v0-2 requests have an empty body
        return
    mutated = bytearray(raw)
    edits = st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)), max_size=4)
    for pos, value in data.draw(edits):
        mutated[pos] = value
    _decode_or_reject(key, version, bytes(mutated))


@settings(max_examples=examples(200), deadline=None)
@given(frame=st.binary(max_size=40))
def test_request_header_fuzz(frame: bytes) -> None:
    try:
        header, offset = parse_request_header(frame)
    except DecodeError:
        return
    assert 8 <= offset <= len(frame)
    assert header.api_key == struct.unpack(">h", frame[:2])[0]


def test_huge_counts_are_rejected_before_allocating() -> None:
    # MetadataRequest v4: topics int32 count 2**31 - 1 with nothing behind it.
    with pytest.raises(DecodeError, match="exceeds remaining"):
        decode_request(ApiKey.METADATA, 4, struct.pack(">i", 2**31 - 1) + b"\x01")
    # Flexible: compact count as a 5-byte varint (2**32 - 1).
    with pytest.raises(DecodeError, match="exceeds remaining"):
        decode_request(ApiKey.METADATA, 12, b"\xff\xff\xff\xff\x0f" + b"\x00" * 8)
    # int32 arrays of numbers (CreateTopics assignments' broker ids) too.
    with pytest.raises(DecodeError):
        decode_response(ApiKey.METADATA, 1, b"\x00\x00\x00\x01" + struct.pack(">i", 2**30))


@pytest.mark.parametrize(
    "key,version,body,reason",
    [
        (ApiKey.METADATA, 4, struct.pack(">i", -2), "negative array length"),
        (ApiKey.METADATA, 12, b"\x80\x80\x80\x80\x80\x01", "varint longer than 5 bytes"),
        (ApiKey.METADATA, 12, b"\x80", "varint"),
        (ApiKey.METADATA, 4, struct.pack(">ih", 1, 20) + b"abc", "past the end"),
        (ApiKey.METADATA, 4, struct.pack(">ih", 1, -1) + b"\x00", "non-nullable"),
        (
            ApiKey.PRODUCE,
            3,
            struct.pack(">hhii", -1, 1, 1000, 1)
            + struct.pack(">h", 1)
            + b"t"
            + struct.pack(">iii", 1, 0, 99)
            + b"short",
            "past the end",
        ),
        (
            ApiKey.PRODUCE,
            9,
            b"\x00\x00\x01\x00\x00\x03\xe8\x02\x02t\x02\x00\x00\x00\x00\x05ab",
            "past the end",
        ),
    ],
)
def test_specific_malformations(key: int, version: int, body: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        decode_request(key, version, body)


def test_tagged_field_overrun_and_bad_offsets() -> None:
    # FetchRequest v12 cluster_id tag claims 1 byte but its string needs 4.
    plain = encode_body(ApiKey.FETCH, 12, "request", {})
    raw = plain[:-1] + bytes([1, 0, 1, 4]) + b"abc"
    with pytest.raises(DecodeError, match="overruns"):
        decode_request(ApiKey.FETCH, 12, raw)
    with pytest.raises(DecodeError):
        decode_request(ApiKey.FETCH, 12, plain, offset=len(plain) + 1)
    with pytest.raises(DecodeError):
        decode_request(ApiKey.FETCH, 12, plain, offset=-1)
