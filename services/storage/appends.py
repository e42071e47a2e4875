"""Storage.Append: the leader side of Produce.

Each partition is handled on its own (an error on one never affects the others): lookup,
leader and epoch checks, batch header validation, min.insync.replicas, append. acks=-1 then
parks the request in the produce purgatory until the high watermark passes every appended
partition's last offset (Kafka's DelayedProduce), or timeout_ms passes.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.errors import RETRIABLE, ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.records.batch import BatchHeader, validate_batches
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.log.record_validation import RecordValidationError
from services.storage.partition import Partition
from services.storage.replica_manager import ReplicaManager
from services.storage.wire import AppendCall, AppendPartition

log = get_logger("storage.append")

VALID_ACKS = (-1, 0, 1)


@dataclass(slots=True)
class _Pending:
    partition: Partition
    required_offset: int  # last appended offset + 1
    result: pb.PartitionAppendResult


def _fail(result: pb.PartitionAppendResult, code: ErrorCode, message: str) -> None:
    result.error_code = code
    result.error_message = message or code.name
    result.base_offset = -1
    result.log_append_time_ms = -1
    result.log_start_offset = -1


def append_now(
    rm: ReplicaManager, req: pb.AppendRequest | AppendCall
) -> tuple[list[pb.PartitionAppendResult], list[_Pending]]:
    """The appends of one request, made now: the partitions' results, and for acks=-1 what
    must still reach the ISR (``finish_append`` waits for it; the results are final only
    then)."""
    results: list[pb.PartitionAppendResult] = []
    pending: list[_Pending] = []
    for pa in req.partitions:
        result = pb.PartitionAppendResult(topic=pa.topic, partition=pa.partition)
        results.append(result)
        if req.acks not in VALID_ACKS:
            _fail(
                result, ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1, 0 or 1, not {req.acks}"
            )
            continue
        try:
            p, required = _append_one(rm, pa, req.acks, result, bool(req.transactional_id))
        except RecordValidationError as exc:
            _fail(result, exc.code, exc.message)
            result.record_errors.extend(
                pb.RecordError(batch_index=i, message=m) for i, m in exc.record_errors
            )
            continue
        except KafkaError as exc:
            _fail(result, exc.code, exc.message)
            continue
        except OSError as exc:  # the disk under this log failed: its whole dir goes offline
            log.error("append I/O error", topic=pa.topic, partition=pa.partition, error=repr(exc))
            rm.report_io_error(pa.topic, pa.partition, exc)
            _fail(result, ErrorCode.KAFKA_STORAGE_ERROR, f"I/O error: {exc}")
            continue
        except Exception:
            log.exception("append failed", topic=pa.topic, partition=pa.partition)
            rm.metrics.failed_produce_requests.labels(pa.topic).inc()
            _fail(result, ErrorCode.UNKNOWN_SERVER_ERROR, "unexpected error while appending")
            continue
        if req.acks == -1:
            pending.append(_Pending(p, required, result))
    return results, pending


async def finish_append(
    rm: ReplicaManager,
    results: list[pb.PartitionAppendResult],
    pending: list[_Pending],
    timeout_ms: int,
) -> pb.AppendResponse:
    """What ``append_now`` left: acks=-1's wait for replication; then the answer."""
    if pending:
        await _await_replication(rm, pending, timeout_ms)
    return pb.AppendResponse(partitions=results)


async def append(rm: ReplicaManager, req: pb.AppendRequest | AppendCall) -> pb.AppendResponse:
    results, pending = append_now(rm, req)
    return await finish_append(rm, results, pending, req.timeout_ms)


def _append_one(
    rm: ReplicaManager,
    pa: pb.PartitionAppend | AppendPartition,
    acks: int,
    result: pb.PartitionAppendResult,
    verify: bool = False,
) -> tuple[Partition, int]:
    p = rm.partition_or_error(pa.topic, pa.partition)
    # the one copy (offsets are assigned in place): made by wire.parse_append_request, or here
    records = pa.records if isinstance(pa.records, bytearray) else bytearray(pa.records)
    try:
        p.check_leader(pa.current_leader_epoch)
    except KafkaError as exc:
        _note_refusal(p, records, exc.code, rm.clock())
        raise
    meters = rm.metrics.topic(pa.topic)
    meters.produce_requests.inc()
    headers = validate_batches(records)
    try:
        if verify and headers:  # a client's transactional produce (not a coordinator's write)
            _check_verified(p, headers[0], pa.verification_guard, result)
        info = p.append_as_leader(records, headers, acks, rm.clock())
    except KafkaError as exc:
        if exc.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            refused = p.refused.explains(headers, rm.clock())
            if refused is not None:
                raise KafkaError(
                    refused.code,
                    f"sequence {headers[0].base_sequence} follows sequences "
                    f"{refused.first_seq}..{refused.last_seq} of this producer, which this "
                    f"replica refused with {refused.code.name}: retry those first",
                ) from None
        elif exc.code in RETRIABLE:  # refused before anything was written
            p.refused.refused(headers, exc.code, rm.clock())
        raise
    p.refused.appended(headers)
    meters.bytes_in.inc(len(records))
    if not info.duplicate:
        meters.messages_in.inc(sum(h.record_count for h in headers))
        rm.on_append(p)
    result.error_code = ErrorCode.NONE
    result.base_offset = info.first_offset
    result.log_append_time_ms = info.log_append_time
    result.log_start_offset = info.log_start_offset
    return p, info.last_offset + 1


