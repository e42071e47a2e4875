"""A partition's log (Kafka's UnifiedLog): its state (segments, offsets, high watermark,
recovery point) and the operations that change it under one lock - open, append, roll,
truncate, retention, flush, close. The work itself lives in one module per job: ``loader``
(open and recovery), ``append`` (checks and offset placement), ``reads`` (read path and
timestamp lookups), ``retention`` (which segments go, delayed file removal), ``flush``,
``transactions`` (markers, ``.txnindex``, aborted transactions for read_committed).

Thread-safety: every method may be called from several threads (e.g. the event loop and
an executor); mutations are serialized by one lock, fsync runs outside it.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.records.batch import BatchHeader
from services.common.records.record import EndTxnMarker
from services.storage.log import files, flush, loader, reads, retention, transactions
from services.storage.log.append import (
    AppendInfo,
    UnexpectedAppendOffsetError,
    check_follower_batches,
    check_leader_batches,
    place_batches,
    plan_offsets,
    span,
)
from services.storage.log.config import LONG_MAX, LogConfig
from services.storage.log.flush import FlushPlan
from services.storage.log.leader_epoch import LeaderEpochCache
from services.storage.log.loader import LogRecovery
from services.storage.log.partition_metadata import (
    read_partition_metadata,
    write_partition_metadata,
)
from services.storage.log.reads import ReadInfo
from services.storage.log.segment import LogSegment
from services.storage.log.txn_index import AbortedTxn
from services.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    AppendOrigin,
    ProducerStateManager,
)

__all__ = [
    "AppendInfo",
    "Log",
    "LogRecovery",
    "ReadInfo",
    "UnexpectedAppendOffsetError",
    "wall_clock_ms",
]

log = get_logger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Log:
    """One partition replica's log in ``dir`` (``<topic>-<partition>``). Create with :meth:`open`."""

    def __init__(
        self,
        dir: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        now_ms: Callable[[], int],
        producer_id_expiration_ms: int,
    ) -> None:
        self.dir = dir
        self.topic = topic
        self.partition = partition
        self.config = config
        self._now = now_ms
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._leo = 0
        self.log_start_offset = 0
        self.recovery_point = 0
        self._hw = 0
        self.topic_id: bytes | None = None
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms()
        self._pending_flush_offset: int | None = None
        self._dir_dirty = False
        self._pending_deletes = retention.PendingDeletes()
        self._truncated_to: int | None = None  # lowest truncation since the cleaner last looked
        self.truncations = 0  # how many times the log was truncated (compaction checks it)
        self._closed = False
        self.recovery: LogRecovery | None = None  # set by open() after an unclean shutdown
        self.producer_state_replayed_from: int | None = None  # set when open() replays batches
        self._log = log.bind(topic=topic, partition=partition)
        self.leader_epoch_cache: LeaderEpochCache
        self.producer_state = ProducerStateManager(
            dir, producer_id_expiration_ms=producer_id_expiration_ms, now_ms=now_ms
        )

    # =================================================================== open
    @classmethod
    def open(
        cls,
        dir: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        topic_id: bytes | None = None,
        recovery_point: int = 0,
        clean_shutdown: bool = False,
        now_ms: Callable[[], int] = wall_clock_ms,
        log_start_offset: int | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> Log:
        """Open (or create) the log in ``dir``; recovers after an unclean shutdown.

        ``recovery_point`` and ``log_start_offset`` come from the broker-level
        recovery-point / log-start-offset checkpoints.
        """
        dir = Path(dir)
        dir.mkdir(parents=True, exist_ok=True)
        self = cls(dir, topic, partition, config, now_ms, producer_id_expiration_ms)
        with self._lock:
            self._load_topic_id(topic_id)
            loader.complete_swaps(dir, config, self._log)
            loader.remove_leftovers(dir, self._log)
            self.leader_epoch_cache = LeaderEpochCache(dir, lambda: self._leo)
            self._load(recovery_point, clean_shutdown, log_start_offset)
        return self

    def _load_topic_id(self, topic_id: bytes | None) -> None:
        stored = read_partition_metadata(self.dir)
        if topic_id is not None and stored is not None and stored != topic_id:
            raise KafkaError(
                ErrorCode.INCONSISTENT_TOPIC_ID,
                f"partition {self.topic}-{self.partition} has topic id "
                f"{files.uuid_to_str(stored)}, not {files.uuid_to_str(topic_id)}",
            )
        if topic_id is not None and stored is None:
            write_partition_metadata(self.dir, topic_id)
        self.topic_id = topic_id if topic_id is not None else stored

    def assign_topic_id(self, topic_id: bytes) -> None:
        """Record the topic id (writes ``partition.metadata``); a different existing id is an error."""
        with self._lock:
            self._load_topic_id(topic_id)

    def _load(
        self, recovery_point: int, clean_shutdown: bool, log_start_checkpoint: int | None
    ) -> None:
        cfg = self.config
        bases = loader.segment_bases(self.dir, self._log)
        start_checkpoint = log_start_checkpoint or 0
        if not bases:
            base = start_checkpoint
            self._segments = [LogSegment.create(self.dir, base, cfg, self._now())]
            self._dir_dirty = True
            self._leo = self.log_start_offset = self.recovery_point = self._hw = base
            self.producer_state.truncate_fully_and_start_at(base)
            self.leader_epoch_cache.truncate_from_end(base)
            return
        segments = [
            LogSegment.load(self.dir, b, cfg, active=(i == len(bases) - 1))
            for i, b in enumerate(bases)
        ]
        self._segments = segments
        recovered_from: int | None = None
        rebuild_from: int | None = None  # below it the .txnindex files were fsynced and kept
        if not clean_shutdown:
            self._segments, self.recovery, recovered_from = loader.recover_segments(
                self._segments, recovery_point, self.leader_epoch_cache, self._log
            )
            self._log.info("log_recovered", **asdict(self.recovery))
            rebuild_from = recovery_point
        self._segments, checked_from = loader.check_indexes(
            self._segments, recovered_from, self._log
        )
        if checked_from is not None:
            rebuild_from = checked_from if rebuild_from is None else min(rebuild_from, checked_from)
        active = self._segments[-1]
        active.make_active()
        self._leo = active.read_next_offset()
        self.log_start_offset = max(start_checkpoint, self._segments[0].base_offset)
        if self._leo < self.log_start_offset:
            self._log.warning(
                "log_end_below_log_start",
                log_end_offset=self._leo,
                log_start_offset=self.log_start_offset,
            )
            start = self.log_start_offset
            for seg in self._segments:
                seg.delete_files()
            self._segments = [LogSegment.create(self.dir, start, cfg, self._now())]
            self._leo = start
            self.leader_epoch_cache.clear()
            self.producer_state.truncate_fully_and_start_at(start)
        if clean_shutdown:
            self.recovery_point = self._leo
        else:
            self.recovery_point = min(max(recovery_point, self.log_start_offset), self._leo)
        self._hw = self.log_start_offset
        self.leader_epoch_cache.truncate_from_end(self._leo)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self._rebuild_producer_state(rebuild_from)
        self._log.info(
            "log_loaded",
            segments=len(self._segments),
            log_start_offset=self.log_start_offset,
            log_end_offset=self._leo,
            recovery_point=self.recovery_point,
            clean_shutdown=clean_shutdown,
        )

    def _rebuild_producer_state(self, rebuild_from: int | None = None) -> None:
        replayed_from = loader.replay_producer_state(
            self.producer_state,
            self._segments,
            self.log_start_offset,
            self._leo,
            self._log,
            rebuild_from,
        )
        if replayed_from is not None:
            self.producer_state_replayed_from = replayed_from

    # ============================================================= properties
    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._hw = min(max(value, self.log_start_offset), self._leo)
        self.producer_state.on_high_watermark_updated(self._hw)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the oldest transaction that is open (or whose
        marker is not replicated yet), capped by the high watermark."""
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is not None and first_unstable < self._hw:
            return max(first_unstable, self.log_start_offset)
        return self._hw

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound) (read_committed)."""
        with self._lock:
            self._check_open()
            return transactions.collect_aborted(self._segments, fetch_offset, upper_bound)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config
            for seg in self._segments:
                seg.set_index_interval_bytes(config.index_interval_bytes)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, "
            f"end={self._leo}, segments={len(self._segments)})"
        )

    # ================================================================= append
    def append_as_leader(
        self,
        records: bytearray,
        headers: Sequence[BatchHeader],
        leader_epoch: int,
        now_ms: int | None = None,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendInfo:
        """Assign offsets (rewriting baseOffset/partitionLeaderEpoch in place) and append.

        ``headers`` come from ``validate_batches(records)``. Raises KafkaError for
        MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD and the producer-state errors,
        and RecordValidationError (INVALID_RECORD / INVALID_TIMESTAMP with the failing records);
        a duplicate idempotent batch is not appended and the original
        offsets are returned with ``duplicate=True``.
        """
        now = self._now() if now_ms is None else now_ms
        cfg = self.config
        append_time = cfg.log_append_time
        records, headers = check_leader_batches(
            records, headers, cfg, origin, now, f"{self.topic}-{self.partition}"
        )
        start_pos, end_pos = span(headers)
        size = end_pos - start_pos
        record_count = sum(h.record_count for h in headers)
        with self._lock:
            self._check_open()
            first = self._leo
            placed, last = plan_offsets(headers, first)
            markers = transactions.batch_markers(records, headers)
            duplicate = self.producer_state.analyze(placed, origin, markers)
            if duplicate is not None:
                return AppendInfo(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    duplicate.max_timestamp if append_time else -1,
                    self.log_start_offset,
                    record_count,
                    duplicate=True,
                )
            final, max_ts, offset_of_max = place_batches(
                records, placed, leader_epoch, append_time, now, first
            )
            self._append_locked(
                memoryview(records)[start_pos:end_pos],
                first,
                last,
                max_ts,
                offset_of_max,
                now,
                final,
                record_count,
                markers,
            )
            return AppendInfo(
                first,
                last,
                now if append_time else -1,
                self.log_start_offset,
                record_count,
                max_timestamp=max_ts,
                offset_of_max_timestamp=offset_of_max,
                size_bytes=size,
            )

    def append_as_follower(
        self,
        records: bytes | bytearray | memoryview,
        headers: Sequence[BatchHeader],
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Append batches whose offsets the leader assigned (replication).

        The first batch must start at or after the log end offset and batches must not go
        backwards (UnexpectedAppendOffsetError); producer state and the epoch cache follow.
        """
        now = self._now() if now_ms is None else now_ms
        with self._lock:
            self._check_open()
            if not headers:
                return AppendInfo(self._leo, self._leo - 1, -1, self.log_start_offset, 0)
            first = headers[0].base_offset
            max_ts, offset_of_max = check_follower_batches(
                headers, self._leo, self.config.segment_bytes
            )
            start_pos, end_pos = span(headers)
            size = end_pos - start_pos
            last = headers[-1].last_offset
            record_count = sum(h.record_count for h in headers)
            self._append_locked(
                memoryview(records)[start_pos:end_pos],
                first,
                last,
                max_ts,
                offset_of_max,
                now,
                [(h, h.base_offset) for h in headers],
                record_count,
                transactions.batch_markers(records, headers),
            )
            return AppendInfo(
                first,
                last,
                -1,
                self.log_start_offset,
                record_count,
                max_timestamp=max_ts,
                offset_of_max_timestamp=offset_of_max,
                size_bytes=size,
            )

    def _append_locked(
        self,
        data: memoryview,
        first: int,
        last: int,
        max_ts: int,
        offset_of_max: int,
        now: int,
        batches: list[tuple[BatchHeader, int]],
        record_count: int,
        markers: dict[int, EndTxnMarker],
    ) -> None:
        seg = self._maybe_roll(len(data), max_ts, last, now)
        seg.append(last, max_ts, offset_of_max, data)
        cache = self.leader_epoch_cache
        psm = self.producer_state
        for i, (h, base) in enumerate(batches):
            epoch = h.partition_leader_epoch
            if epoch >= 0:
                latest = cache.latest_entry
                if latest is None or latest.epoch != epoch or base < latest.start_offset:
                    cache.assign(epoch, base)
            completed = psm.update(h, base, base + h.last_offset_delta, markers.get(i))
            transactions.record_completed(psm, seg, completed)
        self._leo = last + 1
        self._unflushed_messages += record_count
        if self._unflushed_messages >= self.config.flush_messages:
            self._flush_locked(self._leo)

    def _maybe_roll(self, messages_size: int, max_ts: int, max_offset: int, now: int) -> LogSegment:
        seg = self._segments[-1]
        cfg = self.config
        if seg.should_roll(
            max_segment_bytes=cfg.segment_bytes,
            max_segment_ms=cfg.max_segment_ms,
            messages_size=messages_size,
            max_timestamp_in_messages=max_ts,
            max_offset_in_messages=max_offset,
            now_ms=now,
        ):
            return self._roll(now)
        return seg

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op when the active one is empty)."""
        with self._lock:
            self._check_open()
            return self._roll(self._now() if now_ms is None else now_ms)

    def _roll(self, now: int) -> LogSegment:
        active = self._segments[-1]
        new_base = self._leo
        if active.size == 0 and active.base_offset == new_base:
            return active
        if active.size == 0:
            # an empty active segment below the new base (follower gap): replace it
            self._segments = self._segments[:-1]
            active.delete_files()
        else:
            active.on_become_inactive()
        for stale in (
            files.log_file(self.dir, new_base),
            files.index_file(self.dir, new_base),
            files.time_index_file(self.dir, new_base),
        ):
            stale.unlink(missing_ok=True)
        seg = LogSegment.create(self.dir, new_base, self.config, now)
        self._segments = [*self._segments, seg]
        self._dir_dirty = True
        psm = self.producer_state
        psm.update_map_end_offset(new_base)
        psm.take_snapshot()
        for off in psm.snapshot_offsets():  # one taken by a background flush inside the old one
            if active.base_offset < off < new_base:
                psm.remove_snapshot(off)
        self._pending_flush_offset = new_base
        self._log.info(
            "segment_rolled",
            new_segment=new_base,
            previous_segment=active.base_offset,
            previous_size=active.size,
        )
        return seg

    # =================================================================== read
    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadInfo:
        """Whole batches from the one containing ``offset``, at most ``max_bytes`` (KIP-74:
        at least one batch when ``min_one_batch``), none with base offset >= ``max_offset``."""
        with self._lock:
            return self._read_locked(offset, max_bytes, max_offset, min_one_batch)

    def _read_locked(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> ReadInfo:
        self._check_open()
        leo, lso, hw = self._leo, self.log_start_offset, self._hw
        if offset < lso or offset > leo:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is out of range [{lso}, {leo}] for {self.topic}-{self.partition}",
            )
        if offset == leo:
            return ReadInfo(b"", None, lso, leo, hw)
        data, first_offset = reads.read_batches(
            self._segments, offset, max_bytes, max_offset, min_one_batch
        )
        return ReadInfo(data, first_offset, lso, leo, hw)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp`` (ListOffsets)."""
        with self._lock:
            self._check_open()
            return reads.offset_for_timestamp(self._segments, timestamp, self.log_start_offset)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the largest timestamp (ListOffsets -3)."""
        with self._lock:
            self._check_open()
            return reads.max_timestamp_offset(self._segments, self.log_start_offset)

    # ============================================================= compaction
    def locked(self) -> threading.RLock:
        """The log's lock, for the cleaner's consistent looks at the segment list."""
        return self._lock

    def take_truncation_mark(self) -> int | None:
        """Lowest offset the log was truncated to since the last call (the cleaner moves its
        checkpoint back to it: what was appended after a truncation is dirty again)."""
        with self._lock:
            mark, self._truncated_to = self._truncated_to, None
            return mark

    def _mark_truncation(self, offset: int) -> None:
        self.truncations += 1
        if self._truncated_to is None or offset < self._truncated_to:
            self._truncated_to = offset

    def replace_segments(
        self, old: Sequence[LogSegment], new: LogSegment, truncations: int
    ) -> bool:
        """Swap the cleaned segment ``new`` (files suffixed ``.swap``) in for ``old``.

        False, with ``new``'s files removed, when ``old`` is no longer a run of rolled segments
        of this log (deleted by retention, log closed) or the log was truncated since its
        ``truncations`` count was read (``old`` may hold other records now). The old files are renamed
        ``.deleted`` before ``new`` loses its suffix, so a crash in between is completed by
        :meth:`open` (``_complete_swaps``).
        """
        with self._lock:
            segs = self._segments
            try:
                i = segs.index(old[0]) if not self._closed else -1
            except ValueError:
                i = -1
            n = len(old)
            if (
                truncations != self.truncations
                or i < 0
                or i + n >= len(segs)
                or any(a is not b for a, b in zip(segs[i : i + n], old, strict=True))
            ):
                new.delete_files()
                return False
            now = self._now()
            for seg in old:
                self._pending_deletes.defer(seg, now + self.config.file_delete_delay_ms)
            new.change_suffix("")
            self._segments = [*segs[:i], new, *segs[i + n :]]
            files.fsync_dir(self.dir)
            self._log.info(
                "segments_compacted",
                replaced=[s.base_offset for s in old],
                bytes_before=sum(s.size for s in old),
                bytes_after=new.size,
            )
            return True

    # ============================================================== retention
    def delete_retained_segments(self, now_ms: int) -> int:
        """Apply retention (log start offset, retention.bytes, retention.ms); returns segments deleted.

        Only segments entirely below the high watermark go; the active segment is rolled
        first when it must go too. Files are renamed ``.deleted`` and removed by
        :meth:`purge_deleted` after ``file.delete.delay.ms``.
        """
        with self._lock:
            self._check_open()
            deleted = self._delete_old_segments(
                retention.below_log_start(self.log_start_offset), "log_start_offset_breach", now_ms
            )
            cfg = self.config
            if cfg.delete_enabled:
                size = self.size_bytes()
                if cfg.retention_bytes >= 0 and size >= cfg.retention_bytes:
                    deleted += self._delete_old_segments(
                        retention.retention_size_breached(size, cfg.retention_bytes),
                        "retention_size_breach",
                        now_ms,
                    )
                if cfg.retention_ms >= 0:
                    deleted += self._delete_old_segments(
                        retention.retention_ms_breached(now_ms, cfg.retention_ms),
                        "retention_ms_breach",
                        now_ms,
                    )
        self.purge_deleted(now_ms)
        return deleted

    def retention_due_ms(self) -> int | None:
        """When :meth:`delete_retained_segments` may next delete something if nothing else
        changes (no append, truncation, log start or high watermark move, config change):
        the oldest segment leaving ``retention.ms``, or a deleted segment's
        ``file.delete.delay.ms`` ending. None: never, until something changes."""
        with self._lock:
            if self._closed:
                return None
            cfg = self.config
            due = (
                retention.retention_ms_due(self._segments, cfg.retention_ms)
                if cfg.delete_enabled
                else None
            )
            pending = self._pending_deletes.next_deadline()
            if pending is not None and (due is None or pending < due):
                return pending
            return due

    def _delete_old_segments(
        self, predicate: retention.SegmentPredicate, reason: str, now_ms: int
    ) -> int:
        deletable = retention.deletable_segments(self._segments, self._leo, self._hw, predicate)
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            self._roll(now_ms)
        self._segments = [s for s in self._segments if s not in deletable]
        for seg in deletable:
            self._delete_segment_async(seg, now_ms)
        self._log.info(
            "segments_deleted",
            reason=reason,
            segments=[s.base_offset for s in deletable],
            bytes=sum(s.size for s in deletable),
        )
        self._increment_log_start_offset(self._segments[0].base_offset)
        return len(deletable)

    def _delete_segment_async(self, seg: LogSegment, now_ms: int) -> None:
        self.producer_state.remove_snapshot(seg.base_offset)
        self._pending_deletes.delete_segment(seg, now_ms, self.config.file_delete_delay_ms)

    def purge_deleted(self, now_ms: int | None = None) -> int:
        """Remove ``.deleted`` files whose delay has passed; returns files removed."""
        now = self._now() if now_ms is None else now_ms
        with self._lock:
            return self._pending_deletes.purge(now)

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset forward (DeleteRecords); beyond the high watermark is
        OFFSET_OUT_OF_RANGE. Segments wholly below it are deleted by the next retention pass."""
        with self._lock:
            self._check_open()
            if offset > self._hw:
                raise KafkaError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"cannot increment the log start offset to {offset} beyond the "
                    f"high watermark {self._hw}",
                )
            return self._increment_log_start_offset(offset)

    def _increment_log_start_offset(self, offset: int) -> bool:
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        self.producer_state.on_log_start_offset_incremented(offset)
        if self._hw < offset:
            self._hw = offset
            self.producer_state.on_high_watermark_updated(offset)
        if self.recovery_point < offset:
            self.recovery_point = offset
        self._log.info("log_start_offset_incremented", log_start_offset=offset)
        return True

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        with self._lock:
            return self.producer_state.remove_expired_producers(now_ms)

    # ============================================================= truncation
    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and after ``offset`` (follower truncation); False if nothing to do."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self._leo:
                return False
            self._mark_truncation(offset)
            if self._segments[0].base_offset > offset:
                self._truncate_fully_locked(offset)
                return True
            now = self._now()
            keep = [s for s in self._segments if s.base_offset <= offset]
            dropped = [s for s in self._segments if s.base_offset > offset]
            for seg in dropped:
                self._delete_segment_async(seg, now)
            self._segments = keep
            active = keep[-1]
            removed = active.truncate_to(offset, now)
            active.make_active()
            before = self._leo
            self._leo = offset
            self.leader_epoch_cache.truncate_from_end(offset)
            self.recovery_point = min(self.recovery_point, offset)
            self._hw = min(self._hw, offset)
            if self.log_start_offset > offset:
                self.log_start_offset = offset
            if self._pending_flush_offset is not None and self._pending_flush_offset > offset:
                self._pending_flush_offset = None
            self._rebuild_producer_state()
            self._log.info(
                "log_truncated",
                offset=offset,
                previous_log_end_offset=before,
                segments_deleted=len(dropped),
                bytes_truncated=removed,
            )
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete all data and restart the log empty at ``offset``."""
        with self._lock:
            self._check_open()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        self._mark_truncation(offset)
        now = self._now()
        for seg in self._segments:
            self._delete_segment_async(seg, now)
        self._segments = [LogSegment.create(self.dir, offset, self.config, now)]
        self._dir_dirty = True
        self._leo = self.log_start_offset = self.recovery_point = self._hw = offset
        self._pending_flush_offset = None
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(offset)
        self._log.info("log_truncated_fully", offset=offset)

    # ================================================================== flush
    def flush(self, up_to: int | None = None) -> None:
        """fsync the segments holding offsets below ``up_to`` (default: LEO); advances recovery_point.

        The fsyncs run outside the log's lock (appends and reads go on meanwhile), as Kafka's
        ``UnifiedLog.flush`` does; only the bookkeeping takes it.
        """
        with self._lock:
            self._check_open()
            plan = self._plan_flush(self._leo if up_to is None else min(up_to, self._leo))
        self._run_flush(plan)
        with self._lock:
            self._finish_flush(plan)

    def _plan_flush(self, target: int) -> FlushPlan:
        """What to fsync for offsets below ``target`` not yet flushed (under the lock)."""
        plan = FlushPlan(
            target,
            flush.flush_targets(self._segments, self._leo, self.recovery_point, target),
            self._dir_dirty,
            self.truncations,
            self._unflushed_messages if target >= self._leo else 0,
        )
        self._dir_dirty = False
        return plan

    def _run_flush(self, plan: FlushPlan) -> None:
        """The fsyncs of a plan (no lock needed); a failed one leaves the directory dirty."""
        try:
            flush.run_flush(plan, self.dir)
        except BaseException:
            self._dir_dirty = self._dir_dirty or plan.sync_dir
            raise

    def _finish_flush(self, plan: FlushPlan, now_ms: int | None = None) -> None:
        """Advance the recovery point to what was fsynced (under the lock). A truncation
        meanwhile may have replaced what was flushed: the recovery point then stays put."""
        if plan.truncations != self.truncations:
            self._dir_dirty = self._dir_dirty or plan.sync_dir
            return
        if plan.target > self.recovery_point:
            self.recovery_point = min(plan.target, self._leo)
        self._unflushed_messages = max(0, self._unflushed_messages - plan.messages)
        self._last_flush_ms = self._now() if now_ms is None else now_ms

    def _flush_locked(self, target: int) -> None:
        """Flush while holding the lock (close, flush.messages on the append path)."""
        plan = self._plan_flush(target)
        self._run_flush(plan)
        self._finish_flush(plan)

    def maybe_flush(self, now_ms: int | None = None, max_unflushed_ms: int = LONG_MAX) -> bool:
        """The background flush: rolled segments (Kafka flushes each one right after its roll),
        everything when flush.messages / flush.ms say so, and everything when data has stayed
        unflushed for ``max_unflushed_ms`` (log.recovery.flush.interval.ms: keeps the recovery
        point, and a crash's rescan, near the log end). The latter also snapshots the producer
        state at the log end, so a restart replays no more than the unflushed tail either."""
        if self._pending_flush_offset is None and self._leo <= self.recovery_point:
            # nothing unflushed (most logs of an idle node, checked every second): answered
            # without the lock; an append racing with this read is seen at the next check
            return False
        now = self._now() if now_ms is None else now_ms
        with self._lock:
            if self._closed:
                return False
            target: int | None = None
            if self._pending_flush_offset is not None:
                target = min(self._pending_flush_offset, self._leo)
                self._pending_flush_offset = None
            periodic = False
            if self._unflushed_messages >= self.config.flush_messages or (
                self._leo > self.recovery_point
                and now - self._last_flush_ms >= min(self.config.flush_ms, max_unflushed_ms)
            ):
                target = self._leo
                periodic = now - self._last_flush_ms >= max_unflushed_ms
            if target is None:
                return False
            plan = self._plan_flush(target)
        self._run_flush(plan)
        with self._lock:
            if self._closed:
                return True
            self._finish_flush(plan, now)
            if periodic and self.recovery_point == plan.target:
                self._snapshot_producer_state()
        return True

    def _snapshot_producer_state(self) -> None:
        """Producer-state snapshot at the log end, replacing the previous one taken inside the
        active segment (the one at its base, written at the roll, stays). Not fsynced: a
        snapshot is checked by its CRC when loaded and a bad one falls back to an older one."""
        psm = self.producer_state
        base = self._segments[-1].base_offset
        psm.update_map_end_offset(self._leo)
        if psm.take_snapshot(sync=False) is not None:
            for off in psm.snapshot_offsets():
                if base < off < self._leo:
                    psm.remove_snapshot(off)

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    # ============================================================== lifecycle
    def close(self) -> None:
        """Snapshot producer state, fsync and trim everything. A later open(clean_shutdown=True)
        skips recovery."""
        with self._lock:
            if self._closed:
                return
            self.producer_state.update_map_end_offset(self._leo)
            self.producer_state.take_snapshot()
            self._flush_locked(self._leo)
            for seg in self._segments:
                seg.close()
            self._closed = True
            self.purge_deleted(self._now())

    def delete(self) -> None:
        """Remove the partition directory entirely."""
        with self._lock:
            for seg in self._segments:
                seg.close_handles()
            self._segments = []
            self._closed = True
            shutil.rmtree(self.dir, ignore_errors=True)
            self._pending_deletes.clear()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.topic}-{self.partition} is closed"
            )
