"""DeleteRecords (v0-2, kafka-delete-records.sh): one Storage.DeleteRecords per leader node.

As Kafka's broker: a partition named twice counts once (the last offset wins), an unknown
partition answers UNKNOWN_TOPIC_OR_PARTITION, and each leader waits up to the request's
timeout for its in-sync followers (services/storage/delete_records.py).
"""

from __future__ import annotations

import asyncio

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.leader_calls import PartitionKey, call_leader, error_topics, leader_of


def _partition(index: int, code: int, low_watermark: int = -1) -> Body:
    return {"partition_index": index, "low_watermark": low_watermark, "error_code": int(code)}


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    timeout_ms = int(req.get("timeout", 30000))
    offsets: dict[PartitionKey, int] = {}
    for t in req["topics"]:
        for p in t["partitions"]:
            offsets[(t["name"], p["partition_index"])] = p["offset"]
    results: dict[PartitionKey, Body] = {}
    by_node: dict[int, list[pb.PartitionDeleteRecords]] = {}
    for (name, index), offset in offsets.items():
        leader = leader_of(s, name, index)
        if isinstance(leader, ErrorCode):
            results[(name, index)] = _partition(index, leader)
            continue
        by_node.setdefault(leader, []).append(
            pb.PartitionDeleteRecords(topic=name, partition=index, offset=offset)
        )
    if by_node:
        answers = await asyncio.gather(
            *(_delete(s, node, items, timeout_ms) for node, items in by_node.items())
        )
        for answer in answers:
            results.update(answer)
    topics: dict[str, list[Body]] = {}
    for (name, _), res in results.items():
        topics.setdefault(name, []).append(res)
    return {
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }


async def _delete(
    s: GatewayServices, node: int, items: list[pb.PartitionDeleteRecords], timeout_ms: int
) -> dict[PartitionKey, Body]:
    request = pb.DeleteRecordsRequest(partitions=items, timeout_ms=timeout_ms)
    # the node answers by the request's timeout; the call may take that long plus a hop
    by_key = await call_leader(
        s, node, "DeleteRecords", request, max(timeout_ms, 0) / 1000.0 + s.request_timeout_s
    )
    out: dict[PartitionKey, Body] = {}
    for q in items:
        key = (q.topic, q.partition)
        if isinstance(by_key, ErrorCode):
            out[key] = _partition(q.partition, by_key)
            continue
        r = by_key.get(key)
        out[key] = (
            _partition(q.partition, ErrorCode.UNKNOWN_SERVER_ERROR)
            if r is None
            else _partition(q.partition, r.error_code, r.low_watermark)
        )
    return out


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {"throttle_time": 0, "topics": error_topics(req, _partition, code)}


HANDLER = ApiHandler(ApiKey.DELETE_RECORDS, "DeleteRecords", handle, error_response)