def _check_verified(
    p: Partition, header: BatchHeader, guard: int, result: pb.PartitionAppendResult
) -> None:
    """KIP-890 part 1: the first transactional batch of a producer (id and epoch) here needs
    the transaction coordinator's word that the partition is in its transaction. Without a
    guard, one is handed out in ``result`` and the batch refused (NOT_ENOUGH_REPLICAS, the
    retriable code Kafka gives old clients while verifying): the gateway verifies and resends
    it with the guard. A guard a marker of the producer invalidated meanwhile (the transaction
    ended: the batch is late) is INVALID_TXN_STATE - it would open a hanging transaction.
    The refusal is remembered as any retriable one (refused_batches): a pipelined batch resent
    ahead of this one gets its answer, not OUT_OF_ORDER_SEQUENCE_NUMBER."""
    if not header.is_transactional or header.is_control:
        return
    state = p.log.producer_state
    pid, epoch = header.producer_id, header.producer_epoch
    if state.has_ongoing_txn(pid, epoch):
        return
    if guard:
        if state.is_verified(pid, epoch, guard):
            return
        raise KafkaError(
            ErrorCode.INVALID_TXN_STATE,
            f"The transaction of producer {pid} (epoch {epoch}) ended while its first append "
            f"to {p.topic}-{p.partition} was being verified",
        )
    result.verification_guard = state.verification_guard(pid, epoch)
    raise KafkaError(
        ErrorCode.NOT_ENOUGH_REPLICAS,
        f"The transactional append of producer {pid} to {p.topic}-{p.partition} awaits "
        "verification by the transaction coordinator",
    )


async def _await_replication(rm: ReplicaManager, pending: list[_Pending], timeout_ms: int) -> None:
    outcomes = await await_replication(
        rm, [(w.partition, w.required_offset) for w in pending], timeout_ms
    )
    for w, (code, message) in zip(pending, outcomes, strict=True):
        if code != ErrorCode.NONE:
            _fail(w.result, code, message)


async def await_replication(
    rm: ReplicaManager, waits: list[tuple[Partition, int]], timeout_ms: int
) -> list[tuple[ErrorCode, str]]:
    """acks=all: wait (in the produce purgatory) until each partition's high watermark passes
    its required offset, or ``timeout_ms``; returns (error code, message) per wait."""

    def status(p: Partition, required: int) -> ErrorCode | None:
        if rm.get(p.topic, p.partition) is not p:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return p.replication_error(required)

    await rm.produce_waiters.wait_until(
        [p.key for p, _ in waits],
        lambda: all(status(p, r) is not None for p, r in waits),
        max(timeout_ms, 0) / 1000.0,
    )
    out: list[tuple[ErrorCode, str]] = []
    for p, required in waits:
        code = status(p, required)
        if code is None:
            out.append(
                (ErrorCode.REQUEST_TIMED_OUT, f"not replicated to the ISR within {timeout_ms} ms")
            )
        elif code != ErrorCode.NONE:
            out.append((code, _message(code, p)))
        else:
            out.append((ErrorCode.NONE, ""))
    return out


def _note_refusal(p: Partition, records: bytearray, code: ErrorCode, now_ms: int) -> None:
    """Remember an idempotent batch refused before the batches were even checked."""
    if code not in RETRIABLE:
        return
    try:
        headers = validate_batches(records)
    except KafkaError:
        return  # a corrupt append has no sequence to remember
    p.refused.refused(headers, code, now_ms)


def _message(code: ErrorCode, p: Partition) -> str:
    if code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
        return (
            f"written to the leader but the ISR of {p.topic}-{p.partition} shrank below "
            f"min.insync.replicas ({p.min_insync_replicas})"
        )
    return f"leadership of {p.topic}-{p.partition} moved before the write was replicated"
