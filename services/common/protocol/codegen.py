"""Generate straight-line Python encoders/decoders from an `EntitySpec`.

One function per message version: nested structs and arrays are inlined as loops, runs of
fixed-width fields become one precompiled `struct.Struct` call, and runs that also hold arrays of
fixed-width numbers (replica lists, partition ids) are packed by one Struct chosen by the array
lengths (built on first use, cached per run). Encoders append bytes chunks to a list that the
caller joins once. Decoders keep a position into the buffer and check every length and count
against the bytes that remain before using it.

Generated signatures (encode_gen.py, decode_gen.py):
    encode(d: dict, out: list[bytes]) -> None
    decode(buf, pos: int, mv: memoryview, end: int) -> tuple[dict, int]
This module holds what both share: the source builder and the wire-size arithmetic.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .exceptions import DecodeError
from .primitives import (
    FIXED_FORMATS,
    FIXED_SIZES,
    INT16,
    INT32,
    SMALL_UVARINT,
    ZERO_UUID,
    read_uvarint,
    skip_tagged_fields,
    uuid_bytes,
    write_uvarint,
)
from .schema import EntitySpec, FieldSpec

Encoder = Callable[[dict[str, Any], list[Any]], None]
Decoder = Callable[[Any, int, memoryview, int], tuple[dict[str, Any], int]]

_MISSING = object()


def _base_namespace() -> dict[str, Any]:
    return {
        "DecodeError": DecodeError,
        "_MISSING": _MISSING,
        "_SUV": SMALL_UVARINT,
        "_wuv": write_uvarint,
        "_ruv": read_uvarint,
        "_uuid": uuid_bytes,
        "_ZU": ZERO_UUID,
        "_i16p": INT16.pack,
        "_i32p": INT32.pack,
        "_i16u": INT16.unpack_from,
        "_i32u": INT32.unpack_from,
        "_pack": struct.pack,
        "_unpack_from": struct.unpack_from,
        "_skip_tags": skip_tagged_fields,
    }


def _is_literal(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | str | bytes):
        return True
    return isinstance(value, float) and value == value and abs(value) != float("inf")


def fixed_array(f: FieldSpec) -> bool:
    return f.array and f.wire in FIXED_FORMATS and f.wire != "uuid"


def min_size(spec: EntitySpec) -> int:
    """Fewest bytes one instance of `spec` can take on the wire."""
    total = 1 if spec.flexible else 0
    for f in spec.fields:
        total += _min_field(f, spec.flexible)
    return total


def _min_field(f: FieldSpec, flexible: bool) -> int:
    if f.array:
        return 1 if flexible else 4
    if f.wire in FIXED_SIZES:
        return FIXED_SIZES[f.wire]
    if f.wire == "string":
        return 1 if flexible else 2
    if f.wire in ("bytes", "records"):
        return 1 if flexible else 4
    assert f.entity is not None
    return 1 if f.nullable else min_size(f.entity)


def element_min(f: FieldSpec, flexible: bool) -> int:
    if f.wire in FIXED_SIZES:
        size = FIXED_SIZES[f.wire]
    elif f.wire == "string":
        size = 1 if flexible else 2
    elif f.entity is not None:
        size = min_size(f.entity)
    else:
        size = 1 if flexible else 4
    return max(size, 1)


class SourceBuilder:
    """Source builder: lines, a namespace of constants, unique local names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = _base_namespace()
        self._n = 0

    def var(self, prefix: str = "v") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def const(self, value: Any, prefix: str = "K") -> str:
        name = self.var(prefix)
        self.ns[name] = value
        return name

    def lit(self, value: Any) -> str:
        """Source for a read-only value: a literal, or a shared constant."""
        if _is_literal(value):
            return repr(value)
        if isinstance(value, list) and not value:
            return "()"
        return self.const(value)

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    def compile(self, name: str, label: str) -> Any:
        source = "\n".join(self.lines) + "\n"
        code = compile(source, f"<kafka codec {label}>", "exec")
        exec(code, self.ns)  # noqa: S102 - source generated from trusted schemas
        fn = self.ns[name]
        fn.__source__ = source
        return fn
