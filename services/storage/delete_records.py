"""Storage.DeleteRecords: move partitions' log start offsets forward (kafka-delete-records.sh).

As Kafka's ``ReplicaManager.deleteRecords``: on the leader, the requested offset (-1 = the high
watermark) becomes the log start offset. An offset beyond the high watermark, or below -1, is
OFFSET_OUT_OF_RANGE; a topic whose ``cleanup.policy`` lacks ``delete`` answers
POLICY_VIOLATION. The answer waits until the partition's low watermark has reached the offset,
up to the request's timeout (then REQUEST_TIMED_OUT): the lowest log start offset over the
leader and its in-sync followers, which learn the new start from their next fetch. Segments
wholly below the new start go with the next retention pass.
"""

from __future__ import annotations

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.log.config import LogConfig
from services.storage.partition import NO_EPOCH, Partition
from services.storage.replica_manager import ReplicaManager

log = get_logger("storage.delete_records")

HIGH_WATERMARK = -1

_Pending = tuple[Partition, int, pb.PartitionDeleteRecordsResult]


async def delete_records(
    rm: ReplicaManager, req: pb.DeleteRecordsRequest
) -> pb.DeleteRecordsResponse:
    results: list[pb.PartitionDeleteRecordsResult] = []
    pending: list[_Pending] = []
    for q in req.partitions:
        result = pb.PartitionDeleteRecordsResult(
            topic=q.topic, partition=q.partition, low_watermark=-1
        )
        results.append(result)
        try:
            p = rm.leader_or_error(q.topic, q.partition, NO_EPOCH)
            pending.append((p, _delete_on_leader(p, q.offset), result))
            rm.mark_changed(p.key)
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, exc.message
        except Exception:
            log.exception("delete records failed", topic=q.topic, partition=q.partition)
            result.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
    if pending:
        await rm.delete_records_waiters.wait_until(
            [p.key for p, _, _ in pending],
            lambda: all(_settled(rm, p, offset) for p, offset, _ in pending),
            max(req.timeout_ms, 0) / 1000.0,
        )
        for p, offset, result in pending:
            _answer(rm, p, offset, result)
    return pb.DeleteRecordsResponse(partitions=results)


def _delete_on_leader(p: Partition, offset: int) -> int:
    """Move the leader's log start offset; returns the offset the low watermark must reach."""
    if not LogConfig.from_topic_config(p.config).delete_enabled:
        raise KafkaError(
            ErrorCode.POLICY_VIOLATION,
            f"Records of partition {p.topic}-{p.partition} can not be deleted due to the "
            "configured policy",
        )
    target = p.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        raise KafkaError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"The offset {offset} for partition {p.topic}-{p.partition} is not valid",
        )
    p.log.maybe_increment_log_start_offset(target)  # OFFSET_OUT_OF_RANGE beyond the HW
    return target


def low_watermark(p: Partition) -> int:
    """Kafka's ``lowWatermarkIfLeader``, over the in-sync followers: a follower whose state is
    not known yet in this leadership holds it at -1 until its first fetch."""
    low = p.log.log_start_offset
    for broker_id, replica in p.remote.items():
        if broker_id in p.isr:
            low = min(low, replica.log_start_offset)
    return low


def _current(rm: ReplicaManager, p: Partition) -> bool:
    return rm.get(p.topic, p.partition) is p and p.is_leader


def _settled(rm: ReplicaManager, p: Partition, offset: int) -> bool:
    return not _current(rm, p) or low_watermark(p) >= offset


def _answer(
    rm: ReplicaManager, p: Partition, offset: int, result: pb.PartitionDeleteRecordsResult
) -> None:
    if not _current(rm, p):
        result.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        result.error_message = f"leadership of {p.topic}-{p.partition} moved"
        return
    result.low_watermark = low_watermark(p)
    if result.low_watermark < offset:
        result.error_code = ErrorCode.REQUEST_TIMED_OUT
        result.error_message = (
            f"the in-sync replicas of {p.topic}-{p.partition} did not all reach log start "
            f"offset {offset} within the timeout"
        )
