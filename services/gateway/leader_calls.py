"""Requests that each partition's leader storage node answers (ListOffsets, DeleteRecords,
OffsetForLeaderEpoch):
which node leads a partition, and one unary call per node whose failures become Kafka errors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from services.common.errors import ErrorCode
from services.gateway.context import GatewayServices
from services.gateway.handlers.base import Body
from services.gateway.storage_errors import rpc_error_code

PartitionKey = tuple[str, int]


def leader_of(s: GatewayServices, topic: str, partition: int) -> int | ErrorCode:
    """The storage node leading ``topic``-``partition``, or the error to answer."""
    info = s.cache.topic(topic)
    p = info.partitions.get(partition) if info is not None else None
    if p is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if p.leader < 0:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return p.leader


async def call_leader(
    s: GatewayServices, node: int, method: str, request: Any, timeout_s: float | None = None
) -> dict[PartitionKey, Any] | ErrorCode:
    """Storage.``method`` on ``node``: its per-partition results by (topic, partition), or the
    Kafka error for every partition of the call when the node is unknown or the call failed."""
    stub = s.storage.stub(node)
    if stub is None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    try:
        resp = await getattr(stub, method)(
            request, timeout=s.request_timeout_s if timeout_s is None else timeout_s
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - any RPC failure becomes a partition error
        return rpc_error_code(method, exc)
    return {(r.topic, r.partition): r for r in resp.partitions}


def error_topics(
    req: Body, partition: Callable[[int, ErrorCode], Body], code: ErrorCode
) -> list[Body]:
    """The ``topics`` of an answer failing the whole request: each requested partition with
    ``code``, as ``partition(index, code)`` builds it."""
    return [
        {
            "name": t["name"],
            "partitions": [partition(p["partition_index"], code) for p in t["partitions"]],
        }
        for t in req.get("topics") or []
    ]
