"""OffsetForLeaderEpoch (v2-4, KIP-320): the end offset of a leader epoch, per partition.

Consumers ask it after a leader change to check that their position still exists on the new
leader (librdkafka and the Java client detect log truncation this way). Each partition's
leader storage node answers from its leader-epoch cache (services/storage/epochs.py), after
checking the client's current leader epoch: FENCED_LEADER_EPOCH when the client's is older,
UNKNOWN_LEADER_EPOCH when it is newer. A partition named twice is answered once.
"""

from __future__ import annotations

import asyncio

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.leader_calls import PartitionKey, call_leader, leader_of

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
    results: dict[PartitionKey, Body] = {}
    by_node: dict[int, list[pb.OffsetForLeaderEpochPartition]] = {}
    seen: set[PartitionKey] = set()
    for t in req["topics"]:
        for p in t["partitions"]:
            key = (t["topic"], p["partition"])
            if key in seen:
                continue
            seen.add(key)
            leader = leader_of(s, *key)
            if isinstance(leader, ErrorCode):
                results[key] = _partition(p["partition"], leader)
                continue
            by_node.setdefault(leader, []).append(
                pb.OffsetForLeaderEpochPartition(
                    topic=key[0],
                    partition=key[1],
                    current_leader_epoch=p.get("current_leader_epoch", -1),
                    leader_epoch=p["leader_epoch"],
                )
            )
    if by_node:
        replica_id = req.get("replica_id", CONSUMER_REPLICA_ID)
        answers = await asyncio.gather(
            *(_ask(s, node, replica_id, items) for node, items in by_node.items())
        )
        for answer in answers:
            results.update(answer)
    topics: dict[str, list[Body]] = {}
    for (name, _), res in results.items():
        topics.setdefault(name, []).append(res)
    return {
        "throttle_time": 0,
        "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()],
    }


async def _ask(
    s: GatewayServices, node: int, replica_id: int, items: list[pb.OffsetForLeaderEpochPartition]
) -> dict[PartitionKey, Body]:
    request = pb.OffsetForLeaderEpochRequest(replica_id=replica_id, partitions=items)
    by_key = await call_leader(s, node, "OffsetForLeaderEpoch", request)
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
            else _partition(q.partition, r.error_code, r.leader_epoch, r.end_offset)
        )
    return out


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {
        "throttle_time": 0,
        "topics": [
            {
                "topic": t["topic"],
                "partitions": [_partition(p["partition"], code) for p in t["partitions"]],
            }
            for t in req.get("topics") or []
        ],
    }


HANDLER = ApiHandler(ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", handle, error_response)
