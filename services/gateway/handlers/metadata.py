"""Metadata: gateways as brokers, partition leaders spread over the client's zone.

Partition replica/ISR lists are the storage replica ids (so describe tools show the real
replication); the leader is a gateway (see ``services.gateway.routing``). The broker list holds
the gateways and, under their own ids, the live storage nodes that no gateway's id names, each
at the address of a gateway in its zone (``routing.broker_endpoints``), so every id a response
names is a broker the client can reach; clients not known to cope with two brokers at one
address get the gateways only (``routing.shares_addresses``). A replica that is not registered
is only listed in ``offline_replicas``, as in Kafka. A partition whose storage leader is offline (-1 or not registered) is answered LEADER_NOT_AVAILABLE, leader -1.
Unknown topics are auto-created through the controller when both auto.create.topics.enable and
the request's allow_auto_topic_creation say so, then answered LEADER_NOT_AVAILABLE (clients
retry), as Kafka does.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Collection
from typing import Any

from services.common.errors import ErrorCode
from services.common.metadata_cache import INTERNAL_TOPICS, TopicInfo
from services.common.protocol import ApiKey
from services.common.zk.layout import Endpoint
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.handlers.base import (
    CLUSTER_OPERATIONS,
    OPERATIONS_NOT_REQUESTED,
    TOPIC_OPERATIONS,
    ApiHandler,
    Body,
    topic_name_error,
)
from services.gateway.handlers.create_topics import create_with_defaults
from services.gateway.routing import (
    broker_endpoints,
    candidates,
    client_zone,
    leader_for,
    shares_addresses,
    topic_hash,
)

_NONE = int(ErrorCode.NONE)
_LEADER_NOT_AVAILABLE = int(ErrorCode.LEADER_NOT_AVAILABLE)


def live_gateways(s: GatewayServices, listener: str | None = None) -> dict[int, Endpoint]:
    """Registered gateways, always including this one (its znode may not be visible yet), at
    their addresses on ``listener`` (the one the client connected to) when they have it."""
    gateways = s.cache.gateways
    if s.endpoint.node_id not in gateways:
        gateways = dict(gateways)
        gateways[s.endpoint.node_id] = s.endpoint
    if listener is None or not any(e.listeners for e in gateways.values()):
        return gateways
    return {i: e.for_listener(listener) for i, e in gateways.items()}


def client_brokers(ctx: RequestContext) -> dict[int, Endpoint]:
    """Every broker id this client is told of, with the gateway address that serves it: the
    gateways, and the storage nodes unless the client cannot have two brokers at one address."""
    s = ctx.services
    gateways = live_gateways(s, ctx.listener)
    if not shares_addresses(ctx.software.name, ctx.software.version):
        return gateways
    return broker_endpoints(
        gateways, {node_id: reg.rack for node_id, reg in s.cache.brokers.items()}
    )


def _topic_entry(topic: TopicInfo, leaders: list[int], brokers: Collection[int]) -> Body:
    h = topic_hash(topic.name)
    partitions = []
    for p in topic.partitions.values():
        alive = p.leader >= 0 and p.leader in brokers
        partitions.append(
            {
                "error_code": _NONE if alive else _LEADER_NOT_AVAILABLE,
                "partition_index": p.partition,
                "leader_id": leader_for(h, p.partition, leaders) if alive else -1,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
                "offline_replicas": [r for r in p.replicas if r not in brokers],
            }
        )
    return {
        "error_code": _NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.is_internal,
        "partitions": partitions,
    }


def _error_entry(name: str | None, code: ErrorCode, topic_id: Any = None) -> Body:
    return {
        "error_code": int(code),
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
    }


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    cache = s.cache
    gateways = live_gateways(s, ctx.listener)
    leaders = candidates(gateways, client_zone(ctx.client_id, s.endpoint.rack))
    brokers = frozenset(cache.brokers)
    requested = req.get("topics")
    entries: list[Body] = []
    kept = s.topic_entries
    kept.forget_missing(cache.topics)
    if requested is None:
        entries = [
            kept.entry(t, leaders, brokers, _topic_entry) for _, t in sorted(cache.topics.items())
        ]
    else:
        allow_auto = s.settings.auto_create_topics_enable and (
            ctx.api_version < 4 or bool(req.get("allow_auto_topic_creation", True))
        )
        to_create: list[str] = []
        slots: list[tuple[str, int]] = []  # (name, index in entries) awaiting auto-creation
        seen: set[Any] = set()
        for item in requested:
            name = item.get("name")
            raw_id = item.get("topic_id")
            if name is None:
                topic_id = uuid.UUID(bytes=bytes(raw_id)) if raw_id and any(raw_id) else None
                if topic_id is None or topic_id in seen:
                    if topic_id is None:
                        entries.append(_error_entry(None, ErrorCode.INVALID_REQUEST))
                    continue
                seen.add(topic_id)
                topic = cache.topic_by_id(topic_id)
                entries.append(
                    kept.entry(topic, leaders, brokers, _topic_entry)
                    if topic is not None
                    else _error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id)
                )
                continue
            if name in seen:
                continue
            seen.add(name)
            topic = cache.topic(name)
            if topic is not None:
                entries.append(kept.entry(topic, leaders, brokers, _topic_entry))
            elif topic_name_error(name) is not None:
                entries.append(_error_entry(name, ErrorCode.INVALID_TOPIC_EXCEPTION))
            elif allow_auto and name not in INTERNAL_TOPICS:
                slots.append((name, len(entries)))
                entries.append(_error_entry(name, ErrorCode.LEADER_NOT_AVAILABLE))
                to_create.append(name)
            else:
                entries.append(_error_entry(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        if to_create:
            codes = await auto_create(s, to_create)
            for name, index in slots:
                entries[index] = _error_entry(name, codes.get(name, ErrorCode.LEADER_NOT_AVAILABLE))
    if req.get("include_topic_authorized_operations"):
        for entry in entries:
            if entry["error_code"] == _NONE:
                entry["topic_authorized_operations"] = TOPIC_OPERATIONS
    return {
        "throttle_time": 0,
        "brokers": [
            {"node_id": ep.node_id, "host": ep.host, "port": ep.port, "rack": ep.rack}
            for _, ep in sorted(client_brokers(ctx).items())
        ],
        "cluster_id": cache.cluster_id,
        "controller_id": s.endpoint.node_id,
        "topics": entries,
        "cluster_authorized_operations": (
            CLUSTER_OPERATIONS
            if req.get("include_cluster_authorized_operations")
            else OPERATIONS_NOT_REQUESTED
        ),
    }


async def auto_create(s: GatewayServices, names: list[str]) -> dict[str, ErrorCode]:
    """Create ``names`` with the controller's defaults; the Metadata error code per topic.

    Created (or already existing) topics answer LEADER_NOT_AVAILABLE, so clients retry; a
    creation the controller refuses answers its error (e.g. INVALID_REPLICATION_FACTOR while
    too few storage nodes are up), as ZooKeeper-mode Kafka does. Concurrent requests for the
    same topic share one controller call.
    """
    wait_s = min(s.settings.auto_create_wait_ms, s.settings.request_timeout_ms) / 1000.0
    new = [n for n in names if n not in s.creating]
    if new:
        task = asyncio.get_running_loop().create_task(create_with_defaults(s, new))
        for n in new:
            s.creating[n] = task

        def done(_: asyncio.Task[Any], batch: list[str] = new) -> None:
            for n in batch:
                if s.creating.get(n) is task:
                    del s.creating[n]

        task.add_done_callback(done)
    tasks = {n: s.creating[n] for n in names if n in s.creating}
    out: dict[str, ErrorCode] = {}
    if tasks:
        await asyncio.wait(set(tasks.values()), timeout=wait_s)
    for n in names:
        t = tasks.get(n)
        if t is None or not t.done() or t.cancelled() or t.exception() is not None:
            out[n] = ErrorCode.LEADER_NOT_AVAILABLE
            continue
        code = t.result().get(n, ErrorCode.LEADER_NOT_AVAILABLE)
        if code in (
            ErrorCode.NONE,
            ErrorCode.TOPIC_ALREADY_EXISTS,
            ErrorCode.REQUEST_TIMED_OUT,
            ErrorCode.NOT_CONTROLLER,
        ):
            code = ErrorCode.LEADER_NOT_AVAILABLE
        out[n] = code
    return out


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    topics = [_error_entry(t.get("name"), code, t.get("topic_id")) for t in req.get("topics") or []]
    return {
        "throttle_time": 0,
        "brokers": [],
        "cluster_id": None,
        "controller_id": -1,
        "topics": topics,
    }


HANDLER = ApiHandler(ApiKey.METADATA, "Metadata", handle, error_response)
