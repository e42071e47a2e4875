"""Convert between the codec's plain dicts and kio's dataclass instances (tests only)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
)

_UTC = datetime.UTC


def _prim_to_kio(kafka_type: str | None, value: Any) -> Any:
    if kafka_type == "error_code":
        return ErrorCode(value)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64":
        if value == -1:
            return None
        return datetime.datetime.fromtimestamp(value / 1000, tz=_UTC)
    if kafka_type == "uuid":
        # kio writes a tagged uuid unless it equals the field default (None), so a zero UUID
        # must be None for kio to omit it as Kafka does.
        raw = bytes(value)
        return None if raw == bytes(16) else uuid.UUID(bytes=raw)
    if kafka_type == "records" and value is not None:
        return bytes(value)
    return value


def to_kio(cls: type, data: dict[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        value = data[f.name]
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        if value is None:
            kwargs[f.name] = None
        elif isinstance(kind, EntityTupleField):
            kwargs[f.name] = tuple(to_kio(kind.type_, v) for v in value)
        elif isinstance(kind, EntityField):
            kwargs[f.name] = to_kio(kind.type_, value)
        elif isinstance(kind, PrimitiveTupleField):
            kwargs[f.name] = tuple(_prim_to_kio(kafka_type, v) for v in value)
        else:
            kwargs[f.name] = _prim_to_kio(kafka_type, value)
    return cls(**kwargs)


def _prim_from_kio(kafka_type: str | None, value: Any) -> Any:
    if value is None:
        if kafka_type == "uuid":
            return bytes(16)
        if kafka_type == "datetime_i64":
            return -1
        return None
    if isinstance(value, enum.Enum):
        return int(value.value)
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    return value


def from_kio(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        if isinstance(kind, EntityTupleField):
            out[f.name] = None if value is None else [from_kio(v) for v in value]
        elif isinstance(kind, EntityField):
            out[f.name] = None if value is None else from_kio(value)
        elif isinstance(kind, PrimitiveTupleField):
            out[f.name] = None if value is None else [_prim_from_kio(kafka_type, v) for v in value]
        else:
            out[f.name] = _prim_from_kio(kafka_type, value)
    return out
