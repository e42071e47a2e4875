"""ListOffsets (v1-7): one Storage.ListOffsets per leader node."""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.leader_calls import call_leader, error_topics, leader_of

LATEST = -1
EARLIEST = -2
READ_COMMITTED = 1


def _partition(index: int, code: ErrorCode) -> Body:
    return {
        "partition_index": index,
        "error_code": int(code),
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    isolation = int(req.get("isolation_level", 0))
    topics_out: list[Body] = []
    by_node: dict[int, list[tuple[Any, Body]]] = {}
    seen: set[tuple[str, int]] = set()
    for t in req["topics"]:
        name = t["name"]
        parts: list[Body] = []
        topics_out.append({"name": name, "partitions": parts})
        for p in t["partitions"]:
            index = p["partition_index"]
            if (name, index) in seen:
                parts.append(_partition(index, ErrorCode.INVALID_REQUEST))
                continue
            seen.add((name, index))
            leader = leader_of(s, name, index)
            if isinstance(leader, ErrorCode):
                parts.append(_partition(index, leader))
                continue
            res = _partition(index, ErrorCode.NONE)
            parts.append(res)
            by_node.setdefault(leader, []).append(
                (
                    pb.PartitionOffsetQuery(
                        topic=name,
                        partition=index,
                        timestamp=p["timestamp"],
                        current_leader_epoch=p.get("current_leader_epoch", -1),
                    ),
                    res,
                )
            )
    if by_node:
        await asyncio.gather(
            *(_query(s, node, items, isolation) for node, items in by_node.items())
        )
    return {"throttle_time": 0, "topics": topics_out}


async def _query(
    s: GatewayServices, node: int, items: list[tuple[Any, Body]], isolation: int
) -> None:
    request = pb.ListOffsetsRequest(isolation_level=isolation, partitions=[q for q, _ in items])
    by_key = await call_leader(s, node, "ListOffsets", request)
    if isinstance(by_key, ErrorCode):
        for _, res in items:
            res.update(_partition(res["partition_index"], by_key))
        return
    for q, res in items:
        r = by_key.get((q.topic, q.partition))
        if r is None:
            res.update(_partition(res["partition_index"], ErrorCode.UNKNOWN_SERVER_ERROR))
            continue
        res["error_code"] = r.error_code
        if r.error_code:
            continue
        res["timestamp"] = r.timestamp
        res["offset"] = r.offset
        res["leader_epoch"] = r.leader_epoch
        if q.timestamp == LATEST:
            if isolation == READ_COMMITTED:
                s.offsets.update(q.topic, q.partition, last_stable_offset=r.offset)
            else:
                s.offsets.update(q.topic, q.partition, high_watermark=r.offset)
        elif q.timestamp == EARLIEST:
            s.offsets.update(q.topic, q.partition, log_start_offset=r.offset)


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {"throttle_time": 0, "topics": error_topics(req, _partition, code)}


HANDLER = ApiHandler(ApiKey.LIST_OFFSETS, "ListOffsets", handle, error_response)
