"""Reading and writing Kafka's internal-topic key/value schemas: an int16 version, then
classic (int16-length strings, int32-length bytes and arrays) or, for flexible versions,
compact fields with tagged fields."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from services.common.errors import ErrorCode, KafkaError
from services.common.records.record import build_keyed_batch
from services.common.records.varint import decode_unsigned_varint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class SchemaWriter:
    """Writes one non-flexible key or value, starting with its version."""

    __slots__ = ("parts",)

    def __init__(self, version: int) -> None:
        self.parts: list[bytes] = [_I16.pack(version)]

    def i8(self, v: int) -> None:
        self.parts.append(struct.pack(">b", v))

    def i16(self, v: int) -> None:
        self.parts.append(_I16.pack(v))

    def i32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def i64(self, v: int) -> None:
        self.parts.append(_I64.pack(v))

    def array_len(self, n: int) -> None:
        self.parts.append(_I32.pack(n))

    def string(self, v: str | None) -> None:
        if v is None:
            self.parts.append(_I16.pack(-1))
            return
        data = v.encode()
        self.parts.append(_I16.pack(len(data)))
        self.parts.append(data)

    def bytes_(self, v: bytes) -> None:
        self.parts.append(_I32.pack(len(v)))
        self.parts.append(bytes(v))

    def done(self) -> bytes:
        return b"".join(self.parts)


class SchemaReader:
    """Reads one key or value; ``flexible`` switches to compact strings/arrays + tagged fields.
    Malformed input raises KafkaError(CORRUPT_MESSAGE) naming ``what``."""

    __slots__ = ("data", "pos", "flexible", "what")

    def __init__(self, data: bytes | memoryview, what: str) -> None:
        self.data = bytes(data)
        self.pos = 0
        self.flexible = False
        self.what = what

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.corrupt(f"needs {n} bytes at {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def corrupt(self, why: str) -> KafkaError:
        return KafkaError(ErrorCode.CORRUPT_MESSAGE, f"malformed {self.what}: {why}")

    def version(self, highest: int) -> int:
        """The leading version, refused outside 0..``highest``."""
        version = self.i16()
        if not 0 <= version <= highest:
            raise self.corrupt(f"unknown version {version}")
        return version

    def i8(self) -> int:
        b = self._take(1)[0]
        return b - 256 if b > 127 else b

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def _uvarint(self) -> int:
        try:
            value, self.pos = decode_unsigned_varint(self.data, self.pos)
        except (IndexError, ValueError) as exc:
            raise self.corrupt(f"bad varint at {self.pos}") from exc
        return value

    def nullable_string(self) -> str | None:
        n = self._uvarint() - 1 if self.flexible else self.i16()
        if n < 0:
            return None
        return self._take(n).decode("utf-8", "replace")

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise self.corrupt("null where a string is required")
        return s

    def bytes_(self) -> bytes:
        n = self._uvarint() - 1 if self.flexible else self.i32()
        return b"" if n < 0 else self._take(n)

    def array_len(self) -> int:
        n = self._uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            return 0
        if n > len(self.data) - self.pos:  # every element takes at least one byte
            raise self.corrupt(f"array of {n} elements in {len(self.data) - self.pos} bytes")
        return n

    def tagged_fields(self) -> dict[int, bytes]:
        """The tagged fields of a flexible struct, raw by tag (none outside flexible versions)."""
        out: dict[int, bytes] = {}
        if not self.flexible:
            return out
        for _ in range(self._uvarint()):
            tag = self._uvarint()
            out[tag] = self._take(self._uvarint())
        return out

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.corrupt(f"{len(self.data) - self.pos} bytes left over")


def build_records_batch(
    records: Sequence[tuple[bytes, bytes | None]],
    *,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    timestamp_ms: int,
) -> bytes:
    """One uncompressed, idempotent (non-transactional) batch; a None value is a tombstone."""
    return build_keyed_batch(
        records,
        timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
