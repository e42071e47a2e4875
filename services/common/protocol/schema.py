"""kio schema introspection -> the codec's own field model.

kio 0.6.5 ships one frozen dataclass per message, version and nested struct, generated from
Kafka's JSON message specs. We read them once (field order, `kafka_type`, `tag`, nullability,
defaults, `__flexible__`) and turn them into plain `EntitySpec`/`FieldSpec` records with
wire types and defaults expressed as plain Python values (ints, str, bytes, lists, dicts).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import types
import typing
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from .exceptions import UnsupportedVersionError
from .legacy_schemas import LEGACY
from .primitives import FIXED_FORMATS, ZERO_UUID

Kind = Literal["request", "response"]

# kio kafka_type -> wire type. Timedelta/datetime types are plain int milliseconds.
_WIRE_TYPES: dict[str, str] = {
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint16": "uint16",
    "uint32": "uint32",
    "float64": "float64",
    "bool": "bool",
    "string": "string",
    "bytes": "bytes",
    "records": "records",
    "uuid": "uuid",
    "error_code": "int16",
    "timedelta_i32": "int32",
    "timedelta_i64": "int64",
    "datetime_i64": "int64",
}
# Wire types that can carry null (length -1 / compact 0). uuid and datetime "nullables" in kio
# are the zero UUID and -1 on the wire, so they are plain values here.
_NULLABLE_WIRE = {"string", "bytes", "records"}


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    kafka_type: str | None  # kio's type name (None for structs)
    wire: str  # wire type of the value or array element; "struct" for nested entities
    array: bool
    nullable: bool  # null allowed on the wire (array, string/bytes/records, or KIP-893 struct)
    tag: int | None
    default: Any  # plain Python default (fresh copies are made by the codec)
    entity: EntitySpec | None = None

    @property
    def fixed(self) -> bool:
        """A single fixed-width value (packable with struct)."""
        return not self.array and self.wire in FIXED_FORMATS


@dataclass(frozen=True, slots=True)
class EntitySpec:
    name: str
    flexible: bool
    fields: tuple[FieldSpec, ...]  # untagged fields, wire order
    tagged: tuple[FieldSpec, ...]  # tagged fields, ascending tag
    field_names: tuple[str, ...]  # every field name, kio order (dict key order on decode)


def _outer_nullable(tp: Any) -> bool:
    return typing.get_origin(tp) in (types.UnionType, typing.Union) and (
        types.NoneType in typing.get_args(tp)
    )


def _strip_none(tp: Any) -> Any:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not types.NoneType]
        if len(args) == 1:
            return args[0]
    return tp


def to_plain(value: Any, kafka_type: str | None = None) -> Any:
    """Convert a kio default value into the codec's plain representation."""
    if value is None:
        if kafka_type == "uuid":
            return ZERO_UUID
        if kafka_type == "datetime_i64":
            return -1
        return None
    if isinstance(value, enum.Enum):
        return int(value.value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, tuple):
        return [to_plain(v, kafka_type) for v in value]
    if dataclasses.is_dataclass(value):
        return {
            f.name: to_plain(getattr(value, f.name), f.metadata.get("kafka_type"))
            for f in dataclasses.fields(value)
        }
    raise TypeError(f"unsupported kio default {value!r}")


def _zero(wire: str, array: bool, nullable: bool, entity: EntitySpec | None) -> Any:
    """Default for a field kio gives no default: [] for arrays, None where nullable, else 0/""."""
    if array:
        return []
    if nullable:
        return None
    if entity is not None:
        return default_dict(entity)
    return {
        "string": "",
        "bytes": b"",
        "records": b"",
        "uuid": ZERO_UUID,
        "bool": False,
        "float64": 0.0,
    }.get(wire, 0)


def default_dict(spec: EntitySpec) -> dict[str, Any]:
    """A fresh dict holding every field of `spec` at its default."""
    out: dict[str, Any] = {}
    by_name = {f.name: f for f in spec.fields + spec.tagged}
    for name in spec.field_names:
        out[name] = copy_plain(by_name[name].default)
    return out


