"""Hypothesis strategies that draw message dicts from the codec's schema model."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from services.common.protocol.schema import EntitySpec, FieldSpec

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
_ERROR_CODES = sorted(int(e.value) for e in ErrorCode)


def _scalar(f: FieldSpec, kio_safe: bool) -> st.SearchStrategy[Any]:
    wire = f.wire
    if kio_safe and f.kafka_type == "error_code":
        return st.sampled_from(_ERROR_CODES)
    if kio_safe and f.kafka_type == "datetime_i64":
        return st.integers(0, 2**40)
    if kio_safe and f.kafka_type in ("timedelta_i32", "timedelta_i64"):
        return st.integers(-(2**31), 2**31 - 1)
    if wire in _INT_RANGES:
        low, high = _INT_RANGES[wire]
        return st.integers(low, high)
    if wire == "bool":
        return st.booleans()
    if wire == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if wire == "uuid":
        return st.binary(min_size=16, max_size=16)
    if wire == "string":
        return st.text(max_size=6)
    if wire in ("bytes", "records"):
        return st.binary(max_size=12)
    assert f.entity is not None
    return entity_strategy(f.entity, kio_safe)


def _field(f: FieldSpec, kio_safe: bool) -> st.SearchStrategy[Any]:
    inner = _scalar(f, kio_safe)
    if f.array:
        inner = st.lists(inner, max_size=3)
    if f.nullable:
        inner = st.none() | inner
    return inner


_CACHE: dict[tuple[int, bool], st.SearchStrategy[dict[str, Any]]] = {}


def entity_strategy(spec: EntitySpec, kio_safe: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts holding every field of `spec` (kio_safe: only values kio's own types accept)."""
    key = (id(spec), kio_safe)
    if key not in _CACHE:
        by_name = {f.name: f for f in spec.fields + spec.tagged}
        _CACHE[key] = st.fixed_dictionaries(
            {name: _field(by_name[name], kio_safe) for name in spec.field_names}
        )
    return _CACHE[key]
