"""ListOffsets (v0-7): one Storage.ListOffsets per leader node.

v0 (Kafka 3.x still serves it; Sarama-based tools such as Burrow send it) asks for up to
``max_num_offsets`` offsets per partition and gets ``old_style_offsets``. kafka-py answers with
at most one: the high watermark for -1, the log start offset for -2 (Kafka's first entry for
both), and for a timestamp the first offset at or after it (Kafka lists segment base offsets
there, which kafka-py's storage does not expose); nothing when ``max_num_offsets`` is 0 or
there is no such offset."""

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
    if ctx.api_version == 0:
        return _old_style(await _handle(ctx, req), req)
    return await _handle(ctx, req)


def _old_style(resp: Body, req: Body) -> Body:
    """A v1 answer in v0's form (``old_style_offsets``)."""
    wanted = {
        (t["name"], p["partition_index"]): p.get("max_num_offsets", 1)
        for t in req["topics"]
        for p in t["partitions"]
    }
    topics = []
    for t in resp["topics"]:
        parts = []
        for p in t["partitions"]:
            ok = p["error_code"] == 0 and p["offset"] >= 0
            limit = wanted.get((t["name"], p["partition_index"]), 1)
            parts.append(
                {
                    "partition_index": p["partition_index"],
                    "error_code": p["error_code"],
                    "old_style_offsets": [p["offset"]] if ok and limit > 0 else [],
                }
            )
        topics.append({"name": t["name"], "partitions": parts})
    return {"topics": topics}


async def _handle(ctx: RequestContext, req: Body) -> Body:
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
    resp = {"throttle_time": 0, "topics": error_topics(req, _partition, code)}
    return _old_style(resp, req) if version == 0 else resp


HANDLER = ApiHandler(ApiKey.LIST_OFFSETS, "ListOffsets", handle, error_response)
