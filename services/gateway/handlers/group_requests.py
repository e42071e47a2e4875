"""The group APIs, forwarded to the group coordinator that owns each group's shard.

JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch (v1-7) and
OffsetDelete
name one group; DescribeGroups, DeleteGroups and OffsetFetch v8 name several, possibly on
different coordinators: they are split per coordinator (one request each, concurrently) and the
answers merged back in request order. ListGroups asks every registered coordinator and merges;
a coordinator that fails reports its error in the top-level error code, next to the groups of
the others (COORDINATOR_NOT_AVAILABLE also while a shard of an existing ``__consumer_offsets``
has no registered owner, as Kafka answers while partitions load: admin clients retry).

As Kafka's KafkaApis does, (Txn)OffsetCommit and OffsetDelete answer UNKNOWN_TOPIC_OR_PARTITION here
for partitions the cluster does not have, and an OffsetCommit with nothing left to commit is
answered without asking the coordinator. Failures (see ``services.common.coordinator.clients``) are
answered in each API's and version's shape (``services.common.group_errors``).

Deadlines: JoinGroup may wait for the whole rebalance, so its call may last its rebalance
timeout (v0: the session timeout) plus ``request.timeout.ms``; the others
``request.timeout.ms``. A request in flight does not stop the connection from reading the next
ones; responses still leave in request order (``services.gateway.server``).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable, Sequence
from typing import Any

from services.common.coordinator.clients import CoordinatorClients, ForwardError
from services.common.errors import ErrorCode
from services.common.group_errors import GROUP_API_NAMES
from services.common.group_errors import error_response as group_error_response
from services.common.protocol import ApiKey
from services.common.zk.layout import CONSUMER_OFFSETS_TOPIC
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body, as_error_code

OFFSET_FETCH_BATCHED_VERSION = 8
_UNKNOWN_TOPIC = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

Target = int | ErrorCode  # a coordinator id, or why the group cannot be routed


def client_host(peer: str) -> str:
    """The client's address as Kafka reports it, Java's ``InetAddress.toString``: ``/127.0.0.1``;
    IPv6 in full with groups unpadded (``/0:0:0:0:0:0:0:1``, ``%scope`` kept); IPv4-mapped
    IPv6 as the IPv4 address (Java makes those an Inet4Address). ``peer`` is ``host:port``."""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    bare, pct, scope = host.strip("[]").partition("%")
    try:
        ip = ipaddress.ip_address(bare)
    except ValueError:
        return "/" + host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"/{ip.ipv4_mapped}"
        groups = ":".join(f"{int(g, 16):x}" for g in ip.exploded.split(":"))
        return f"/{groups}{pct}{scope}"
    return f"/{ip}"


def forward_timeout_s(ctx: RequestContext, body: Body) -> float:
    """How long the coordinator may take: JoinGroup's rebalance timeout (v0: its session
    timeout) plus ``request.timeout.ms``; ``request.timeout.ms`` for everything else."""
    base = ctx.services.request_timeout_s
    if ctx.api_key != ApiKey.JOIN_GROUP:
        return base
    wait = body.get("rebalance_timeout") if ctx.api_version >= 1 else None
    if wait is None or wait < 0:
        wait = body.get("session_timeout") or 0
    return base + max(int(wait), 0) / 1000.0


def _target(clients: CoordinatorClients | None, group_id: str) -> Target:
    if clients is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    route = clients.route(group_id)
    return route.error if route.error != ErrorCode.NONE else route.coordinator


async def _ask(ctx: RequestContext, target: Target, req: Body) -> Body:
    """``req`` answered by ``target`` (any failure: the error in the API's shape)."""
    key, version = ctx.api_key, ctx.api_version
    clients = ctx.services.coordinators
    if isinstance(target, ErrorCode) or clients is None:
        code = target if isinstance(target, ErrorCode) else ErrorCode.COORDINATOR_NOT_AVAILABLE
        return group_error_response(key, version, req, code)
    try:
        return await clients.forward(
            target,
            key,
            version,
            req,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx.peer),
            timeout_s=forward_timeout_s(ctx, req),
        )
    except ForwardError as exc:
        return group_error_response(key, version, req, exc.code)


# ---- one group ------------------------------------------------------------------------------
async def _single(ctx: RequestContext, req: Body) -> Body:
    group_id = req.get("group_id") or ""
    return await _ask(ctx, _target(ctx.services.coordinators, group_id), req)


