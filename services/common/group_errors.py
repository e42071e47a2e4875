"""Whole-request error answers of the group APIs, in each API version's shape.

``error_response(api_key, version, request, code)`` is what Kafka's ``getErrorResponse`` of
that request builds: the error per partition (OffsetCommit, OffsetFetch v1), per group
(DescribeGroups, DeleteGroups, OffsetFetch v8) or once for the request (the others, where
members, topics and groups are left empty). Every dict starts from the version's schema defaults
(``default_dict``), so it holds exactly that version's fields; values a version lacks are not
set. Used by the gateway when a group request cannot be forwarded, and by anything else that
must answer a group request it cannot serve.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey, default_dict, message_spec
from services.common.protocol.schema import EntitySpec

Body = dict[str, Any]

# The group APIs and Kafka's request names for them (the ``request`` label of request metrics).
GROUP_API_NAMES: dict[ApiKey, str] = {
    ApiKey.OFFSET_COMMIT: "OffsetCommit",
    ApiKey.OFFSET_FETCH: "OffsetFetch",
    ApiKey.JOIN_GROUP: "JoinGroup",
    ApiKey.HEARTBEAT: "Heartbeat",
    ApiKey.LEAVE_GROUP: "LeaveGroup",
    ApiKey.SYNC_GROUP: "SyncGroup",
    ApiKey.DESCRIBE_GROUPS: "DescribeGroups",
    ApiKey.LIST_GROUPS: "ListGroups",
    ApiKey.DELETE_GROUPS: "DeleteGroups",
    ApiKey.OFFSET_DELETE: "OffsetDelete",
    ApiKey.TXN_OFFSET_COMMIT: "TxnOffsetCommit",
    # from transaction coordinators only: the markers of __consumer_offsets partitions
    ApiKey.WRITE_TXN_MARKERS: "WriteTxnMarkers",
}
GROUP_APIS = frozenset(GROUP_API_NAMES)
OFFSET_FETCH_BATCHED_VERSION = 8  # OffsetFetch v8+ names several groups
JOIN_NULLABLE_PROTOCOL_VERSION = 7  # JoinGroup v7+: protocol name null when unknown
INVALID_OFFSET = -1
NO_LEADER_EPOCH = -1


def _shaped(spec: EntitySpec, **values: Any) -> Body:
    """``spec``'s defaults, with the ``values`` that are fields of it."""
    out = default_dict(spec)
    for name, value in values.items():
        if name in out:
            out[name] = value
    return out


def _entity(spec: EntitySpec, field_name: str) -> EntitySpec:
    for f in (*spec.fields, *spec.tagged):
        if f.name == field_name and f.entity is not None:
            return f.entity
    raise KeyError(f"{spec.name} has no struct field {field_name}")


def _by_topic(
    spec: EntitySpec, field: str, partitions: Iterable[tuple[str, int]], **values: Any
) -> list[Body]:
    """``spec.<field>`` topic entries (first-seen topic order, duplicates once), each partition
    answered with ``values``."""
    topic_spec = _entity(spec, field)
    part_spec = _entity(topic_spec, "partitions")
    topics: dict[str, list[Body]] = {}
    for name, index in dict.fromkeys(partitions):
        topics.setdefault(name, []).append(_shaped(part_spec, partition_index=index, **values))
    return [_shaped(topic_spec, name=n, partitions=parts) for n, parts in topics.items()]


def _committed(req: Body) -> list[tuple[str, int]]:
    return [
        (t.get("name") or "", p.get("partition_index", 0))
        for t in req.get("topics") or ()
        for p in t.get("partitions") or ()
    ]


def _fetched(topics: Iterable[Body] | None) -> list[tuple[str, int]]:
    return [
        (t.get("name") or "", p) for t in topics or () for p in t.get("partition_indexes") or ()
    ]


def error_response(api_key: int, version: int, req: Body, code: ErrorCode) -> Body:
    """The answer ``code`` for everything ``req`` asks (``req``: the decoded request body).

    Raises ValueError for an API that is not a group API."""
    if api_key not in GROUP_APIS:
        raise ValueError(f"api {api_key} is not a group API")
    spec = message_spec(api_key, version, "response")
    error = int(code)
    if api_key in (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT):
        return _shaped(spec, topics=_by_topic(spec, "topics", _committed(req), error_code=error))
    if api_key == ApiKey.WRITE_TXN_MARKERS:
        return _shaped(spec, markers=[_marker_result(spec, m, error) for m in req["markers"]])
    if api_key == ApiKey.OFFSET_FETCH:
        return _offset_fetch(spec, version, req, error)
    if api_key == ApiKey.JOIN_GROUP:
        unknown_protocol = None if version >= JOIN_NULLABLE_PROTOCOL_VERSION else ""
        return _shaped(
            spec,
            error_code=error,
            generation_id=-1,
            protocol_type=None,
            protocol_name=unknown_protocol,
            leader="",
            member_id="",
            members=[],
        )
    if api_key == ApiKey.SYNC_GROUP:
        return _shaped(
            spec, error_code=error, protocol_type=None, protocol_name=None, assignment=b""
        )
    if api_key == ApiKey.DESCRIBE_GROUPS:
        group_spec = _entity(spec, "groups")
        groups = [
            _shaped(group_spec, group_id=g, error_code=error) for g in req.get("groups") or ()
        ]
        return _shaped(spec, groups=groups)
    if api_key == ApiKey.DELETE_GROUPS:
        result_spec = _entity(spec, "results")
        names = dict.fromkeys(req.get("groups_names") or ())
        return _shaped(
            spec, results=[_shaped(result_spec, group_id=g, error_code=error) for g in names]
        )
    # Heartbeat, LeaveGroup, ListGroups, OffsetDelete: one error code, nothing listed.
    return _shaped(spec, error_code=error)


def _marker_result(spec: EntitySpec, marker: Body, error: int) -> Body:
    marker_spec = _entity(spec, "markers")
    partitions = [
        (t.get("name") or "", p) for t in marker.get("topics") or () for p in t["partition_indexes"]
    ]
    return _shaped(
        marker_spec,
        producer_id=marker.get("producer_id", -1),
        topics=_by_topic(marker_spec, "topics", partitions, error_code=error),
    )


def _offset_fetch(spec: EntitySpec, version: int, req: Body, error: int) -> Body:
    if version >= OFFSET_FETCH_BATCHED_VERSION:
        group_spec = _entity(spec, "groups")
        groups = [
            _shaped(group_spec, group_id=g.get("group_id") or "", topics=[], error_code=error)
            for g in req.get("groups") or ()
        ]
        return _shaped(spec, groups=groups)
    if "error_code" in spec.field_names:  # v2+: the group's error, no partitions
        return _shaped(spec, error_code=error, topics=[])
    topics = _by_topic(
        spec,
        "topics",
        _fetched(req.get("topics")),
        committed_offset=INVALID_OFFSET,
        committed_leader_epoch=NO_LEADER_EPOCH,
        metadata="",
        error_code=error,
    )
    return _shaped(spec, topics=topics)
