"""Kafka's ``RequestMetrics`` ``ErrorsPerSec`` for the gateway: every error code a response
carries, counted per request type and error name, ``NONE`` included.

Kafka marks, for each response it sends, ``response.errorCounts()``: the top-level error code
and the one of each partition, topic or resource in it (a Produce to six partitions counts six).
Here that is every field of type ``error_code`` in the response's schema, found once per API
version (``_plan``) so a response is read only along the paths that lead to one. The rules file
divides the failing ones by all of them (docs/operations.md, "Alerts").
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import message_spec
from services.common.protocol.schema import EntitySpec
from services.gateway.metrics import REQUEST_ERRORS

#: (error-code fields of an entity, (field, is array, plan) of the nested structs holding one)
Plan = tuple[tuple[str, ...], tuple[tuple[str, bool, "Plan"], ...]]

_children: dict[tuple[str, int], Any] = {}


def _entity_plan(spec: EntitySpec) -> Plan:
    errors, nested = [], []
    for f in (*spec.fields, *spec.tagged):
        if f.kafka_type == "error_code" and not f.array:
            errors.append(f.name)
        elif f.entity is not None:
            sub = _entity_plan(f.entity)
            if sub[0] or sub[1]:
                nested.append((f.name, f.array, sub))
    return tuple(errors), tuple(nested)


@functools.cache
def _plan(api_key: int, api_version: int) -> Plan:
    try:
        return _entity_plan(message_spec(api_key, api_version, "response"))
    except Exception:  # noqa: BLE001 - no schema (legacy body): nothing to count
        return (), ()


def _count(node: dict[str, Any], plan: Plan, counts: Counter[int]) -> None:
    errors, nested = plan
    for name in errors:
        counts[node.get(name, 0)] += 1  # absent: encoded as its default, NONE
    for name, array, sub in nested:
        value = node.get(name)
        if not value:
            continue
        if not array:
            _count(value, sub, counts)
        elif not sub[1] and len(sub[0]) == 1:  # leaf structs (partitions): counted in C
            counts.update(item.get(sub[0][0], 0) for item in value)
        else:
            for item in value:
                _count(item, sub, counts)


def error_counts(api_key: int, api_version: int, resp: dict[str, Any] | None) -> Counter[int]:
    """error code -> how many error-code fields of the response body ``resp`` hold it."""
    counts: Counter[int] = Counter()
    if resp is not None:
        _count(resp, _plan(api_key, api_version), counts)
    return counts


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def record(request: str, api_key: int, api_version: int, resp: dict[str, Any] | None) -> None:
    """Count the error codes of one response to ``request`` (the API's name)."""
    for code, n in error_counts(api_key, api_version, resp).items():
        key = (request, int(code))
        child = _children.get(key)
        if child is None:
            child = _children[key] = REQUEST_ERRORS.labels(request, _error_name(key[1]))
        child.inc(n)