def _split_unknown(ctx: RequestContext, req: Body) -> tuple[Body, list[tuple[str, int]]]:
    """``req`` keeping only partitions the cluster has; the (topic, partition)s it lacks.
    ``req`` itself when the cluster has them all (each topic looked up once, nothing copied:
    a commit names every partition of its group)."""
    cache = ctx.services.cache
    requested = req.get("topics") or []
    known_by_topic = []
    for t in requested:
        info = cache.topic(t.get("name") or "")
        known_by_topic.append(info.partitions if info is not None else {})
    if requested and all(
        t.get("partitions") and all(p.get("partition_index", -1) in known for p in t["partitions"])
        for t, known in zip(requested, known_by_topic, strict=True)
    ):
        return req, []
    topics, unknown = [], []
    for t, known_partitions in zip(requested, known_by_topic, strict=True):
        name = t.get("name") or ""
        known = []
        for p in t.get("partitions") or []:
            if p.get("partition_index", -1) in known_partitions:
                known.append(p)
            else:
                unknown.append((name, p.get("partition_index", -1)))
        if known:
            topics.append({**t, "partitions": known})
    return {**req, "topics": topics}, unknown


def _add_partition_errors(resp: Body, unknown: list[tuple[str, int]]) -> None:
    """Add UNKNOWN_TOPIC_OR_PARTITION answers to ``resp["topics"]`` (merged per topic)."""
    if not unknown:
        return
    topics: list[Body] = list(resp.get("topics") or [])
    by_name = {t.get("name"): t for t in topics}
    for name, index in unknown:
        entry = by_name.get(name)
        if entry is None:
            entry = by_name[name] = {"name": name, "partitions": []}
            topics.append(entry)
        entry["partitions"] = [
            *(entry.get("partitions") or []),
            {"partition_index": index, "error_code": _UNKNOWN_TOPIC},
        ]
    resp["topics"] = topics


async def _offset_commit(ctx: RequestContext, req: Body) -> Body:
    filtered, unknown = _split_unknown(ctx, req)
    if filtered["topics"]:
        resp = await _single(ctx, filtered)
    else:  # nothing the coordinator could commit: Kafka answers without asking it
        resp = group_error_response(ctx.api_key, ctx.api_version, filtered, ErrorCode.NONE)
    _add_partition_errors(resp, unknown)
    return resp


async def _offset_delete(ctx: RequestContext, req: Body) -> Body:
    """The coordinator is always asked (it reports the group's own errors); a group error
    answers no partitions, as Kafka's OffsetDelete does."""
    filtered, unknown = _split_unknown(ctx, req)
    resp = await _single(ctx, filtered)
    if not resp.get("error_code"):
        _add_partition_errors(resp, unknown)
    return resp


# ---- several groups -------------------------------------------------------------------------
def _merged(ctx: RequestContext, **values: Any) -> Body:
    """A response of the request's API and version holding ``values`` (exactly its fields)."""
    resp = group_error_response(ctx.api_key, ctx.api_version, {}, ErrorCode.NONE)
    resp.update((k, v) for k, v in values.items() if k in resp)
    return resp


async def _split(
    ctx: RequestContext,
    groups: Sequence[Any],
    group_of: Callable[[Any], str],
    make_request: Callable[[list[Any]], Body],
    entries_of: Callable[[Body], list[Body]],
) -> list[Body]:
    """Send each coordinator its groups (one request each, concurrently); the answer entries
    in the order of ``groups``. A group missing from its coordinator's answer is answered
    UNKNOWN_SERVER_ERROR."""
    clients = ctx.services.coordinators
    by_target: dict[Target, list[Any]] = {}
    for g in groups:
        by_target.setdefault(_target(clients, group_of(g)), []).append(g)
    answers = await asyncio.gather(
        *(_ask(ctx, target, make_request(part)) for target, part in by_target.items())
    )
    by_group: dict[str, Body] = {}
    for resp in answers:
        for entry in entries_of(resp):
            by_group.setdefault(entry.get("group_id") or "", entry)
    out: list[Body] = []
    for g in groups:
        answered = by_group.get(group_of(g))
        if answered is None:
            failed = group_error_response(
                ctx.api_key, ctx.api_version, make_request([g]), ErrorCode.UNKNOWN_SERVER_ERROR
            )
            answered = entries_of(failed)[0]
        out.append(answered)
    return out


async def _describe_groups(ctx: RequestContext, req: Body) -> Body:
    groups = await _split(
        ctx,
        list(req.get("groups") or []),
        lambda g: g,
        lambda part: {**req, "groups": part},
        lambda resp: list(resp.get("groups") or []),
    )
    return _merged(ctx, groups=groups)


