"""Varints as Kafka writes them: 7 bits per byte, low group first, high bit = more follows.

Signed values (record lengths, deltas) are zig-zag encoded first: ``(n << 1) ^ (n >> 63)``.
A varint holds an int32 (at most 5 bytes), a varlong an int64 (at most 10 bytes). Decoders
take ``(buf, pos)`` and return ``(value, next_pos)``; truncated, over-long or out-of-range
input raises ``KafkaError(CORRUPT_MESSAGE)``.
"""

from __future__ import annotations

from services.common.errors import ErrorCode, KafkaError

Buffer = bytes | bytearray | memoryview

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT32_MAX = (1 << 32) - 1
_UINT64_MAX = (1 << 64) - 1

# One-byte encodings cover most lengths and deltas; precompute them.
_SMALL = [bytes([n]) for n in range(0x80)]


def _encode_unsigned(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode_unsigned(buf: Buffer, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"truncated {what}")
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos + i + 1
        shift += 7
    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{what} is longer than {max_bytes} bytes")


def encode_unsigned_varint(value: int) -> bytes:
    if not 0 <= value <= _UINT32_MAX:
        raise ValueError(f"unsigned varint out of range: {value}")
    return _encode_unsigned(value)


def decode_unsigned_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    value, pos = _decode_unsigned(buf, pos, 5, "varint")
    if value > _UINT32_MAX:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "varint does not fit in 32 bits")
    return value, pos


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of an int32."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & _UINT32_MAX)


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    # one- and two-byte values (|v| < 8192) are nearly all of them in records: no loop
    if pos + 1 < len(buf):
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        b2 = buf[pos + 1]
        if b2 < 0x80:
            raw = (b & 0x7F) | (b2 << 7)
            return (raw >> 1) ^ -(raw & 1), pos + 2
    raw, pos = _decode_unsigned(buf, pos, 5, "varint")
    if raw > _UINT32_MAX:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "varint does not fit in 32 bits")
    return (raw >> 1) ^ -(raw & 1), pos


def encode_varlong(value: int) -> bytes:
    """Zig-zag varint of an int64."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & _UINT64_MAX)


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:
        b = buf[pos]
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _decode_unsigned(buf, pos, 10, "varlong")
    if raw > _UINT64_MAX:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "varlong does not fit in 64 bits")
    return (raw >> 1) ^ -(raw & 1), pos


def size_of_varint(value: int) -> int:
    """Encoded size in bytes of the zig-zag varint (or varlong) of ``value``."""
    raw = (value << 1) ^ (value >> 63)
    raw &= _UINT64_MAX
    size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size
