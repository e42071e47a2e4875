"""Our field model (from kio) against Kafka's own JSON message specs.

kafka-python 3.x ships the JSON files of clients/src/main/resources/common/message/; for every
API and version both know, the wire layout we derive (types, arrays, nullability, tags, order)
and explicit defaults must match Kafka's spec.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import pytest

from services.common.protocol import known_api_keys, known_versions, message_spec
from services.common.protocol.schema import EntitySpec

load_json = pytest.importorskip("kafka.protocol.schemas.load_json").load_json

_PRIMITIVES = {
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "float64",
    "bool",
    "string",
    "bytes",
    "records",
    "uuid",
}
_NULLABLE = {"string", "bytes", "records"}


def _in(spec: str | None, version: int) -> bool:
    if not spec or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    if "-" in spec:
        low, high = spec.split("-")
        return int(low) <= version <= int(high)
    return version == int(spec)


def _default(raw: str, wire: str) -> Any:
    if raw == "null":
        return None
    if wire == "bool":
        return raw == "true"
    if wire in ("string",):
        return raw
    if wire == "float64":
        return float(raw)
    return int(raw, 0)


def _json_sig(fields: list[dict[str, Any]], version: int) -> list[tuple[Any, ...]]:
    untagged: list[tuple[Any, ...]] = []
    tagged: list[tuple[Any, ...]] = []
    for f in fields:
        if not _in(f["versions"], version):
            continue
        kind = f["type"]
        array = kind.startswith("[]")
        inner = kind[2:] if array else kind
        nullable = _in(f.get("nullableVersions"), version)
        tag = f.get("tag") if _in(f.get("taggedVersions"), version) else None
        if inner in _PRIMITIVES:
            wire: Any = inner
            nullable = nullable and (array or inner in _NULLABLE)
            default = None
            if "default" in f and not array:
                default = _default(str(f["default"]), inner)
        else:
            wire = ("struct", tuple(_json_sig(f["fields"], version)))
            default = None
        entry = (wire, array, nullable, tag, default)
        (untagged if tag is None else tagged).append(entry)
    return untagged + sorted(tagged, key=lambda e: e[3])


def _our_sig(spec: EntitySpec, explicit: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for f, theirs in zip(spec.fields + spec.tagged, explicit, strict=False):
        if f.entity is not None:
            sub = [e for e in theirs[0][1]] if isinstance(theirs[0], tuple) else []
            wire: Any = ("struct", tuple(_our_sig(f.entity, sub)))
            default = None
        else:
            wire = f.wire
            # Only explicit JSON defaults are compared (our zero for other fields is a choice).
            default = f.default if theirs[4] is not None else None
        out.append((wire, f.array, f.nullable, f.tag, default))
    return out


@functools.cache
def _json_spec(api_key: int, kind: str) -> dict[str, Any] | None:
    from kio.schema.index import api_key_map

    camel = "".join(part.capitalize() for part in api_key_map[api_key].split("_"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            spec: dict[str, Any] = load_json(
                camel + ("Request" if kind == "request" else "Response")
            )
    except FileNotFoundError:
        return None
    return spec


# APIs kafka-python ships no JSON for (KRaft-internal, share groups, ...) are not listed.
CASES = [
    (key, kind)
    for key in sorted(known_api_keys())
    for kind in ("request", "response")
    if _json_spec(key, kind) is not None
]


@pytest.mark.parametrize("key,kind", CASES, ids=[f"{k}-{c}" for k, c in CASES])
def test_layout_matches_kafka_json(key: int, kind: str) -> None:
    spec_json = _json_spec(key, kind)
    assert spec_json is not None
    assert spec_json["apiKey"] == key
    checked = 0
    for version in known_versions(key):
        if not _in(spec_json["validVersions"], version):
            continue
        ours = message_spec(key, version, kind)  # type: ignore[arg-type]
        assert ours.flexible == _in(spec_json["flexibleVersions"], version)
        theirs = _json_sig(spec_json["fields"], version)
        assert len(ours.fields) + len(ours.tagged) == len(theirs), version
        assert _our_sig(ours, theirs) == theirs, version
        checked += 1
    assert checked > 0