async def _delete_groups(ctx: RequestContext, req: Body) -> Body:
    names = list(dict.fromkeys(req.get("groups_names") or []))
    results = await _split(
        ctx,
        names,
        lambda g: g,
        lambda part: {**req, "groups_names": part},
        lambda resp: list(resp.get("results") or []),
    )
    return _merged(ctx, results=results)


# coordinator errors that make librdkafka's admin client look up a coordinator it cannot hold
_COORDINATOR_GONE = frozenset(
    {int(ErrorCode.NOT_COORDINATOR), int(ErrorCode.COORDINATOR_NOT_AVAILABLE)}
)
_LOADING = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


def _retriable_offset_fetch_error(entry: Body) -> None:
    """NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE in an OffsetFetch answer become
    COORDINATOR_LOAD_IN_PROGRESS.

    librdkafka's admin ListConsumerGroupOffsets dereferences a consumer group handle it does
    not have on either error and crashes the process (librdkafka issue 5040; it hits
    ``kafka-py consumer-groups --describe`` and the console while a coordinator fails over).
    Here the gateway is every group's coordinator address, so a new FindCoordinator gains the
    client nothing; "still loading, retry" is what is happening (the shard is moving to another
    coordinator) and every client retries it (D51)."""
    if entry.get("error_code") in _COORDINATOR_GONE:
        entry["error_code"] = _LOADING


async def _offset_fetch(ctx: RequestContext, req: Body) -> Body:
    if ctx.api_version < OFFSET_FETCH_BATCHED_VERSION:
        resp = await _single(ctx, req)
        _retriable_offset_fetch_error(resp)
        return resp
    groups = await _split(
        ctx,
        list(req.get("groups") or []),
        lambda g: g.get("group_id") or "",
        lambda part: {**req, "groups": part},
        lambda resp: list(resp.get("groups") or []),
    )
    for group in groups:
        _retriable_offset_fetch_error(group)
    return _merged(ctx, groups=groups)


def _unserved_shards(ctx: RequestContext) -> bool:
    """``__consumer_offsets`` exists but some of its shards have no registered owner."""
    cache = ctx.services.cache
    if cache.topic(CONSUMER_OFFSETS_TOPIC) is None:
        return False
    shard_map = cache.shard_map
    if shard_map is None:
        return True
    return any(
        (owner := shard_map.shards.get(p)) is None or owner.owner not in cache.group_coordinators
        for p in range(shard_map.partitions)
    )


async def _list_groups(ctx: RequestContext, req: Body) -> Body:
    coordinators = sorted(ctx.services.cache.group_coordinators)
    answers = await asyncio.gather(*(_ask(ctx, c, req) for c in coordinators))
    error = ErrorCode.COORDINATOR_NOT_AVAILABLE if _unserved_shards(ctx) else ErrorCode.NONE
    groups: list[Body] = []
    for resp in answers:
        code = int(resp.get("error_code") or 0)
        if code == ErrorCode.NOT_COORDINATOR:  # unreachable: there is no "right" coordinator
            code = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if code and error == ErrorCode.NONE:
            error = as_error_code(code)
        groups.extend(resp.get("groups") or [])
    return _merged(ctx, error_code=int(error), groups=groups)


def _handler(key: ApiKey, handle: Callable[[RequestContext, Body], Any]) -> ApiHandler:
    def error(req: Body, version: int, code: ErrorCode) -> Body:
        return group_error_response(key, version, req, code)

    return ApiHandler(key, GROUP_API_NAMES[key], handle, error)


HANDLERS = [
    _handler(ApiKey.JOIN_GROUP, _single),
    _handler(ApiKey.SYNC_GROUP, _single),
    _handler(ApiKey.HEARTBEAT, _single),
    _handler(ApiKey.LEAVE_GROUP, _single),
    _handler(ApiKey.OFFSET_COMMIT, _offset_commit),
    _handler(ApiKey.TXN_OFFSET_COMMIT, _offset_commit),
    _handler(ApiKey.OFFSET_DELETE, _offset_delete),
    _handler(ApiKey.OFFSET_FETCH, _offset_fetch),
    _handler(ApiKey.DESCRIBE_GROUPS, _describe_groups),
    _handler(ApiKey.DELETE_GROUPS, _delete_groups),
    _handler(ApiKey.LIST_GROUPS, _list_groups),
]
