"""Codec registry and the public encode/decode functions.

Codecs are generated on first use per (api_key, api_version, request|response) and cached;
`precompile()` builds a set of them up front (e.g. at gateway start).

Frames: `encode_request`/`encode_response` return the whole frame, int32 size prefix included;
`encode_response_chunks` returns the same frame as a list of buffers (large record sets uncopied).
`parse_request_header`, `decode_request` and `decode_response` take the frame *without* its size
prefix (what a reader has after reading `size` bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .api_keys import ApiKey
from .codegen import Decoder, Encoder
from .decode_gen import generate_decoder
from .encode_gen import generate_encoder
from .exceptions import DecodeError, EncodeError, ProtocolError
from .headers import decode_response_header as _decode_response_header
from .headers import (
    encode_request_header,
    encode_response_header,
    request_header_version,
    response_header_version,
)
from .primitives import INT32, Buffer
from .schema import EntitySpec, Kind, message_spec
from .versions import SUPPORTED_VERSIONS, api_versions_entries

_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError, MemoryError)
_ENCODE_ERRORS = (struct.error, TypeError, AttributeError, ValueError, OverflowError)


class Codec(NamedTuple):
    spec: EntitySpec
    encode: Encoder
    decode: Decoder
    header_version: int


_UNSUPPORTED_VERSION = b"\x00\x23"  # error code 35 as int16

_CODECS: dict[tuple[int, int, Kind], Codec] = {}


def get_codec(api_key: int, api_version: int, kind: Kind) -> Codec:
    """The cached codec of one message body; raises UnsupportedVersionError if kio lacks it."""
    key = (api_key, api_version, kind)
    codec = _CODECS.get(key)
    if codec is None:
        spec = message_spec(api_key, api_version, kind)
        if kind == "request":
            header_version = request_header_version(api_key, api_version)
        else:
            header_version = response_header_version(api_key, api_version)
        codec = Codec(spec, generate_encoder(spec), generate_decoder(spec), header_version)
        _CODECS[key] = codec
    return codec


def precompile(versions: Mapping[ApiKey, tuple[int, int]] | None = None) -> int:
    """Generate the request and response codecs of every version in `versions`
    (default: SUPPORTED_VERSIONS). Returns how many codecs exist afterwards."""
    for key, (low, high) in (SUPPORTED_VERSIONS if versions is None else versions).items():
        for version in range(low, high + 1):
            get_codec(key, version, "request")
            get_codec(key, version, "response")
    return len(_CODECS)


def _as_view(buf: Buffer) -> tuple[Buffer, memoryview]:
    mv = memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
        return mv, mv
    return (mv if isinstance(buf, memoryview) else buf), mv


def _decode_body(codec: Codec, buf: Buffer, offset: int) -> tuple[dict[str, Any], int]:
    data, mv = _as_view(buf)
    end = len(mv)
    if offset < 0 or offset > end:
        raise DecodeError(f"offset {offset} outside the buffer")
    try:
        return codec.decode(data, offset, mv, end)
    except ProtocolError:
        raise
    except _DECODE_ERRORS as exc:
        raise DecodeError(f"malformed {codec.spec.name}: {exc}") from exc


def _encode_pieces(codec: Codec, header: bytes, body: Mapping[str, Any]) -> list[Any]:
    """The frame as the encoder's pieces, size prefix first."""
    out: list[Any] = [b"", header]
    try:
        codec.encode(body, out)  # type: ignore[arg-type]
    except ProtocolError:
        raise
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {codec.spec.name}: {exc!r}") from exc
    out[0] = INT32.pack(sum(map(len, out)))
    return out


def _encode_frame(codec: Codec, header: bytes, body: Mapping[str, Any]) -> bytes:
    return b"".join(_encode_pieces(codec, header, body))


# Pieces at least this long (record sets) are left out of the joins of encode_response_chunks.
LARGE_CHUNK = 64 * 1024


