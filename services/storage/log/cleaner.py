"""Log compaction of one partition log (Kafka's ``Cleaner``).

A compacted log keeps at least the last record of every key. The log is split at the
*first dirty offset* (where the previous cleaning stopped, from ``cleaner-offset-checkpoint``)
into a clean head and a dirty tail; the dirty tail up to the *first uncleanable offset* (the
active segment, the high watermark, ``min.compaction.lag.ms``) is cleanable. Cleaning:

1. builds a map key -> last offset over the cleanable dirty records, as many as fit in
   ``log.cleaner.dedupe.buffer.size`` (``offset_map``); where the map is full, the cleaning's
   range ends, possibly inside a segment or a batch, and the next cleaning starts there;
2. recopies every segment that starts below the end of that range, in groups that fit one
   segment (``segment.bytes``), keeping a record when it lies past the range or no later
   offset of its key is in the map. Records without a key within the range are dropped. Tombstones (null values) are kept while their segment is
   younger than the *delete horizon*: the last clean segment's modification time minus
   ``delete.retention.ms``. A batch that loses every record is dropped, unless it is its
   producer's last batch: that one stays, empty, so the producer's sequence survives;
3. swaps each cleaned group in: files are written as ``.cleaned``, fsynced, renamed ``.swap``,
   and the log replaces the group under its lock (see ``Log.replace_segments``; a crash
   between the steps is completed on the next open).

Offsets never change: a rewritten batch keeps its base offset and last offset, so consumers
and followers see gaps, as with Kafka. The work runs in a worker thread; the log's lock is
taken only to look at the segment list, open the files and swap.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from services.common.errors import KafkaError
from services.common.logging import get_logger
from services.common.records.batch import HEADER_SIZE, BatchHeader, iter_headers, parse_header
from services.common.records.record import (
    RecordSpan,
    delete_horizon_ms,
    rebuild_batch,
    records_payload,
    scan_records,
    with_delete_horizon,
)
from services.storage.log import files
from services.storage.log.config import LONG_MAX
from services.storage.log.log import Log
from services.storage.log.offset_map import OffsetMap
from services.storage.log.segment import LogSegment
from services.storage.log.transactions import batch_marker
from services.storage.log.txn_index import AbortedTxn

log = get_logger(__name__)

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class CleanerSettings:
    dedupe_buffer_size: int = 134217728  # log.cleaner.dedupe.buffer.size
    io_buffer_load_factor: float = 0.9  # log.cleaner.io.buffer.load.factor
    io_buffer_size: int = 524288  # log.cleaner.io.buffer.size
    io_max_bytes_per_second: float = float("inf")  # log.cleaner.io.max.bytes.per.second

    @property
    def map_budget_bytes(self) -> int:
        return int(self.dedupe_buffer_size * self.io_buffer_load_factor)

    @property
    def read_chunk_bytes(self) -> int:
        """Kafka gives half of the I/O buffers to reading; a batch larger than that is read
        whole, as Kafka grows its read buffer for it."""
        return max(self.io_buffer_size // 2, HEADER_SIZE)


@dataclass(frozen=True)
class CleanableRange:
    """Where a log stands for the cleaner (Kafka's LogToClean)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    overdue: bool  # max.compaction.lag.ms has passed for the first dirty record

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


@dataclass
class CleanStats:
    first_dirty_offset: int = 0
    end_offset: int = 0  # the next cleaning's first dirty offset
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    keyless_dropped: int = 0
    tombstones_dropped: int = 0
    aborted_dropped: int = 0  # records of aborted transactions
    markers_dropped: int = 0  # markers of transactions without data, past their delete horizon
    segments_before: int = 0
    segments_after: int = 0
    map_entries: int = 0
    map_bytes: int = 0
    elapsed_s: float = 0.0
    aborted: bool = False

    @property
    def recopy_ratio(self) -> float:
        return self.bytes_written / self.bytes_read if self.bytes_read else 0.0


def cleanable_range(lg: Log, checkpoint: int | None, now_ms: int) -> CleanableRange | None:
    """The log's cleanable range, or None when it has no non-active segment to clean."""
    with lg.locked():
        segs = lg.segments
        lso, leo, hw = lg.log_start_offset, lg.log_end_offset, lg.high_watermark
        cfg = lg.config
        first_dirty = checkpoint if checkpoint is not None else lso
        if first_dirty < lso or first_dirty > leo:
            first_dirty = lso
        # nothing of an open transaction is cleaned: it may still abort (Kafka bounds by the LSO)
        bound = min(segs[-1].base_offset, hw, lg.last_stable_offset)
        # whole segments only: a segment is cleanable when it ends at or before ``bound``
        end = first_dirty
        clean_bytes = cleanable = 0
        overdue = False
        min_lag_cutoff = now_ms - cfg.min_compaction_lag_ms
        for i, seg in enumerate(segs[:-1]):
            nxt = segs[i + 1].base_offset
            if nxt <= first_dirty:
                clean_bytes += seg.size
                continue
            if nxt > bound or (
                cfg.min_compaction_lag_ms > 0 and seg.largest_timestamp() > min_lag_cutoff
            ):
                break
            if end == first_dirty and cfg.max_compaction_lag_ms < LONG_MAX:
                first_ts = seg.first_batch_timestamp()
                overdue = 0 <= first_ts < now_ms - cfg.max_compaction_lag_ms
            cleanable += seg.size
            end = nxt
    if end <= first_dirty:
        return None
    return CleanableRange(first_dirty, end, clean_bytes, cleanable, overdue)


@dataclass(frozen=True)
class Pace:
    """How a cleaning is paced: ``stopping()`` is asked between segments (a node shutting
    down), ``throttle(n)`` is told of every n bytes read or written and may sleep."""

    stopping: Callable[[], bool] = lambda: False
    throttle: Callable[[int], None] = lambda n: None


def clean(
    lg: Log,
    rng: CleanableRange,
    settings: CleanerSettings,
    now_ms: int | None = None,
    *,
    pace: Pace = Pace(),
) -> CleanStats:
    """Compact ``lg`` below ``rng.first_uncleanable_offset``; returns what was done.

    Stops early (``aborted``) when the log changes underneath (truncation, retention,
    deletion) or ``pace.stopping()`` says so (checked between segments): the next pass starts
    again from the checkpoint.
    """
    started = time.monotonic()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    stats = CleanStats(first_dirty_offset=rng.first_dirty_offset)
    with lg.locked():
        all_segs = lg.segments
        ends = {
            id(seg): all_segs[i + 1].base_offset if i + 1 < len(all_segs) else lg.log_end_offset
            for i, seg in enumerate(all_segs)
        }
        segs = [s for s in all_segs[:-1] if s.base_offset < rng.first_uncleanable_offset]
        horizon_seg = [s for s in segs if ends[id(s)] <= rng.first_dirty_offset]
        delete_horizon_ms = (
            horizon_seg[-1].last_modified_ms() - lg.config.delete_retention_ms if horizon_seg else 0
        )
        last_batch_of_producer = {
            pid: entry.last_data_offset for pid, entry in lg.producer_state.producers.items()
        }
        truncations = lg.truncations
        aborted = (
            lg.aborted_transactions(segs[0].base_offset, rng.first_uncleanable_offset)
            if segs
            else []
        )
    readers = _Readers(lg, settings.read_chunk_bytes)
    end = rng.first_dirty_offset  # where the next cleaning starts if this one gets nowhere
    try:
        dirty = [s for s in segs if ends[id(s)] > rng.first_dirty_offset]
        if not dirty:
            return stats
        offset_map = OffsetMap(settings.map_budget_bytes, rng.first_dirty_offset)
        end = _build_offset_map(offset_map, dirty, readers, ends, lg, pace, TxnBatches(aborted))
        stats.end_offset = end
        stats.map_entries = len(offset_map)
        stats.map_bytes = offset_map.bytes_used
        if end <= rng.first_dirty_offset:
            return stats
        to_clean = [s for s in segs if s.base_offset < end]
        stats.segments_before = len(to_clean)
        tracker = TxnBatches(aborted)
        for group in _group_by_size(to_clean, ends, lg.config.segment_bytes):
            if pace.stopping():
                stats.aborted = True
                break
            cleaned = _clean_group(
                lg,
                group,
                readers,
                _Retention(
                    offset_map,
                    end,
                    delete_horizon_ms,
                    last_batch_of_producer,
                    tracker,
                    now,
                    lg.config.delete_retention_ms,
                    set(),
                ),
                stats,
                pace,
            )
            if not lg.replace_segments(group, cleaned, truncations):
                stats.aborted = True
                break
    except _LogChanged:
        stats.aborted = True
    finally:
        readers.close()
    with lg.locked():
        stats.segments_after = sum(1 for s in lg.segments if s.base_offset < end)
    stats.elapsed_s = time.monotonic() - started
    return stats


class _SegmentReader:
    """A private descriptor on a segment's log file: it keeps reading the same data even if
    retention renames or removes the file meanwhile."""

    def __init__(self, fd: int, size: int, chunk: int) -> None:
        self.fd = fd
        self.size = size
        self.chunk = chunk
        self.mtime_ms = os.fstat(fd).st_mtime_ns // 1_000_000

    def batches(self) -> Iterator[tuple[BatchHeader, bytes]]:
        """(header, buffer) for every batch; ``header.position`` is relative to the buffer."""
        pos = 0
        while self.size - pos >= HEADER_SIZE:
            buf = os.pread(self.fd, min(self.chunk, self.size - pos), pos)
            consumed = 0
            for h in iter_headers(buf):
                yield h, buf
                consumed = h.position + h.size
            if consumed == 0:  # one batch larger than the chunk
                size = int.from_bytes(buf[8:12], "big", signed=True) + 12
                if size < HEADER_SIZE or pos + size > self.size:
                    return
                buf = os.pread(self.fd, size, pos)
                for h in iter_headers(buf):
                    yield h, buf
                consumed = size
            pos += consumed

    def close(self) -> None:
        os.close(self.fd)


class _LogChanged(Exception):
    """A segment to read is no longer part of the log (retention, truncation, deletion)."""


class _Readers:
    """Readers of a log's segments, each opened under the log's lock when first needed and
    closed when its pass is done with it (a log with many segments does not hold a descriptor
    for each). Whether the segments are still the log's is checked by the swap."""

    def __init__(self, lg: Log, chunk: int) -> None:
        self._lg = lg
        self._chunk = chunk
        self._open: dict[int, _SegmentReader] = {}

    def batches(self, seg: LogSegment) -> Iterator[tuple[BatchHeader, bytes]]:
        return self.get(seg).batches()

    def get(self, seg: LogSegment) -> _SegmentReader:
        reader = self._open.get(id(seg))
        if reader is None:
            with self._lg.locked():
                if self._lg.closed:
                    raise _LogChanged(seg.base_offset)
                try:  # a segment retention renamed is still readable; a purged one is gone
                    fd = os.open(seg.log_path, os.O_RDONLY)
                except FileNotFoundError:
                    raise _LogChanged(seg.base_offset) from None
                reader = _SegmentReader(fd, seg.size, self._chunk)
            self._open[id(seg)] = reader
        return reader

    def done_with(self, seg: LogSegment) -> None:
        reader = self._open.pop(id(seg), None)
        if reader is not None:
            reader.close()

    def close(self) -> None:
        for reader in self._open.values():
            reader.close()
        self._open.clear()


def _build_offset_map(
    offset_map: OffsetMap,
    dirty: Sequence[LogSegment],
    readers: _Readers,
    ends: dict[int, int],
    lg: Log,
    pace: Pace,
    aborted: TxnBatches,
) -> int:
    """Fill ``offset_map`` from the dirty segments; returns where the mapped range ends: the
    end of the last segment read whole, or the first record that did not fit. Records of
    aborted transactions are not mapped (they never shadow a committed record)."""
    end = offset_map.start
    for seg in dirty:
        if pace.stopping():
            break
        for h, buf in readers.batches(seg):
            pace.throttle(h.size)
            if aborted.is_aborted(h, buf):
                continue
            if h.is_control or h.record_count == 0 or h.last_offset < offset_map.start:
                continue
            stopped_at = offset_map.add(scan_records(records_payload(buf, h), h))
            if stopped_at is not None:
                log.info(
                    "cleaner_offset_map_full",
                    topic=lg.topic,
                    partition=lg.partition,
                    entries=len(offset_map),
                    map_bytes=offset_map.bytes_used,
                    stopped_at=stopped_at,
                )
                readers.done_with(seg)
                return stopped_at
        readers.done_with(seg)
        end = ends[id(seg)]
    return end


def _group_by_size(
    segs: Sequence[LogSegment], ends: dict[int, int], max_size: int
) -> list[list[LogSegment]]:
    """Consecutive segments whose total size fits one segment and whose offsets fit a 32-bit
    delta from the group's base offset (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segs):
        group = [segs[i]]
        size = segs[i].size
        i += 1
        while (
            i < len(segs)
            and size + segs[i].size <= max_size
            and ends[id(segs[i])] - 1 - group[0].base_offset <= _INT32_MAX
        ):
            group.append(segs[i])
            size += segs[i].size
            i += 1
        groups.append(group)
    return groups


@dataclass(frozen=True)
class _Retention:
    """What decides whether a record stays."""

    offset_map: OffsetMap
    range_end: int  # records from here on were not mapped: they all stay
    delete_horizon_ms: int
    last_batch_of_producer: dict[int, int]  # producer id -> offset of its last batch
    txns: TxnBatches
    now_ms: int
    delete_retention_ms: int
    dropped_markers: set[int]  # ABORT markers removed: their .txnindex entries go too


class TxnBatches:
    """The transactions a pass over batches in offset order goes through (Kafka's
    CleanedTransactionMetadata): which data batches belong to aborted transactions (from the
    aborted-transaction entries: a producer's transaction is aborted from the entry's first
    offset to its ABORT marker), and which markers end a transaction with no data left in
    the log - those may go once their KIP-534 delete horizon has passed."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._aborted: dict[int, list[int]] = {}  # producer id -> [marker offset, data seen]
        self._with_data: set[int] = set()  # producers whose current (not aborted) txn has data

    def read(self, h: BatchHeader, buf: bytes) -> tuple[bool, bool]:
        """(``h`` is data of an aborted transaction, ``h`` is a marker of a transaction without
        data left); call for every batch, in offset order."""
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= h.base_offset:
            txn = pending[self._next]
            self._aborted[txn.producer_id] = [txn.last_offset, 0]
            self._next += 1
        pid = h.producer_id
        if h.is_control:
            return False, self._marker_without_data(h, buf)
        if not h.is_transactional:
            return False, False
        state = self._aborted.get(pid)
        if state is not None and h.base_offset < state[0]:
            state[1] = 1
            return True, False
        self._with_data.add(pid)
        return False, False

    def is_aborted(self, h: BatchHeader, buf: bytes) -> bool:
        return self.read(h, buf)[0]

    def _marker_without_data(self, h: BatchHeader, buf: bytes) -> bool:
        if h.record_count == 0:  # an emptied control batch: nothing left to keep
            return True
        try:
            marker = batch_marker(buf, h)
        except KafkaError:
            return False  # not readable: keep it as it is
        if marker is None:
            return False  # another control type
        if marker.commit:
            had_data = h.producer_id in self._with_data
            self._with_data.discard(h.producer_id)
            return not had_data
        state = self._aborted.pop(h.producer_id, None)
        return not (state is not None and state[1])


def _clean_group(
    lg: Log,
    group: Sequence[LogSegment],
    readers: _Readers,
    retention: _Retention,
    stats: CleanStats,
    pace: Pace,
) -> LogSegment:
    """Write the retained batches of ``group`` into a new ``.swap`` segment."""
    base = group[0].base_offset
    stale = files.suffixed(files.log_file(lg.dir, base), files.CLEANED_SUFFIX)
    stale.unlink(missing_ok=True)
    cleaned = LogSegment.create(lg.dir, base, lg.config, 0, suffix=files.CLEANED_SUFFIX)
    newest_mtime = 0
    try:
        for seg in group:
            seg_mtime = readers.get(seg).mtime_ms
            newest_mtime = max(newest_mtime, seg_mtime)
            retain_deletes = seg_mtime > retention.delete_horizon_ms
            for h, buf in readers.batches(seg):
                stats.bytes_read += h.size
                pace.throttle(h.size)
                out = _retained_batch(h, buf, retention, retain_deletes, stats)
                if out is None:
                    continue
                data, max_ts = out
                cleaned.append(h.last_offset, max_ts, h.last_offset, data)
                stats.bytes_written += len(data)
                pace.throttle(len(data))
            readers.done_with(seg)
        for seg in group:  # the aborted transactions whose markers the group keeps stay known
            for txn in seg.txn_index.entries:
                if txn.last_offset not in retention.dropped_markers:
                    cleaned.txn_index.append(txn)
        cleaned.on_become_inactive()
        _fsync_paths(
            cleaned.log_path,
            cleaned.offset_index.path,
            cleaned.time_index.path,
            cleaned.txn_index.path,
        )
        cleaned.close_handles()
        # the cleaned segment keeps the age of the data it holds (delete horizon, retention.ms)
        os.utime(cleaned.log_path, ns=(newest_mtime * 1_000_000, newest_mtime * 1_000_000))
        cleaned.created_ms = newest_mtime
        cleaned.change_suffix(files.SWAP_SUFFIX)
        files.fsync_dir(lg.dir)
    except BaseException:
        cleaned.delete_files()
        raise
    return cleaned


def _retained_batch(
    h: BatchHeader,
    buf: bytes,
    retention: _Retention,
    retain_deletes: bool,
    stats: CleanStats,
) -> tuple[bytes | memoryview, int] | None:
    """The batch as it stays in the log, with its max timestamp; None when it goes."""
    original = memoryview(buf)[h.position : h.position + h.size]
    aborted, marker_without_data = retention.txns.read(h, buf)
    if h.is_control:
        return _retained_marker(h, buf, original, marker_without_data, retention, stats)
    if h.base_offset >= retention.range_end and not aborted:
        return original, h.max_timestamp
    payload = records_payload(buf, h)
    spans = list(scan_records(payload, h))
    stats.records_read += len(spans)
    kept: list[RecordSpan] = []
    latest, range_end = retention.offset_map.latest, retention.range_end
    for span in spans:
        if aborted:
            stats.aborted_dropped += 1
        elif span.offset >= range_end:
            kept.append(span)
        elif span.key is None:
            stats.keyless_dropped += 1
        elif span.offset < latest(span.key):
            pass
        elif not span.has_value and not retain_deletes:
            stats.tombstones_dropped += 1
        else:
            kept.append(span)
    stats.records_retained += len(kept)
    if len(kept) == len(spans):
        return original, h.max_timestamp
    if not kept and not (
        h.has_producer_id and retention.last_batch_of_producer.get(h.producer_id) == h.last_offset
    ):
        return None
    rebuilt = rebuild_batch(h, payload, kept)
    return rebuilt, parse_header(rebuilt).max_timestamp


def _retained_marker(
    h: BatchHeader,
    buf: bytes,
    original: memoryview,
    without_data: bool,
    retention: _Retention,
    stats: CleanStats,
) -> tuple[bytes | memoryview, int] | None:
    """KIP-534 for transaction markers: one whose transaction has no data left gets a delete
    horizon (now + delete.retention.ms) the first time, and goes once it has passed."""
    if not without_data:
        return original, h.max_timestamp
    horizon = delete_horizon_ms(h)
    if horizon is None:
        stamped = with_delete_horizon(buf, h, retention.now_ms + retention.delete_retention_ms)
        return stamped, h.max_timestamp
    if retention.now_ms < horizon:
        return original, h.max_timestamp
    retention.dropped_markers.add(h.base_offset)
    stats.markers_dropped += 1
    return None


def _fsync_paths(*paths: Path) -> None:
    for p in paths:
        if not p.exists():
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
