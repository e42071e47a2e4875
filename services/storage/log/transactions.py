"""Transaction bookkeeping of a log: reading the COMMIT/ABORT marker of control batches,
recording aborted transactions in the segments' ``.txnindex``, and collecting them for a
read_committed fetch (Kafka's ``UnifiedLog.collectAbortedTransactions``).

Functions over segments and the producer state; ``Log`` calls them under its lock.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import replace

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import LOG_OVERHEAD, BatchHeader
from services.common.records.record import (
    EndTxnMarker,
    iter_records,
    parse_control_key,
    parse_end_txn_marker,
)
from services.storage.log.reads import segment_index_for
from services.storage.log.segment import LogSegment
from services.storage.log.txn_index import AbortedTxn
from services.storage.producer_state import CompletedTxn, ProducerStateManager

_PREFIX = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23  # baseOffset 8, length 4, epoch 4, magic 1, crc 4, attributes 2


def batch_marker(buf: bytes | bytearray | memoryview, header: BatchHeader) -> EndTxnMarker | None:
    """The transaction marker of control batch ``header`` in ``buf`` (None for a data batch or
    another control type); a control batch without a well-formed record is CORRUPT_MESSAGE."""
    if not header.is_control:
        return None
    for record in iter_records(buf, header):
        if not parse_control_key(record.key).is_transaction_marker:
            return None
        return parse_end_txn_marker(record)
    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "control batch without a control record")


def batch_markers(
    buf: bytes | bytearray | memoryview, headers: Sequence[BatchHeader]
) -> dict[int, EndTxnMarker]:
    """The markers of the control batches among ``headers``, by index."""
    out: dict[int, EndTxnMarker] = {}
    for i, h in enumerate(headers):
        if h.is_control:
            marker = batch_marker(buf, h)
            if marker is not None:
                out[i] = marker
    return out


def segment_marker(seg: LogSegment, header: BatchHeader) -> EndTxnMarker | None:
    """The marker of a control batch read back from its segment."""
    if not header.is_control:
        return None
    return batch_marker(seg.read_bytes(header.position, header.size), replace(header, position=0))


def record_completed(
    psm: ProducerStateManager, seg: LogSegment, completed: CompletedTxn | None
) -> None:
    """An aborted transaction goes into the ``.txnindex`` of the segment holding its marker,
    with the LSO right after it (Kafka's ``LogSegment.updateTxnIndex``)."""
    if completed is None or not completed.is_aborted:
        return
    seg.txn_index.append(
        AbortedTxn(
            completed.producer_id,
            completed.first_offset,
            completed.last_offset,
            psm.last_stable_offset_after(completed),
        )
    )


def collect_aborted(
    segments: Sequence[LogSegment], fetch_offset: int, upper_bound: int
) -> list[AbortedTxn]:
    """The aborted transactions overlapping [fetch_offset, upper_bound), from the segment
    holding ``fetch_offset`` on, until an entry's LSO shows no later one can overlap."""
    out: list[AbortedTxn] = []
    if not segments:
        return out
    for seg in segments[segment_index_for(segments, fetch_offset) :]:
        found, complete = seg.txn_index.collect(fetch_offset, upper_bound)
        out.extend(found)
        if complete:
            break
    return out


def next_offset_after(data: bytes | memoryview, default: int) -> int:
    """The offset after the last whole batch in ``data`` (``default`` when there is none)."""
    pos, n, end = 0, len(data), default
    while n - pos >= _LAST_OFFSET_DELTA_AT + _LAST_OFFSET_DELTA.size:
        base, length = _PREFIX.unpack_from(data, pos)
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(data, pos + _LAST_OFFSET_DELTA_AT)
        end = base + delta + 1
        pos += length + LOG_OVERHEAD
    return end
