"""The group APIs, forwarded to the group coordinator that owns each group's shard.

JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch (v1-7), OffsetDelete name
one group; DescribeGroups, DeleteGroups and OffsetFetch v8 name several, possibly on different
coordinators: they are split per coordinator and the answers merged back in request order.
ListGroups asks every coordinator. As Kafka's KafkaApis does, OffsetCommit and OffsetDelete
answer UNKNOWN_TOPIC_OR_PARTITION here for topics the cluster does not have. A coordinator that
cannot be reached answers NOT_COORDINATOR (clients look the coordinator up again); a group
whose shard is not placed yet, COORDINATOR_NOT_AVAILABLE. Error shapes per API and version come
from the coordinator's own ``error_response``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.gateway.context import RequestContext
from services.gateway.coordinators import CoordinatorClients, ForwardError
from services.gateway.handlers.base import ApiHandler, Body
from services.group_coordinator.api import error_response as group_error_response

NAMES = {
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
}
_UNKNOWN_TOPIC = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def client_host(peer: str) -> str:
    """The client's address as Kafka stores it (``InetAddress.toString``: ``/127.0.0.1``)."""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host


def _timeout_s(ctx: RequestContext, body: Body) -> float:
    base = ctx.services.request_timeout_s
    if ctx.api_key == ApiKey.JOIN_GROUP:
        wait = body.get("rebalance_timeout", -1) if ctx.api_version >= 1 else -1
        if wait is None or wait < 0:
            wait = body.get("session_timeout", 0)
        return base + max(int(wait), 0) / 1000.0
    return base


def _clients(ctx: RequestContext) -> CoordinatorClients | None:
    return ctx.services.coordinators


async def _forward_one(ctx: RequestContext, group_id: str, body: Body) -> Body:
    """One group's request to its coordinator; errors in the API's shape."""
    key, version = ctx.api_key, ctx.api_version
    clients = _clients(ctx)
    if clients is None:
        return group_error_response(key, version, body, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    route = clients.route(group_id)
    if route.error != ErrorCode.NONE:
        return group_error_response(key, version, body, route.error)
    try:
        return await clients.forward(
            route.coordinator,
            key,
            version,
            body,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx.peer),
            timeout_s=_timeout_s(ctx, body),
        )
    except ForwardError as exc:
        return group_error_response(key, version, body, exc.code)


# ---- one group ------------------------------------------------------------------------------
async def _single(ctx: RequestContext, req: Body) -> Body:
    return await _forward_one(ctx, req.get("group_id") or "", req)


def _known_topics(ctx: RequestContext, req: Body) -> tuple[Body, list[Body]]:
    """``req`` without topics the cluster lacks, and the UNKNOWN_TOPIC answers for those."""
    cache = ctx.services.cache
    known, unknown = [], []
    for t in req.get("topics") or []:
        (known if cache.topic(t.get("name", "")) is not None else unknown).append(t)
    answers = [
        {
            "name": t.get("name", ""),
            "partitions": [
                {"partition_index": p.get("partition_index", 0), "error_code": _UNKNOWN_TOPIC}
                for p in t.get("partitions") or []
            ],
        }
        for t in unknown
    ]
    return {**req, "topics": known}, answers


async def _with_known_topics(ctx: RequestContext, req: Body) -> Body:
    """OffsetCommit / OffsetDelete: unknown topics are answered here, the rest forwarded."""
    filtered, unknown = _known_topics(ctx, req)
    resp = await _forward_one(ctx, req.get("group_id") or "", filtered)
    if unknown:
        resp["topics"] = list(resp.get("topics") or []) + unknown
    return resp


