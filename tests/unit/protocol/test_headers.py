"""Request/response headers, header-version rules and the KIP-511 ApiVersions fallback."""

from __future__ import annotations

import struct

import pytest

from services.common.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    DecodeError,
    FrameError,
    RequestHeader,
    api_versions_entries,
    decode_request,
    decode_request_header,
    decode_response,
    decode_response_header,
    encode_api_versions_fallback,
    encode_request,
    encode_request_header,
    encode_response,
    encode_response_header,
    frame_size,
    parse_request_header,
    request_header_version,
    response_header_version,
)


def test_request_header_versions_on_the_wire() -> None:
    v0 = encode_request_header(0, 7, 0, 11, "ignored")
    assert v0 == struct.pack(">hhi", 7, 0, 11)
    v1 = encode_request_header(1, 3, 8, 11, "abc")
    assert v1 == struct.pack(">hhih", 3, 8, 11, 3) + b"abc"
    assert encode_request_header(1, 3, 8, 11, None) == struct.pack(">hhih", 3, 8, 11, -1)
    v2 = encode_request_header(2, 3, 12, 11, "abc")
    assert v2 == v1[:2] + struct.pack(">h", 12) + v1[4:] + b"\x00"  # client_id stays int16-length

    assert decode_request_header(v0, 0) == (RequestHeader(7, 0, 11, None), 8)
    assert decode_request_header(v1, 1) == (RequestHeader(3, 8, 11, "abc"), len(v1))
    assert decode_request_header(v2, 2) == (RequestHeader(3, 12, 11, "abc"), len(v2))


def test_response_header_versions_on_the_wire() -> None:
    assert encode_response_header(0, 5) == b"\x00\x00\x00\x05"
    assert encode_response_header(1, 5) == b"\x00\x00\x00\x05\x00"
    assert decode_response_header(b"\x00\x00\x00\x05\x00", 1) == (5, 5)
    assert decode_response_header(b"\x00\x00\x00\x05\x01\x09\x01z", 1) == (5, 8)  # unknown tag
    assert decode_response_header(b"\x00\x00\x00\x05", 0) == (5, 4)


@pytest.mark.parametrize(
    "key,version,request_v,response_v",
    [
        (ApiKey.METADATA, 8, 1, 0),
        (ApiKey.METADATA, 9, 2, 1),
        (ApiKey.PRODUCE, 8, 1, 0),
        (ApiKey.PRODUCE, 9, 2, 1),
        (ApiKey.FETCH, 11, 1, 0),
        (ApiKey.FETCH, 12, 2, 1),
        (ApiKey.API_VERSIONS, 2, 1, 0),
        (ApiKey.API_VERSIONS, 3, 2, 0),  # ApiVersions responses always use header v0
        (ApiKey.API_VERSIONS, 4, 2, 0),
        (ApiKey.API_VERSIONS, 9, 2, 0),  # unknown future version: still flexible ("3+")
        (ApiKey.DESCRIBE_CLUSTER, 0, 2, 1),
        (7, 0, 0, 0),  # ControlledShutdown v0 (no schema in kio) used request header v0
    ],
)
def test_header_version_rules(key: int, version: int, request_v: int, response_v: int) -> None:
    assert request_header_version(key, version) == request_v
    assert response_header_version(key, version) == response_v


def test_encode_response_uses_header_v0_for_api_versions() -> None:
    body = {"error_code": 0, "api_keys": [], "throttle_time": 0}
    frame = encode_response(ApiKey.API_VERSIONS, 3, 77, body)
    assert frame[4:8] == struct.pack(">i", 77)
    assert frame[8:10] == b"\x00\x00"  # error_code right after the correlation id
    metadata = encode_response(ApiKey.METADATA, 12, 77, {})
    assert metadata[4:9] == struct.pack(">i", 77) + b"\x00"  # header v1 tag byte


def test_parse_request_header_known_versions() -> None:
    for key, version in [(ApiKey.METADATA, 4), (ApiKey.METADATA, 12), (ApiKey.API_VERSIONS, 0)]:
        frame = encode_request(key, version, 123, "me", {})[4:]
        header, offset = parse_request_header(frame)
        assert header == RequestHeader(key, version, 123, "me")
        assert decode_request(key, version, frame, offset) is not None


def test_parse_request_header_unknown_version_and_key() -> None:
    # A future ApiVersions v9 request: the header is flexible (v2), body unknown.
    frame = encode_request_header(2, ApiKey.API_VERSIONS, 9, 31, "new-client") + b"\x07body"
    header, offset = parse_request_header(frame)
    assert header == RequestHeader(18, 9, 31, "new-client")
    assert frame[offset:] == b"\x07body"
    # Only the first 8 bytes: still enough to answer UNSUPPORTED_VERSION.
    assert parse_request_header(frame[:8]) == (RequestHeader(18, 9, 31, None), 8)
    assert parse_request_header(frame[:11]) == (RequestHeader(18, 9, 31, None), 8)
    # An api key kio does not know.
    unknown = struct.pack(">hhih", 999, 1, 5, 2) + b"id"
    assert parse_request_header(unknown) == (RequestHeader(999, 1, 5, "id"), len(unknown))
    assert parse_request_header(unknown[:9]) == (RequestHeader(999, 1, 5, None), 8)


def test_parse_request_header_errors() -> None:
    with pytest.raises(FrameError):
        parse_request_header(b"\x00\x03\x00")
    # Known key/version with a truncated client id: malformed.
    frame = encode_request(ApiKey.METADATA, 12, 1, "client", {})[4:]
    with pytest.raises(DecodeError):
        parse_request_header(frame[:12])
    with pytest.raises(DecodeError):
        parse_request_header(struct.pack(">hhih", 3, 12, 1, -5))


def test_kip511_api_versions_fallback() -> None:
    frame = encode_api_versions_fallback(42)
    entries = api_versions_entries()
    expected = struct.pack(">ihi", 42, 35, len(entries)) + b"".join(
        struct.pack(">hhh", e["api_key"], e["min_version"], e["max_version"]) for e in entries
    )
    assert frame == struct.pack(">i", len(expected)) + expected
    correlation_id, body = decode_response(ApiKey.API_VERSIONS, 0, frame[4:])
    assert correlation_id == 42
    assert body == {"error_code": 35, "api_keys": entries}
    assert {e["api_key"] for e in entries} == {int(k) for k in SUPPORTED_VERSIONS}
    custom = encode_api_versions_fallback(1, {ApiKey.METADATA: (1, 4)})
    assert decode_response(ApiKey.API_VERSIONS, 0, custom[4:])[1]["api_keys"] == [
        {"api_key": 3, "min_version": 1, "max_version": 4}
    ]


def test_frame_size() -> None:
    assert frame_size(b"\x00\x00\x01\x00", 1024) == 256
    with pytest.raises(FrameError):
        frame_size(b"\xff\xff\xff\xff", 1024)
    with pytest.raises(FrameError):
        frame_size(b"\x00\x10\x00\x00", 1024)
    with pytest.raises(FrameError):
        frame_size(b"\x00\x00", 1024)


def test_decode_response_reads_the_fallback_whatever_version_was_sent() -> None:
    frame = encode_api_versions_fallback(8)
    for sent_version in (0, 3, 4):
        correlation_id, body = decode_response(ApiKey.API_VERSIONS, sent_version, frame[4:])
        assert (correlation_id, body["error_code"]) == (8, 35)
        assert body["api_keys"] == api_versions_entries()
