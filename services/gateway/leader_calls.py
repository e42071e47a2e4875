"""Requests that each partition's leader storage node answers (ListOffsets, DeleteRecords,
OffsetForLeaderEpoch): which node leads a partition, one unary call per node whose failures
become Kafka errors, and the per-partition answers gathered back into topics."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from services.common.errors import ErrorCode
from services.gateway.context import GatewayServices
from services.gateway.handlers.base import Body
from services.gateway.storage_errors import rpc_error_code

PartitionKey = tuple[str, int]
T = TypeVar("T")


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
    req: Body,
    partition: Callable[[int, ErrorCode], Body],
    code: ErrorCode,
    *,
    name_field: str = "name",
    index_field: str = "partition_index",
) -> list[Body]:
    """The ``topics`` of an answer failing the whole request: each requested partition with
    ``code``, as ``partition(index, code)`` builds it (``name_field`` / ``index_field``: what
    the API calls a topic's name and a partition's index, in its request and its answer)."""
    return [
        {
            name_field: t[name_field],
            "partitions": [partition(p[index_field], code) for p in t["partitions"]],
        }
        for t in req.get("topics") or []
    ]


async def ask_leaders(
    s: GatewayServices,
    wanted: Iterable[tuple[PartitionKey, T]],
    call: Callable[[int, list[T]], Awaitable[dict[PartitionKey, Any] | ErrorCode]],
    answer: Callable[[int, Any], Body],
    failed: Callable[[int, ErrorCode], Body],
) -> dict[PartitionKey, Body]:
    """Each partition's answer, asking the leaders concurrently: ``wanted`` pairs a partition
    with its request item, ``call(node, items)`` asks one node (see :func:`call_leader`),
    ``answer(partition, result)`` and ``failed(partition, code)`` build the partition bodies."""
    results: dict[PartitionKey, Body] = {}
    by_node: dict[int, list[tuple[PartitionKey, T]]] = {}
    for key, item in wanted:
        leader = leader_of(s, *key)
        if isinstance(leader, ErrorCode):
            results[key] = failed(key[1], leader)
        else:
            by_node.setdefault(leader, []).append((key, item))

    async def ask(node: int, entries: list[tuple[PartitionKey, T]]) -> dict[PartitionKey, Body]:
        by_key = await call(node, [item for _, item in entries])
        out: dict[PartitionKey, Body] = {}
        for key, _ in entries:
            if isinstance(by_key, ErrorCode):
                out[key] = failed(key[1], by_key)
            elif (result := by_key.get(key)) is None:
                out[key] = failed(key[1], ErrorCode.UNKNOWN_SERVER_ERROR)
            else:
                out[key] = answer(key[1], result)
        return out

    for part in await asyncio.gather(*(ask(n, e) for n, e in by_node.items())):
        results.update(part)
    return results


def by_topic(results: dict[PartitionKey, Body], name_field: str) -> list[Body]:
    """The response's ``topics``: partition bodies grouped under their topic's name."""
    topics: dict[str, list[Body]] = {}
    for (name, _), body in results.items():
        topics.setdefault(name, []).append(body)
    return [{name_field: name, "partitions": parts} for name, parts in topics.items()]