def copy_plain(value: Any) -> Any:
    if isinstance(value, list):
        return [copy_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: copy_plain(v) for k, v in value.items()}
    return value


def _field_spec(f: dataclasses.Field[Any]) -> FieldSpec:
    tp = f.type
    assert not isinstance(tp, str), "kio dataclasses carry real annotations"
    outer_nullable = _outer_nullable(tp)
    inner = _strip_none(tp)
    array = typing.get_origin(inner) is tuple
    elem = _strip_none(typing.get_args(inner)[0]) if array else inner
    kafka_type = f.metadata.get("kafka_type")
    tag = f.metadata.get("tag")
    entity: EntitySpec | None = None
    if dataclasses.is_dataclass(elem):
        assert isinstance(elem, type)
        entity = entity_spec(elem)
        wire = "struct"
        nullable = outer_nullable
    else:
        if kafka_type not in _WIRE_TYPES:
            raise TypeError(f"unsupported kafka_type {kafka_type!r} for {f.name}")
        wire = _WIRE_TYPES[kafka_type]
        nullable = outer_nullable and (array or wire in _NULLABLE_WIRE)
    if f.default is not dataclasses.MISSING:
        default = None if array and f.default is None else to_plain(f.default, kafka_type)
    else:
        default = _zero(wire, array, nullable, entity)
    return FieldSpec(
        name=f.name,
        kafka_type=kafka_type,
        wire=wire,
        array=array,
        nullable=nullable,
        tag=None if tag is None else int(tag),
        default=default,
        entity=entity,
    )


@functools.cache
def entity_spec(cls: type) -> EntitySpec:
    """The field model of one kio dataclass (message or nested struct)."""
    flexible = bool(getattr(cls, "__flexible__", False))
    specs = [_field_spec(f) for f in dataclasses.fields(cls)]
    untagged = tuple(s for s in specs if s.tag is None)
    tagged = tuple(sorted((s for s in specs if s.tag is not None), key=lambda s: s.tag or 0))
    if tagged and not flexible:
        raise TypeError(f"{cls.__name__}: tagged fields in a non-flexible version")
    return EntitySpec(
        name=cls.__name__,
        flexible=flexible,
        fields=untagged,
        tagged=tagged,
        field_names=tuple(s.name for s in specs),
    )


def kio_class(api_key: int, api_version: int, kind: Kind) -> type:
    """The kio dataclass of a request or response body (or a legacy_schemas one)."""
    legacy = LEGACY.get((api_key, api_version))
    if legacy is not None:
        return legacy[0] if kind == "request" else legacy[1]
    try:
        name = api_key_map[api_key]
        path = schema_name_map[name][api_version][
            EntityType.request if kind == "request" else EntityType.response
        ]
    except KeyError:
        raise UnsupportedVersionError(api_key, api_version) from None
    module_name, _, attr = path.partition(":")
    module = __import__(module_name, fromlist=[attr])
    cls = getattr(module, attr)
    assert isinstance(cls, type)
    return cls


def message_spec(api_key: int, api_version: int, kind: Kind) -> EntitySpec:
    return entity_spec(kio_class(api_key, api_version, kind))


@functools.cache
def known_versions(api_key: int) -> tuple[int, ...]:
    """Versions kio has schemas for (ascending); empty for an unknown key."""
    name = api_key_map.get(api_key)
    if name is None:
        return ()
    legacy = {v for k, v in LEGACY if k == api_key}
    return tuple(sorted(set(schema_name_map[name]) | legacy))


@functools.cache
def known_api_keys() -> frozenset[int]:
    return frozenset(api_key_map)


@functools.cache
def first_flexible_version(api_key: int) -> int | None:
    """Lowest version whose request is flexible (Kafka's `flexibleVersions` "N+"), if any."""
    for version in known_versions(api_key):
        if getattr(kio_class(api_key, version, "request"), "__flexible__", False):
            return version
    return None


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether (api_key, api_version) uses flexible encoding; also defined for unknown versions,
    since Kafka's flexible ranges are open-ended ("N+")."""
    first = first_flexible_version(api_key)
    return first is not None and api_version >= first
