"""Protobuf wire-format primitives for the record-carrying internal messages.

The gateway and storage write and read ``AppendRequest`` / ``FetchResponse`` in protobuf's
wire format by hand so record batches are copied once (see services/gateway/storage_wire.py
and services/storage/wire.py); everything else uses the generated classes.
"""

from __future__ import annotations

from collections.abc import Iterator

Buffer = bytes | bytearray | memoryview

VARINT = 0
LENGTH_DELIMITED = 2

_SMALL = tuple(bytes((i,)) for i in range(128))
_SIGN = 1 << 63
_UINT64 = 1 << 64


class WireError(ValueError):
    """Bytes that are not a valid message."""


def varint(value: int) -> bytes:
    """A protobuf varint; negative int32/int64 values take ten bytes (two's complement)."""
    if 0 <= value < 128:
        return _SMALL[value]
    if value < 0:
        value += _UINT64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint((number << 3) | wire_type)


def int_field(number: int, value: int) -> bytes:
    """An int32/int64 field; proto3 leaves zero out."""
    return tag(number, VARINT) + varint(value) if value else b""


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """(signed 64-bit value, next position)."""
    value = shift = 0
    while True:
        if pos >= end:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value - _UINT64 if value >= _SIGN else value), pos
        shift += 7
        if shift > 63:
            raise WireError("varint longer than ten bytes")


def iter_fields(buf: Buffer, pos: int, end: int) -> Iterator[tuple[int, int | None, int, int]]:
    """(field number, varint value or None, start, stop) per field; ``start:stop`` is a
    length-delimited value. Fixed-width fields are skipped."""
    while pos < end:
        key, pos = read_varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = read_varint(buf, pos, end)
            yield number, value, pos, pos
        elif wire == LENGTH_DELIMITED:
            size, pos = read_varint(buf, pos, end)
            if size < 0 or pos + size > end:
                raise WireError("length-delimited field runs past its message")
            yield number, None, pos, pos + size
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise WireError(f"unsupported wire type {wire}")
    if pos != end:
        raise WireError("field runs past its message")
