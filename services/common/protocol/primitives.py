"""Wire primitives shared by the generated codecs: structs, unsigned varints, UUIDs.

Generated code inlines the one-byte fast paths and calls these helpers only for the rest.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

from .exceptions import DecodeError, EncodeError

Buffer = bytes | bytearray | memoryview

INT8: Final = struct.Struct(">b")
INT16: Final = struct.Struct(">h")
INT32: Final = struct.Struct(">i")
INT64: Final = struct.Struct(">q")
UINT16: Final = struct.Struct(">H")
UINT32: Final = struct.Struct(">I")
FLOAT64: Final = struct.Struct(">d")

# struct format character per fixed-width wire type (uuid is 16 raw bytes).
FIXED_FORMATS: Final[dict[str, str]] = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
    "bool": "?",
    "uuid": "16s",
}
FIXED_SIZES: Final[dict[str, int]] = {k: struct.calcsize(">" + v) for k, v in FIXED_FORMATS.items()}

# SMALL_UVARINT[n] is the one-byte unsigned varint of n, for 0 <= n < 128.
SMALL_UVARINT: Final[tuple[bytes, ...]] = tuple(bytes((i,)) for i in range(128))
ZERO_UUID: Final = bytes(16)
UVARINT_MAX: Final = 0xFFFFFFFF  # compact lengths and tags are 32-bit unsigned in Kafka


def write_uvarint(value: int) -> bytes:
    """Encode an unsigned varint (7 bits per byte, least significant group first)."""
    if value < 0 or value > UVARINT_MAX:
        raise EncodeError(f"unsigned varint out of range: {value}")
    if value < 0x80:
        return SMALL_UVARINT[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint at `pos`; returns (value, next position).

    At most 5 bytes (32 bits) are accepted, as in Kafka's ByteUtils.readUnsignedVarint.
    """
    value = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            if value > UVARINT_MAX:
                raise DecodeError("varint too large")
            return value, pos
        shift += 7
        if shift >= 35:
            raise DecodeError("varint longer than 5 bytes")


def uuid_bytes(value: object) -> bytes:
    """Normalise a UUID field value (16 bytes, uuid.UUID or None for the zero UUID)."""
    if isinstance(value, bytes) and len(value) == 16:
        return value
    if value is None:
        return ZERO_UUID
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, bytearray | memoryview):
        raw = bytes(value)
        if len(raw) == 16:
            return raw
    raise EncodeError(f"uuid must be 16 bytes, uuid.UUID or None, not {value!r}")


def skip_tagged_fields(buf: Buffer, pos: int, end: int) -> int:
    """Skip a tagged-field section whose fields are all unknown; returns the next position."""
    count, pos = read_uvarint(buf, pos)
    if count * 2 > end - pos:
        raise DecodeError(f"tagged field count {count} exceeds remaining bytes")
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > end:
            raise DecodeError("tagged field runs past the end of the buffer")
    return pos