def _chunks(out: list[Any]) -> list[Buffer]:
    """``out`` with each run of small pieces joined; large pieces are kept as they are."""
    chunks: list[Buffer] = []
    small: list[Any] = []
    for piece in out:
        if len(piece) < LARGE_CHUNK:
            small.append(piece)
            continue
        if small:
            chunks.append(b"".join(small))
            small.clear()
        chunks.append(piece)
    if small:
        chunks.append(b"".join(small))
    return chunks


def decode_request(api_key: int, api_version: int, buf: Buffer, offset: int = 0) -> dict[str, Any]:
    """Decode a request body starting at `offset` (the body offset from parse_request_header)."""
    return _decode_body(get_codec(api_key, api_version, "request"), buf, offset)[0]


def decode_response_body(
    api_key: int, api_version: int, buf: Buffer, offset: int = 0
) -> tuple[dict[str, Any], int]:
    """Decode a response body at `offset`; returns (body, position after it)."""
    return _decode_body(get_codec(api_key, api_version, "response"), buf, offset)


def decode_request_body(
    api_key: int, api_version: int, buf: Buffer, offset: int = 0
) -> tuple[dict[str, Any], int]:
    """Decode a request body at `offset`; returns (body, position after it)."""
    return _decode_body(get_codec(api_key, api_version, "request"), buf, offset)


def encode_response(
    api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any]
) -> bytes:
    """Full response frame: int32 size + response header (v0/v1) + body."""
    codec = get_codec(api_key, api_version, "response")
    return _encode_frame(codec, encode_response_header(codec.header_version, correlation_id), body)


def encode_response_chunks(
    api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any]
) -> list[Buffer]:
    """The frame of `encode_response` as a list of buffers to write in order (e.g. with
    ``transport.writelines``): record sets of LARGE_CHUNK bytes or more are not copied into it,
    so a response of tens of MiB is never assembled in one buffer."""
    codec = get_codec(api_key, api_version, "response")
    header = encode_response_header(codec.header_version, correlation_id)
    return _chunks(_encode_pieces(codec, header, body))


def encode_request_body(api_key: int, api_version: int, body: Mapping[str, Any]) -> bytes:
    """A request body alone (no size prefix, no header): what the gateway forwards to a
    coordinator inside an internal RPC."""
    return b"".join(_encode_pieces(get_codec(api_key, api_version, "request"), b"", body)[1:])


def encode_response_body(api_key: int, api_version: int, body: Mapping[str, Any]) -> bytes:
    """A response body alone (no size prefix, no header)."""
    return b"".join(_encode_pieces(get_codec(api_key, api_version, "response"), b"", body)[1:])


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: Mapping[str, Any],
) -> bytes:
    """Full request frame: int32 size + request header (v1/v2) + body."""
    codec = get_codec(api_key, api_version, "request")
    header = encode_request_header(
        codec.header_version, api_key, api_version, correlation_id, client_id
    )
    return _encode_frame(codec, header, body)


def decode_response(api_key: int, api_version: int, buf: Buffer) -> tuple[int, dict[str, Any]]:
    """Decode a response frame (without size prefix); returns (correlation_id, body)."""
    codec = get_codec(api_key, api_version, "response")
    correlation_id, pos = _decode_response_header(buf, codec.header_version)
    if api_key == ApiKey.API_VERSIONS and bytes(buf[pos : pos + 2]) == _UNSUPPORTED_VERSION:
        # KIP-511: a broker that does not support our ApiVersions version answers with a v0 body.
        codec = get_codec(api_key, 0, "response")
    return correlation_id, _decode_body(codec, buf, pos)[0]


def encode_api_versions_fallback(
    correlation_id: int, supported: Mapping[ApiKey, tuple[int, int]] | None = None
) -> bytes:
    """KIP-511: the answer to an ApiVersions request of a version we do not support —
    an ApiVersions v0 body (response header v0) with UNSUPPORTED_VERSION (35) and our ranges."""
    body = {
        "error_code": 35,
        "api_keys": api_versions_entries(dict(supported or SUPPORTED_VERSIONS)),
    }
    return encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)


def iter_codecs() -> Iterable[tuple[tuple[int, int, Kind], Codec]]:
    """The codecs generated so far (for diagnostics and tests)."""
    return list(_CODECS.items())