# ---- several groups -------------------------------------------------------------------------
async def _split(
    ctx: RequestContext,
    groups: Sequence[Any],
    group_of: Callable[[Any], str],
    make_request: Callable[[list[Any]], Body],
    entries_of: Callable[[Body], list[Body]],
) -> list[Body]:
    """Send each coordinator its groups (one request each); the answer entries in the order
    of ``groups``. Unroutable groups get their error entries from ``error_response``."""
    clients = _clients(ctx)
    by_target: dict[int | ErrorCode, list[Any]] = {}
    for g in groups:
        if clients is None:
            target: int | ErrorCode = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            route = clients.route(group_of(g))
            target = route.error if route.error != ErrorCode.NONE else route.coordinator
        by_target.setdefault(target, []).append(g)

    async def ask(target: int | ErrorCode, part: list[Any]) -> list[Body]:
        req = make_request(part)
        key, version = ctx.api_key, ctx.api_version
        if isinstance(target, ErrorCode):
            return entries_of(group_error_response(key, version, req, target))
        assert clients is not None
        try:
            resp = await clients.forward(
                target, key, version, req, client_id=ctx.client_id or "",
                client_host=client_host(ctx.peer), timeout_s=_timeout_s(ctx, req),
            )  # fmt: skip
        except ForwardError as exc:
            return entries_of(group_error_response(key, version, req, exc.code))
        return entries_of(resp)

    answers = await asyncio.gather(*(ask(t, part) for t, part in by_target.items()))
    by_group: dict[str, Body] = {}
    for entries in answers:
        for e in entries:
            by_group.setdefault(e.get("group_id", ""), e)
    return [by_group[group_of(g)] for g in groups if group_of(g) in by_group]


async def _describe_groups(ctx: RequestContext, req: Body) -> Body:
    groups = await _split(
        ctx,
        list(req.get("groups") or []),
        lambda g: g,
        lambda part: {**req, "groups": part},
        lambda resp: list(resp.get("groups") or []),
    )
    return {"throttle_time": 0, "groups": groups}


async def _delete_groups(ctx: RequestContext, req: Body) -> Body:
    names = list(dict.fromkeys(req.get("groups_names") or []))
    results = await _split(
        ctx,
        names,
        lambda g: g,
        lambda part: {**req, "groups_names": part},
        lambda resp: list(resp.get("results") or []),
    )
    return {"throttle_time": 0, "results": results}


async def _offset_fetch(ctx: RequestContext, req: Body) -> Body:
    if ctx.api_version < 8:
        return await _single(ctx, req)
    groups = await _split(
        ctx,
        list(req.get("groups") or []),
        lambda g: g.get("group_id", ""),
        lambda part: {**req, "groups": part},
        lambda resp: list(resp.get("groups") or []),
    )
    return {"throttle_time": 0, "groups": groups}


async def _list_groups(ctx: RequestContext, req: Body) -> Body:
    clients = _clients(ctx)
    coordinators = sorted(ctx.services.cache.group_coordinators) if clients else []
    error = ErrorCode.NONE
    groups: list[Body] = []

    async def ask(node_id: int) -> Body:
        assert clients is not None
        try:
            return await clients.forward(
                node_id, ctx.api_key, ctx.api_version, req, client_id=ctx.client_id or "",
                client_host=client_host(ctx.peer), timeout_s=ctx.services.request_timeout_s,
            )  # fmt: skip
        except ForwardError as exc:
            return {"error_code": int(exc.code), "groups": []}

    for resp in await asyncio.gather(*(ask(c) for c in coordinators)):
        code = int(resp.get("error_code", 0))
        if code and error == ErrorCode.NONE:
            error = ErrorCode(code)
        groups.extend(resp.get("groups") or [])
    return {"throttle_time": 0, "error_code": int(error), "groups": groups}


def _handler(key: ApiKey, handle: Callable[[RequestContext, Body], Any]) -> ApiHandler:
    def error(req: Body, version: int, code: ErrorCode) -> Body:
        return group_error_response(key, version, req, code)

    return ApiHandler(key, NAMES[key], handle, error)


HANDLERS = [
    _handler(ApiKey.JOIN_GROUP, _single),
    _handler(ApiKey.SYNC_GROUP, _single),
    _handler(ApiKey.HEARTBEAT, _single),
    _handler(ApiKey.LEAVE_GROUP, _single),
    _handler(ApiKey.OFFSET_COMMIT, _with_known_topics),
    _handler(ApiKey.OFFSET_DELETE, _with_known_topics),
    _handler(ApiKey.OFFSET_FETCH, _offset_fetch),
    _handler(ApiKey.DESCRIBE_GROUPS, _describe_groups),
    _handler(ApiKey.DELETE_GROUPS, _delete_groups),
    _handler(ApiKey.LIST_GROUPS, _list_groups),
]
