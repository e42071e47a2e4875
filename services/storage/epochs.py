"""Storage.OffsetForLeaderEpoch: the end offset of a leader epoch, answered by the leader.

Kafka's ``Partition.lastOffsetForLeaderEpoch``: after the current-leader-epoch check (FENCED /
UNKNOWN_LEADER_EPOCH) and the leader check (NOT_LEADER_OR_FOLLOWER), the answer comes from the
leader-epoch cache: the largest epoch <= the requested one and the start offset of the next
epoch, or the log end offset when the requested epoch is the latest. An epoch the log knows
nothing about (or the requested -1) is answered with no error and epoch = end offset = -1
(UNDEFINED); the follower then falls back to its high watermark.
"""

from __future__ import annotations

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.partition import NO_EPOCH, UNKNOWN_OFFSET
from services.storage.replica_manager import ReplicaManager

log = get_logger("storage.offset_for_leader_epoch")


def offset_for_leader_epoch(
    rm: ReplicaManager, req: pb.OffsetForLeaderEpochRequest
) -> pb.OffsetForLeaderEpochResponse:
    results: list[pb.EpochEndOffset] = []
    for q in req.partitions:
        result = pb.EpochEndOffset(
            topic=q.topic,
            partition=q.partition,
            error_code=ErrorCode.NONE,
            leader_epoch=NO_EPOCH,
            end_offset=UNKNOWN_OFFSET,
        )
        results.append(result)
        try:
            p = rm.leader_or_error(q.topic, q.partition, q.current_leader_epoch)
            epoch, end_offset = p.end_offset_for_epoch(q.leader_epoch)
            result.leader_epoch, result.end_offset = epoch, end_offset
        except KafkaError as exc:
            result.error_code = exc.code
        except Exception:
            log.exception("offset for leader epoch failed", topic=q.topic, partition=q.partition)
            result.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
    return pb.OffsetForLeaderEpochResponse(partitions=results)
