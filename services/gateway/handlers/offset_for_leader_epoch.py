"""OffsetForLeaderEpoch (v2-4, KIP-320): the end offset of a leader epoch, per partition.

Consumers ask it after a leader change to check that their position still exists on the new
leader (librdkafka and the Java client detect log truncation this way). Each partition's
leader storage node answers from its leader-epoch cache (services/storage/epochs.py), after
checking the client's current leader epoch: FENCED_LEADER_EPOCH when the client's is older,
UNKNOWN_LEADER_EPOCH when it is newer. A partition named twice is answered once.
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

CONSUMER_REPLICA_ID = -1


def _partition(index: int, code: int, leader_epoch: int = -1, end_offset: int = -1) -> Body:
    return {
        "error_code": int(code),
        "partition": index,
        "leader_epoch": leader_epoch,
        "end_offset": end_offset,
    }


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    wanted: dict[PartitionKey, pb.OffsetForLeaderEpochPartition] = {}
    for t in req["topics"]:
        for p in t["partitions"]:
            key = (t["topic"], p["partition"])
            wanted.setdefault(
                key,
                pb.OffsetForLeaderEpochPartition(
                    topic=key[0],
                    partition=key[1],
                    current_leader_epoch=p.get("current_leader_epoch", -1),
                    leader_epoch=p["leader_epoch"],
                ),
            )
    replica_id = req.get("replica_id", CONSUMER_REPLICA_ID)

    def call(node: int, items: list[pb.OffsetForLeaderEpochPartition]) -> Any:
        request = pb.OffsetForLeaderEpochRequest(replica_id=replica_id, partitions=items)
        return call_leader(s, node, "OffsetForLeaderEpoch", request)

    results = await ask_leaders(
        s,
        wanted.items(),
        call,
        lambda index, r: _partition(index, r.error_code, r.leader_epoch, r.end_offset),
        _partition,
    )
    return {"throttle_time": 0, "topics": by_topic(results, "topic")}


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    topics = error_topics(req, _partition, code, name_field="topic", index_field="partition")
    return {"throttle_time": 0, "topics": topics}


HANDLER = ApiHandler(ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", handle, error_response)
