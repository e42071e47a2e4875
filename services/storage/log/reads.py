"""The read path over a log's segments: whole batches from an offset, and the ListOffsets
lookups by timestamp (Kafka's ``LocalLog.read`` and ``fetchOffsetByTimestamp``).

Pure functions of a segment list: the caller (``Log``) holds its lock and checks the range.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from services.common.records.batch import DELETE_HORIZON_FLAG, LOG_OVERHEAD, BatchHeader
from services.common.records.record import iter_records
from services.storage.log.segment import LogSegment

_PREFIX = struct.Struct(">qi")


@dataclass
class ReadInfo:
    records: bytes | memoryview  # whole batches, possibly empty (a view of the read: no copy)
    first_offset: int | None  # base offset of the first returned batch
    log_start_offset: int
    log_end_offset: int
    high_watermark: int = 0


def read_batches(
    segments: Sequence[LogSegment],
    offset: int,
    max_bytes: int,
    max_offset: int | None,
    min_one_batch: bool,
) -> tuple[bytes | memoryview, int | None]:
    """(bytes, base offset of the first batch) of whole batches from the one containing
    ``offset``, at most ``max_bytes`` (KIP-74: at least one batch when ``min_one_batch``), none
    with base offset >= ``max_offset``; ``(b"", None)`` when there is nothing to return."""
    idx = segment_index_for(segments, offset)
    chunks: list[bytes | memoryview] = []
    first_offset: int | None = None
    budget = max(max_bytes, 0)
    while idx < len(segments):
        seg = segments[idx]
        if first_offset is None:
            start = seg.translate_offset(offset)
            if start is None:
                idx += 1
                continue
            if max_offset is not None and start.base_offset >= max_offset:
                break
            if min_one_batch:
                budget = max(budget, start.size)
            position = start.position
        else:
            position = 0
        if budget <= 0:
            break
        limit = min(budget, seg.size - position)
        if limit <= 0:  # empty segment
            idx += 1
            continue
        data = seg.read_bytes(position, limit)
        cut = whole_batches(data, max_offset)
        if cut == 0:
            break
        if first_offset is None:
            first_offset = _PREFIX.unpack_from(data, 0)[0]
        chunks.append(data if cut == len(data) else memoryview(data)[:cut])
        budget -= cut
        if cut < len(data) or position + cut < seg.size:
            break
        idx += 1
    if not chunks:
        return b"", None
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), first_offset


def segment_index_for(segments: Sequence[LogSegment], offset: int) -> int:
    """Index of the last segment whose base offset is <= ``offset`` (0 when none is)."""
    lo, hi = 0, len(segments) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if segments[mid].base_offset <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo


def whole_batches(data: bytes, max_offset: int | None) -> int:
    """Length of the prefix of ``data`` made of whole batches with base offset < ``max_offset``."""
    n = len(data)
    pos = 0
    while n - pos >= LOG_OVERHEAD:
        base, length = _PREFIX.unpack_from(data, pos)
        size = length + LOG_OVERHEAD
        if pos + size > n or (max_offset is not None and base >= max_offset):
            break
        pos += size
    return pos


def offset_for_timestamp(
    segments: Sequence[LogSegment], timestamp: int, start_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with timestamp >= ``timestamp``."""
    for seg in segments:
        if seg.max_timestamp < timestamp:
            continue
        h = seg.find_by_timestamp(timestamp, start_offset)
        if h is None:
            continue
        return exact_record(seg, h, lambda ts: ts >= timestamp, start_offset)
    return None


def max_timestamp_offset(
    segments: Sequence[LogSegment], start_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record carrying the largest timestamp."""
    best: LogSegment | None = None
    for seg in segments:
        if seg.size and (best is None or seg.max_timestamp > best.max_timestamp):
            best = seg
    if best is None or best.max_timestamp < 0:
        return None
    target = best.max_timestamp
    position = best.offset_index.lookup(best.offset_of_max_timestamp)[1]
    for h in best.iter_headers(position):
        if h.max_timestamp == target:
            return exact_record(best, h, lambda ts: ts == target, start_offset)
    return None


def exact_record(
    seg: LogSegment, h: BatchHeader, match: Callable[[int], bool], start_offset: int
) -> tuple[int, int]:
    """(offset, timestamp) of the first record of batch ``h`` that matches (decodes that batch)."""
    if h.log_append_time:  # every record carries the batch's append time
        return max(h.base_offset, start_offset), h.max_timestamp
    # (a batch with a KIP-534 delete horizon carries the horizon as base timestamp)
    if (
        not h.attributes & DELETE_HORIZON_FLAG
        and h.base_offset >= start_offset
        and match(h.base_timestamp)
    ):
        return h.base_offset, h.base_timestamp
    buf = seg.read_bytes(h.position, h.size)
    for rec in iter_records(buf, replace(h, position=0)):
        if rec.offset >= start_offset and match(rec.timestamp):
            return rec.offset, rec.timestamp
    return max(h.base_offset, start_offset), h.max_timestamp
