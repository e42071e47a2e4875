"""DescribeProducers (v0, kafka-transactions.sh describe-producers / find-hanging): one
Storage.DescribeProducers per leader node, each partition answered with its active producers
(NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION as Kafka's broker for the rest)."""

from __future__ import annotations

from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body, as_error_code, error_message
from services.gateway.leader_calls import ask_leaders, by_topic, call_leader


def _partition(index: int, code: ErrorCode, message: str | None = None) -> Body:
    return {
        "partition_index": index,
        "error_code": int(code),
        "error_message": error_message(code, message),
        "active_producers": [],
    }


def _answer(index: int, r: pb.DescribeProducersPartitionResult) -> Body:
    out = _partition(index, as_error_code(r.error_code), r.error_message)
    out["active_producers"] = [
        {
            "producer_id": a.producer_id,
            "producer_epoch": a.producer_epoch,
            "last_sequence": a.last_sequence,
            "last_timestamp": a.last_timestamp,
            "coordinator_epoch": a.coordinator_epoch,
            "current_txn_start_offset": a.current_txn_start_offset,
        }
        for a in r.active_producers
    ]
    return out


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    wanted = dict.fromkeys(
        (t["name"], int(p)) for t in req.get("topics") or () for p in t["partition_indexes"]
    )

    def call(node: int, items: list[pb.DescribeProducersPartition]) -> Any:
        return call_leader(
            s, node, "DescribeProducers", pb.DescribeProducersRequest(partitions=items)
        )

    results = await ask_leaders(
        s,
        ((key, pb.DescribeProducersPartition(topic=key[0], partition=key[1])) for key in wanted),
        call,
        _answer,
        _partition,
    )
    return {"throttle_time": 0, "topics": by_topic(results, "name")}


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    topics = [
        {"name": t["name"], "partitions": [_partition(p, code) for p in t["partition_indexes"]]}
        for t in req.get("topics") or ()
    ]
    return {"throttle_time": 0, "topics": topics}


HANDLER = ApiHandler(ApiKey.DESCRIBE_PRODUCERS, "DescribeProducers", handle, error_response)
