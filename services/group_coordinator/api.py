"""The group APIs a coordinator answers: forwarded Kafka request bodies (codec dicts, kio field
names) in, response bodies out, per API version as Kafka's KafkaApis shapes them.

Responses are built with every field any version has and then cut to the fields of the
requested version's schema (``forward.fit``), so a version never carries a field it lacks.
Nothing raises out of ``handle``: an unexpected failure is logged and answered with
UNKNOWN_SERVER_ERROR in the shape of the request's API.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

from services.common.coordinator.forward import fit
from services.common.errors import ErrorCode
from services.common.group_errors import error_response
from services.common.internal_topics.consumer_offsets import NO_LEADER_EPOCH, OffsetAndMetadata
from services.common.logging import get_logger
from services.common.protocol import ApiKey, message_spec
from services.common.shard_tasks import now_ms
from services.common.zk.layout import CONSUMER_OFFSETS_TOPIC
from services.group_coordinator.group import JoinResult, SyncResult, TopicPartition
from services.group_coordinator.groups import GroupShard
from services.group_coordinator.requests import JoinRequest, LeavingMember

log = get_logger("group_coordinator.api")

# Versions this module answers (what the gateway advertises).
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 8),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),  # from transaction coordinators, never from clients
}

# DescribeGroups authorized operations with no authorizer: every operation a group supports
# (READ 3, DELETE 6, DESCRIBE 8 as a bit field); Integer.MIN_VALUE when not asked for.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
INVALID_OFFSET = -1
NO_METADATA = ""


class ShardLookup(Protocol):
    def partition_of(self, group_id: str) -> int | None: ...

    def shard(self, partition: int | None) -> GroupShard | ErrorCode: ...

    def loaded_shards(self) -> list[GroupShard]: ...

    async def write_txn_marker(
        self, partition: int, producer_id: int, epoch: int, coordinator_epoch: int, commit: bool
    ) -> ErrorCode:
        """Write a transaction's marker to an owned ``__consumer_offsets`` partition and apply
        (or drop) its transactional offsets."""
        ...


Handler = Callable[
    [ShardLookup, int, dict[str, Any], str, str], Coroutine[Any, Any, dict[str, Any]]
]


def supports(api_key: int, api_version: int) -> bool:
    low, high = SUPPORTED_VERSIONS.get(api_key, (0, -1))
    return low <= api_version <= high


async def handle(
    shards: ShardLookup,
    api_key: int,
    api_version: int,
    body: dict[str, Any],
    *,
    client_id: str,
    client_host: str,
) -> dict[str, Any]:
    """Answer one group request. A group API version outside ``SUPPORTED_VERSIONS`` is answered
    UNSUPPORTED_VERSION; an API key that is not a group API is a caller bug (ValueError)."""
    if api_key not in _HANDLERS:
        raise ValueError(f"api {api_key} is not a group coordinator request")
    if not supports(api_key, api_version):
        return error_response(api_key, api_version, body, ErrorCode.UNSUPPORTED_VERSION)
    handler = _HANDLERS[api_key]
    try:
        response = await handler(shards, api_version, body, client_id, client_host)
    except Exception as exc:
        log.exception(
            "group_request_failed", api_key=api_key, api_version=api_version, error=repr(exc)
        )
        return error_response(api_key, api_version, body, ErrorCode.UNKNOWN_SERVER_ERROR)
    return fit(message_spec(api_key, api_version, "response"), response)


# ---- shaping ---------------------------------------------------------------------------------
def _lookup(shards: ShardLookup, group_id: str) -> GroupShard | ErrorCode:
    return shards.shard(shards.partition_of(group_id))


def _by_topic(rows: Iterable[tuple[TopicPartition, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Partition entries grouped per topic (first-seen topic order)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), entry in rows:
        topics.setdefault(topic, []).append({"partition_index": partition, **entry})
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


# ---- OffsetCommit ----------------------------------------------------------------------------


def _offsets_of(
    body: dict[str, Any], now: int, retention: int
) -> dict[TopicPartition, OffsetAndMetadata]:
    expire = now + retention if retention != -1 else -1
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in body["topics"]:
        name = topic["name"]
        for p in topic["partitions"]:
            # positional: (offset, leader epoch, metadata, commit and expire timestamps)
            offsets[(name, p["partition_index"])] = OffsetAndMetadata(
                p["committed_offset"],
                p.get("committed_leader_epoch", NO_LEADER_EPOCH),
                p.get("committed_metadata") or NO_METADATA,
                now,
                expire,
            )
    return offsets


def _partition_errors(errors: dict[TopicPartition, ErrorCode]) -> list[dict[str, Any]]:
    """(Txn)OffsetCommit's response topics: each partition's error code."""
    topics: dict[str, list[dict[str, Any]]] = {}
    codes: dict[ErrorCode, int] = {}
    for (topic, partition), error in errors.items():
        code = codes.get(error)
        if code is None:
            code = codes[error] = int(error)
        entries = topics.get(topic)
        if entries is None:
            entries = topics[topic] = []
        entries.append({"partition_index": partition, "error_code": code})
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


async def _offset_commit(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    group_id = body["group_id"]
    shard = _lookup(shards, group_id)
    now = now_ms() if isinstance(shard, ErrorCode) else shard.clock()
    retention = body.get("retention_time", -1) if version <= 4 else -1
    offsets = _offsets_of(body, now, retention)
    if isinstance(shard, ErrorCode):
        errors = {tp: shard for tp in offsets}
    else:
        errors = await shard.commit_offsets(
            group_id,
            body["member_id"],
            body.get("group_instance_id"),
            body["generation_id_or_member_epoch"],
            offsets,
        )
    return {
        "throttle_time": 0,
        "topics": _partition_errors(errors),
    }


# ---- TxnOffsetCommit and the markers of __consumer_offsets ------------------------------------


async def _txn_offset_commit(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    group_id = body["group_id"]
    shard = _lookup(shards, group_id)
    offsets = _offsets_of(body, now_ms() if isinstance(shard, ErrorCode) else shard.clock(), -1)
    if isinstance(shard, ErrorCode):
        errors = {tp: shard for tp in offsets}
    else:
        errors = await shard.txn_offset_commit(
            group_id,
            body["producer_id"],
            body["producer_epoch"],
            body.get("member_id") or "",
            body.get("group_instance_id"),
            body.get("generation_id", -1),
            offsets,
        )
    return {
        "throttle_time": 0,
        "topics": _partition_errors(errors),
    }


async def _write_txn_markers(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    results = []
    for m in body["markers"]:
        rows = []
        for t in m["topics"]:
            for p in t["partition_indexes"]:
                code = (
                    await shards.write_txn_marker(
                        p,
                        m["producer_id"],
                        m["producer_epoch"],
                        m["coordinator_epoch"],
                        m["transaction_result"],
                    )
                    if t["name"] == CONSUMER_OFFSETS_TOPIC
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                rows.append(((t["name"], p), {"error_code": int(code)}))
        results.append({"producer_id": m["producer_id"], "topics": _by_topic(rows)})
    return {"markers": results}


# ---- OffsetFetch -----------------------------------------------------------------------------
def _requested(topics: list[dict[str, Any]] | None) -> list[TopicPartition] | None:
    if topics is None:
        return None
    return list(
        dict.fromkeys((t["name"], p) for t in topics for p in t.get("partition_indexes") or ())
    )


def _fetch_row(
    tp: TopicPartition, offset: OffsetAndMetadata | None, error: int
) -> tuple[TopicPartition, dict[str, Any]]:
    return tp, {
        "committed_offset": offset.offset if offset else INVALID_OFFSET,
        "committed_leader_epoch": offset.leader_epoch if offset else NO_LEADER_EPOCH,
        "metadata": offset.metadata if offset else NO_METADATA,
        "error_code": error,
    }


def _fetch_topics(rows: list[tuple[TopicPartition, dict[str, Any]]]) -> list[dict[str, Any]]:
    return _by_topic(rows)


def _fetch_group(group_id: str, topics: list[dict[str, Any]], error: int) -> dict[str, Any]:
    return {"group_id": group_id, "topics": topics, "error_code": error}


def _fetch_one(
    shards: ShardLookup, group_id: str, topics: list[dict[str, Any]] | None, stable: bool
) -> tuple[list[tuple[TopicPartition, dict[str, Any]]], ErrorCode]:
    shard = _lookup(shards, group_id)
    if isinstance(shard, ErrorCode):
        return [], shard
    rows = shard.fetch_offsets(group_id, _requested(topics), stable)
    return [_fetch_row(tp, o, int(e)) for tp, o, e in rows], ErrorCode.NONE


async def _offset_fetch(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    stable = bool(body.get("require_stable", False))
    if version >= 8:
        groups = []
        for g in body["groups"]:
            rows, error = _fetch_one(shards, g["group_id"], g["topics"], stable)
            groups.append(_fetch_group(g["group_id"], _fetch_topics(rows), int(error)))
        return {"throttle_time": 0, "groups": groups}
    rows, error = _fetch_one(shards, body["group_id"], body["topics"], stable)
    if error is not ErrorCode.NONE:
        return error_response(ApiKey.OFFSET_FETCH, version, body, error)
    return {"throttle_time": 0, "topics": _fetch_topics(rows), "error_code": 0}


# ---- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ------------------------------------------
def _join_response(version: int, result: JoinResult) -> dict[str, Any]:
    protocol_name = result.protocol_name
    if version < 7 and protocol_name is None:
        protocol_name = ""
    return {
        "throttle_time": 0,
        "error_code": int(result.error),
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol_name,
        "leader": result.leader_id,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {"member_id": m, "group_instance_id": instance, "metadata": metadata}
            for m, instance, metadata in result.members
        ],
    }


async def _join_group(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    instance_id = body.get("group_instance_id")
    request = JoinRequest(
        group_id=body["group_id"],
        member_id=body["member_id"],
        group_instance_id=instance_id,
        client_id=client_id,
        client_host=client_host,
        session_timeout_ms=body["session_timeout"],
        rebalance_timeout_ms=body["session_timeout"] if version == 0 else body["rebalance_timeout"],
        protocol_type=body["protocol_type"],
        protocols=[(p["name"], bytes(p["metadata"])) for p in body["protocols"]],
        require_known_member_id=version >= 4 and instance_id is None,
        support_skip_assignment=version >= 9,
        reason=body.get("reason"),
    )
    shard = _lookup(shards, request.group_id)
    if isinstance(shard, ErrorCode):
        result = JoinResult(shard, request.member_id)
    else:
        result = await shard.join_group(request)
    return _join_response(version, result)


def _sync_response(result: SyncResult) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": int(result.error),
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


async def _sync_group(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    protocol_type = body.get("protocol_type")
    protocol_name = body.get("protocol_name")
    if version >= 5 and (protocol_type is None or protocol_name is None):
        return _sync_response(SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
    shard = _lookup(shards, body["group_id"])
    if shard is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        # the rebalance's state is gone with the old owner: have the member rejoin
        return _sync_response(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
    if isinstance(shard, ErrorCode):
        return _sync_response(SyncResult(shard))
    assignments = {a["member_id"]: bytes(a["assignment"]) for a in body["assignments"]}
    result = await shard.sync_group(
        body["group_id"],
        body["generation_id"],
        body["member_id"],
        body.get("group_instance_id"),
        protocol_type,
        protocol_name,
        assignments,
    )
    return _sync_response(result)


async def _heartbeat(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    shard = _lookup(shards, body["group_id"])
    if shard is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        error = ErrorCode.NONE  # as Kafka: the group is still loading, answer blindly
    elif isinstance(shard, ErrorCode):
        error = shard
    else:
        error = shard.heartbeat(
            body["group_id"],
            body["member_id"],
            body.get("group_instance_id"),
            body["generation_id"],
        )
    return {"throttle_time": 0, "error_code": int(error)}


async def _leave_group(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    if version < 3:
        leaving = [LeavingMember(body["member_id"])]
    else:
        leaving = [
            LeavingMember(m["member_id"], m.get("group_instance_id"), m.get("reason"))
            for m in body["members"]
        ]
    shard = _lookup(shards, body["group_id"])
    if isinstance(shard, ErrorCode):
        group_error, member_errors = shard, list[ErrorCode]()
    else:
        group_error, member_errors = shard.leave_group(body["group_id"], leaving)
    if version < 3:
        error = group_error
        if error is ErrorCode.NONE and member_errors:
            error = member_errors[0]
        return {"throttle_time": 0, "error_code": int(error)}
    return {
        "throttle_time": 0,
        "error_code": int(group_error),
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "error_code": int(e),
            }
            for m, e in zip(leaving, member_errors, strict=False)
        ],
    }


# ---- DescribeGroups / ListGroups / DeleteGroups / OffsetDelete -------------------------------
def _describe_error(group_id: str, error: int) -> dict[str, Any]:
    return {
        "error_code": error,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


async def _describe_groups(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    with_ops = version >= 3 and bool(body.get("include_authorized_operations", False))
    groups = []
    for group_id in body["groups"]:
        shard = _lookup(shards, group_id)
        if isinstance(shard, ErrorCode):
            groups.append(_describe_error(group_id, int(shard)))
            continue
        error, summary = shard.describe_group(group_id)
        if error is not ErrorCode.NONE:
            groups.append(_describe_error(group_id, int(error)))
            continue
        groups.append(
            {
                "error_code": 0,
                "group_id": group_id,
                "group_state": summary.state,
                "protocol_type": summary.protocol_type,
                "protocol_data": summary.protocol,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in summary.members
                ],
                "authorized_operations": (
                    GROUP_AUTHORIZED_OPERATIONS if with_ops else AUTHORIZED_OPERATIONS_OMITTED
                ),
            }
        )
    return {"throttle_time": 0, "groups": groups}


async def _list_groups(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    states = set(body.get("states_filter") or ())
    groups = [
        {"group_id": g, "protocol_type": ptype, "group_state": state}
        for shard in shards.loaded_shards()
        for g, ptype, state in shard.list_groups(states)
    ]
    return {"throttle_time": 0, "error_code": 0, "groups": groups}


async def _delete_groups(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    names = list(dict.fromkeys(body["groups_names"]))
    errors: dict[str, ErrorCode] = {}
    per_shard: dict[int, tuple[GroupShard, list[str]]] = {}
    for group_id in names:
        shard = _lookup(shards, group_id)
        if isinstance(shard, ErrorCode):
            errors[group_id] = shard
        else:
            per_shard.setdefault(id(shard), (shard, []))[1].append(group_id)
    for shard, group_ids in per_shard.values():
        errors.update(await shard.delete_groups(group_ids))
    return {
        "throttle_time": 0,
        "results": [{"group_id": g, "error_code": int(errors[g])} for g in names],
    }


async def _offset_delete(
    shards: ShardLookup, version: int, body: dict[str, Any], client_id: str, client_host: str
) -> dict[str, Any]:
    group_id = body["group_id"]
    partitions = [
        (t["name"], p["partition_index"]) for t in body["topics"] for p in t["partitions"]
    ]
    shard = _lookup(shards, group_id)
    if isinstance(shard, ErrorCode):
        group_error, errors = shard, dict[TopicPartition, ErrorCode]()
    else:
        group_error, errors = await shard.delete_offsets(group_id, partitions)
    topics = (
        _by_topic((tp, {"error_code": int(errors[tp])}) for tp in dict.fromkeys(partitions))
        if group_error is ErrorCode.NONE
        else []
    )
    return {"error_code": int(group_error), "throttle_time": 0, "topics": topics}


_HANDLERS: dict[int, Handler] = {
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.JOIN_GROUP: _join_group,
    ApiKey.HEARTBEAT: _heartbeat,
    ApiKey.LEAVE_GROUP: _leave_group,
    ApiKey.SYNC_GROUP: _sync_group,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.WRITE_TXN_MARKERS: _write_txn_markers,
}
