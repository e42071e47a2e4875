"""DeleteRecords (v0-2, kafka-delete-records.sh): one Storage.DeleteRecords per leader node.

As Kafka's broker: a partition named twice counts once (the last offset wins), an unknown
partition answers UNKNOWN_TOPIC_OR_PARTITION, and each leader waits up to the request's
timeout for its in-sync followers (services/storage/delete_records.py).
"""

from __future__ import annotations

from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.leader_calls import (
    PartitionKey,
    ask_leaders,
    by_topic,
    call_leader,
    error_topics,
)


def _partition(index: int, code: int, low_watermark: int = -1) -> Body:
    return {"partition_index": index, "low_watermark": low_watermark, "error_code": int(code)}


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    timeout_ms = int(req.get("timeout", 30000))
    offsets: dict[PartitionKey, int] = {}
    for t in req["topics"]:
        for p in t["partitions"]:
            offsets[(t["name"], p["partition_index"])] = p["offset"]

    def call(node: int, items: list[pb.PartitionDeleteRecords]) -> Any:
        request = pb.DeleteRecordsRequest(partitions=items, timeout_ms=timeout_ms)
        # the node answers by the request's timeout; the call may take that long plus a hop
        timeout_s = max(timeout_ms, 0) / 1000.0 + s.request_timeout_s
        return call_leader(s, node, "DeleteRecords", request, timeout_s)

    results = await ask_leaders(
        s,
        (
            (key, pb.PartitionDeleteRecords(topic=key[0], partition=key[1], offset=offset))
            for key, offset in offsets.items()
        ),
        call,
        lambda index, r: _partition(index, r.error_code, r.low_watermark),
        _partition,
    )
    return {"throttle_time": 0, "topics": by_topic(results, "name")}


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {"throttle_time": 0, "topics": error_topics(req, _partition, code)}


HANDLER = ApiHandler(ApiKey.DELETE_RECORDS, "DeleteRecords", handle, error_response)
