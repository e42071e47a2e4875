"""Request/response headers and the rules that pick their versions.

Request header v0: api_key int16, api_version int16, correlation_id int32.
v1: + client_id (nullable int16-length string, even in flexible versions).
v2: + tagged fields. Response header v0: correlation_id; v1: + tagged fields.
A flexible request uses request header v2 and response header v1, except that ApiVersions
responses always use response header v0 (clients must read them before knowing our versions).
Only ControlledShutdown v0 (api key 7, removed in Kafka 4.0) used request header v0.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from .exceptions import DecodeError, EncodeError, FrameError
from .primitives import INT32, Buffer, skip_tagged_fields
from .schema import is_flexible, known_api_keys, known_versions

API_VERSIONS_KEY: Final = 18
CONTROLLED_SHUTDOWN_KEY: Final = 7

_HEAD: Final = struct.Struct(">hhi")
_HEAD_V1_NULL_CLIENT: Final = struct.Struct(">hhih")
_RESP_V1: Final = struct.Struct(">ix")


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def request_header_version(api_key: int, api_version: int) -> int:
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


def encode_request_header(
    version: int, api_key: int, api_version: int, correlation_id: int, client_id: str | None
) -> bytes:
    try:
        head = _HEAD.pack(api_key, api_version, correlation_id)
        if version == 0:
            return head
        if client_id is None:
            client = b"\xff\xff"
        else:
            raw = client_id.encode()
            client = struct.pack(">h", len(raw)) + raw
    except (struct.error, AttributeError, UnicodeEncodeError) as exc:
        raise EncodeError(f"bad request header: {exc}") from exc
    return head + client + (b"\x00" if version >= 2 else b"")


def decode_request_header(buf: Buffer, version: int, offset: int = 0) -> tuple[RequestHeader, int]:
    """Decode a request header of a known version at `offset`; returns (header, body offset)."""
    end = len(buf)
    if end - offset < 8:
        raise FrameError("request shorter than its header")
    api_key, api_version, correlation_id = _HEAD.unpack_from(buf, offset)
    pos = offset + 8
    client_id: str | None = None
    if version >= 1:
        if end - pos < 2:
            raise DecodeError("truncated client_id")
        (n,) = struct.unpack_from(">h", buf, pos)
        pos += 2
        if n < -1:
            raise DecodeError("negative client_id length")
        if n >= 0:
            if pos + n > end:
                raise DecodeError("client_id runs past the end of the request")
            client_id = str(memoryview(buf)[pos : pos + n], "utf-8", "replace")
            pos += n
    if version >= 2:
        try:
            pos = skip_tagged_fields(buf, pos, end)
        except IndexError as exc:
            raise DecodeError("truncated request header tagged fields") from exc
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def parse_request_header(frame: Buffer) -> tuple[RequestHeader, int]:
    """Parse the header of a request frame (the bytes after the int32 size prefix).

    The header version follows from (api_key, api_version). For an api key or version the codec
    has no schema for, api_key/api_version/correlation_id (the first 8 bytes) are always
    returned; client_id is read when possible, else None with body offset 8 — enough to answer
    UNSUPPORTED_VERSION (KIP-511) or close the connection.
    """
    if len(frame) < 8:
        raise FrameError("request shorter than 8 bytes")
    api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
    known_key = api_key in known_api_keys() or api_key == CONTROLLED_SHUTDOWN_KEY
    version = request_header_version(api_key, api_version) if known_key else 1
    if known_key and api_version in known_versions(api_key):
        return decode_request_header(frame, version)
    try:
        return decode_request_header(frame, version)
    except DecodeError:
        return RequestHeader(api_key, api_version, correlation_id, None), 8


def encode_response_header(version: int, correlation_id: int) -> bytes:
    try:
        return _RESP_V1.pack(correlation_id) if version >= 1 else INT32.pack(correlation_id)
    except struct.error as exc:
        raise EncodeError(f"bad correlation id: {exc}") from exc


def decode_response_header(buf: Buffer, version: int, offset: int = 0) -> tuple[int, int]:
    """Decode a response header; returns (correlation_id, body offset)."""
    end = len(buf)
    if end - offset < 4:
        raise FrameError("response shorter than its header")
    (correlation_id,) = INT32.unpack_from(buf, offset)
    pos = offset + 4
    if version >= 1:
        try:
            pos = skip_tagged_fields(buf, pos, end)
        except IndexError as exc:
            raise DecodeError("truncated response header tagged fields") from exc
    return correlation_id, pos


def frame_size(prefix: Buffer, max_size: int) -> int:
    """Validate a frame's int32 size prefix (first 4 bytes of `prefix`)."""
    if len(prefix) < 4:
        raise FrameError("truncated size prefix")
    size = int(INT32.unpack_from(prefix, 0)[0])
    if size < 0:
        raise FrameError(f"negative frame size {size}")
    if size > max_size:
        raise FrameError(f"frame size {size} exceeds the limit {max_size}")
    return size
