"""Storage.ListOffsets: earliest, latest, max-timestamp and by-timestamp lookups (leader only).

As Kafka's ``Partition.fetchOffsetForTimestamp`` for consumers: "latest" is the high watermark
(read_uncommitted) or the last stable offset (read_committed); lookups by timestamp only return offsets below that bound; a leader whose
high watermark has not yet reached the start of its epoch answers OFFSET_NOT_AVAILABLE.
"""

from __future__ import annotations

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.partition import NO_EPOCH, Partition
from services.storage.replica_manager import ReplicaManager

log = get_logger("storage.list_offsets")

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
NO_TIMESTAMP = -1
READ_COMMITTED = 1


def list_offsets(rm: ReplicaManager, req: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
    results: list[pb.PartitionOffsetResult] = []
    for q in req.partitions:
        result = pb.PartitionOffsetResult(
            topic=q.topic, partition=q.partition, timestamp=-1, offset=-1, leader_epoch=NO_EPOCH
        )
        results.append(result)
        try:
            p = rm.leader_or_error(q.topic, q.partition, q.current_leader_epoch)
            _lookup(p, q.timestamp, req.isolation_level, result)
        except KafkaError as exc:
            result.error_code = exc.code
        except Exception:
            log.exception("list offsets failed", topic=q.topic, partition=q.partition)
            result.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
    return pb.ListOffsetsResponse(partitions=results)


def _last_fetchable_offset(p: Partition, isolation_level: int) -> int:
    """read_committed reads up to the last stable offset, read_uncommitted to the HW."""
    return p.log.last_stable_offset if isolation_level == READ_COMMITTED else p.high_watermark


def _lookup(
    p: Partition, timestamp: int, isolation_level: int, result: pb.PartitionOffsetResult
) -> None:
    last_fetchable = _last_fetchable_offset(p, isolation_level)
    # Kafka compares the epoch's start with the high watermark whatever the isolation level
    # (an open transaction may keep the LSO below it for long)
    if p.leader_epoch_start_offset > p.high_watermark:
        raise KafkaError(
            ErrorCode.OFFSET_NOT_AVAILABLE,
            f"high watermark {p.high_watermark} has not reached the start offset "
            f"{p.leader_epoch_start_offset} of leader epoch {p.leader_epoch}",
        )
    result.error_code = ErrorCode.NONE
    if timestamp == EARLIEST_TIMESTAMP:
        offset = p.log.log_start_offset
        result.offset, result.timestamp = offset, NO_TIMESTAMP
        result.leader_epoch = p.epoch_for_offset(offset)
        return
    if timestamp == LATEST_TIMESTAMP:
        result.offset, result.timestamp = last_fetchable, NO_TIMESTAMP
        result.leader_epoch = p.leader_epoch
        return
    found = (
        p.log.max_timestamp_offset()
        if timestamp == MAX_TIMESTAMP
        else (p.log.offset_for_timestamp(timestamp))
    )
    if found is None or found[0] >= last_fetchable:
        return  # offset -1, timestamp -1, error NONE: no such record (yet)
    result.offset, result.timestamp = found
    result.leader_epoch = p.epoch_for_offset(found[0])
