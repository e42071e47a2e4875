"""Storage.WriteTxnMarkers: the transaction coordinator's COMMIT/ABORT markers (Kafka's
``KafkaApis.handleWriteTxnMarkersRequest``).

For each (transaction, partition) this node leads, one control batch - a single record with
key (version 0, type ABORT=0 / COMMIT=1) and value (version 0, coordinator epoch), the batch
flagged transactional + control and carrying the producer id and epoch - is appended with
the coordinator's origin: the producer state rejects a producer epoch older than the
partition's current one (INVALID_PRODUCER_EPOCH) and a coordinator epoch older than the last
marker's (TRANSACTION_COORDINATOR_FENCED), then completes the transaction (the last stable
offset moves; an abort goes into the segment's ``.txnindex``). Like acks=all, a partition
answers once its marker is below the high watermark (min.insync.replicas applies).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.records.batch import validate_batches
from services.common.records.record import build_end_txn_marker
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.appends import await_replication
from services.storage.partition import NO_EPOCH, Partition
from services.storage.producer_state import AppendOrigin
from services.storage.replica_manager import ReplicaManager

log = get_logger("storage.txn_markers")

DEFAULT_TIMEOUT_MS = 30_000  # Kafka writes markers with request.timeout.ms


@dataclass(slots=True)
class _Pending:
    partition: Partition
    required_offset: int
    result: pb.TxnMarkerPartitionResult


def _fail(result: pb.TxnMarkerPartitionResult, code: ErrorCode, message: str) -> None:
    result.error_code = code
    result.error_message = message or code.name
    result.offset = -1


async def write_txn_markers(
    rm: ReplicaManager, req: pb.WriteTxnMarkersRequest
) -> pb.WriteTxnMarkersResponse:
    response = pb.WriteTxnMarkersResponse()
    pending: list[_Pending] = []
    for marker in req.markers:
        out = response.markers.add(producer_id=marker.producer_id)
        for tp in marker.partitions:
            result = out.partitions.add(topic=tp.topic, partition=tp.partition, offset=-1)
            try:
                p, offset = _append_marker(rm, marker, tp)
            except KafkaError as exc:
                _fail(result, exc.code, exc.message)
                continue
            except OSError as exc:  # the disk under this log failed: its whole dir goes offline
                log.error(
                    "marker I/O error", topic=tp.topic, partition=tp.partition, error=repr(exc)
                )
                rm.report_io_error(tp.topic, tp.partition, exc)
                _fail(result, ErrorCode.KAFKA_STORAGE_ERROR, f"I/O error: {exc}")
                continue
            except Exception:
                log.exception("marker append failed", topic=tp.topic, partition=tp.partition)
                _fail(result, ErrorCode.UNKNOWN_SERVER_ERROR, "unexpected error writing the marker")
                continue
            result.offset = offset
            pending.append(_Pending(p, offset + 1, result))
    if pending:
        timeout_ms = req.timeout_ms if req.timeout_ms > 0 else DEFAULT_TIMEOUT_MS
        outcomes = await await_replication(
            rm, [(w.partition, w.required_offset) for w in pending], timeout_ms
        )
        for w, (code, message) in zip(pending, outcomes, strict=True):
            if code != ErrorCode.NONE:
                _fail(w.result, code, message)
    return response


def _append_marker(
    rm: ReplicaManager, marker: pb.WritableTxnMarker, tp: pb.TxnMarkerPartition
) -> tuple[Partition, int]:
    p = rm.leader_or_error(tp.topic, tp.partition, NO_EPOCH)
    now = rm.clock()
    records = bytearray(
        build_end_txn_marker(
            marker.transaction_result,
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
            timestamp=now,
        )
    )
    headers = validate_batches(records)
    info = p.append_as_leader(records, headers, -1, now, origin=AppendOrigin.COORDINATOR)
    rm.on_append(p)
    log.info(
        "txn_marker_written",
        topic=tp.topic,
        partition=tp.partition,
        producer_id=marker.producer_id,
        producer_epoch=marker.producer_epoch,
        coordinator_epoch=marker.coordinator_epoch,
        commit=marker.transaction_result,
        offset=info.first_offset,
    )
    return p, info.first_offset
