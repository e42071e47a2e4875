"""The storage node's log cleaner: picks compacted logs and compacts them (Kafka's LogCleaner
and LogCleanerManager; one cleaner thread, ``log.cleaner.threads`` 1).

Each pass looks at the hosted logs whose ``cleanup.policy`` includes ``compact``, takes the
one with the largest dirty ratio above its ``min.cleanable.dirty.ratio`` (or any log
whose ``max.compaction.lag.ms`` has passed), compacts it in a worker thread, records where it
stopped in ``cleaner-offset-checkpoint`` and goes on until no log is cleanable. Between passes
it waits ``log.cleaner.backoff.ms``.

Which logs a pick looks at (issue 19): with ``changed`` (the node's marks: appends, truncations,
high watermark moves, config changes, deletions) only those marked since the last pick, plus
the ones it left cleanable or just cleaned, plus those whose outcome moves with time alone
(``min.compaction.lag.ms`` > 0 or a finite ``max.compaction.lag.ms``); everything else stays as
it was. The first pick, and every pick without ``changed``, looks at every log.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from services.common.logging import get_logger
from services.storage.log import checkpoint as ckpt
from services.storage.log.cleaner import (
    CleanableRange,
    CleanerSettings,
    CleanStats,
    Pace,
    clean,
)
from services.storage.log.cleaner import cleanable_range as compute_cleanable_range
from services.storage.log.config import LONG_MAX, LogConfig
from services.storage.log.log import Log
from services.storage.log.throttler import GilYielder, Throttler
from services.storage.metrics import StorageMetrics

log = get_logger(__name__)

TopicPartition = tuple[str, int]


class LogCleaner:
    def __init__(
        self,
        log_dir: Path,
        logs: Callable[[], Mapping[TopicPartition, object]],
        settings: CleanerSettings,
        metrics: StorageMetrics,
        clock: Callable[[], int],
        on_cleaned: Callable[[TopicPartition], None] | None = None,
        changed: Callable[[], set[TopicPartition]] | None = None,
    ) -> None:
        self.path = Path(log_dir) / ckpt.CLEANER_OFFSET_CHECKPOINT
        self._on_cleaned = on_cleaned  # the log's size changed (the node's usage report)
        self._logs = logs
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.checkpoints: dict[TopicPartition, int] = {}
        self.uncleanable: set[TopicPartition] = set()  # cleaning failed (corrupt data, I/O)
        self._changed = changed  # partitions marked since the last call (None: look at all)
        self._first_pick = True
        self._again: set[TopicPartition] = set()  # to look at in the next pick whatever marks say
        # dirty ratio of each log last looked at (> 0 only), for the max-dirty-percent gauge
        self._ratios: dict[TopicPartition, float] = {}
        self._ratio_heap: list[tuple[float, TopicPartition]] = []
        self._stopping = False
        # one throttler for the cleaner thread, as Kafka shares one across its cleaner threads
        self.throttler = Throttler(settings.io_max_bytes_per_second)
        self._yielder = GilYielder()
        self._pace = Pace(stopping=self._is_stopping, throttle=self._throttle)

    def update_settings(self, settings: CleanerSettings) -> None:
        """New dynamic settings (KIP-226): the rate applies at once, the rest from the next
        cleaning on (as Kafka's LogCleaner.reconfigure)."""
        if settings != self.settings:
            self.settings = settings
            self.throttler.rate = settings.io_max_bytes_per_second
            log.info("log cleaner reconfigured", settings=str(settings))

    def load_checkpoint(self) -> None:
        try:
            self.checkpoints = ckpt.read_offset_checkpoint(self.path)
        except ckpt.CorruptCheckpointError as exc:
            log.warning("cleaner checkpoint unreadable, starting over", error=str(exc))
            self.checkpoints = {}

    def _throttle(self, n: int) -> None:
        self.throttler.maybe_throttle(n)
        self._yielder.maybe_yield()

    def _is_stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Stop after the log being cleaned (if any)."""
        self._stopping = True

    async def run_pass(self) -> int:
        """Clean logs until none is cleanable; returns how many cleanings were done."""
        done = 0
        while not self._stopping:
            picked = await asyncio.to_thread(self._pick, self._candidates())
            if picked is None:
                break
            key, lg, rng = picked
            try:
                stats = await asyncio.to_thread(
                    clean, lg, rng, self.settings, self.clock(), pace=self._pace
                )
            except Exception:
                # as Kafka: the partition is left alone until the node restarts
                log.exception(
                    "log cleaning failed; partition marked uncleanable",
                    topic=key[0],
                    partition=key[1],
                )
                self.uncleanable.add(key)
                self._set_ratio(key, 0.0)
                self.metrics.cleaner_uncleanable_partitions.set(len(self.uncleanable))
                continue
            done += 1
            if self._on_cleaned is not None:
                self._on_cleaned(key)
            if not self._record(key, stats):
                break  # the log changed underneath or nothing was left to do: next pass
            await asyncio.to_thread(self._write_checkpoint)
        return done

    # ---- choosing ---------------------------------------------------------------------------
    def _candidates(self) -> Collection[TopicPartition] | None:
        """The partitions the next pick looks at (on the event loop, where marks are taken);
        None: every log."""
        if self._changed is None:
            return None
        marked = self._changed()
        if self._first_pick:
            self._first_pick = False
            return None
        again, self._again = self._again, set()
        return marked | again

    def _pick(
        self, candidates: Collection[TopicPartition] | None = None
    ) -> tuple[TopicPartition, Log, CleanableRange] | None:
        logs = self._logs()
        if candidates is None:
            candidates = list(logs)
            for key in [k for k in self.checkpoints if k not in logs]:
                self._forget(key)
        now = self.clock()
        best: tuple[TopicPartition, Log, CleanableRange] | None = None
        for key in candidates:
            lg = logs.get(key)
            if not (isinstance(lg, Log) and lg.config.compact_enabled and not lg.closed):
                self._forget(key)  # deleted, or no longer compacted
                continue
            if key in self.uncleanable:
                continue
            mark = lg.take_truncation_mark()
            if mark is not None and key in self.checkpoints:
                self.checkpoints[key] = min(self.checkpoints[key], mark)
            rng = compute_cleanable_range(lg, self.checkpoints.get(key), now)
            if _moves_with_time(lg.config):
                self._again.add(key)
            self._set_ratio(key, rng.dirty_ratio if rng is not None else 0.0)
            if rng is None:
                continue
            ratio = rng.dirty_ratio
            # strictly above the ratio, as Kafka: min.cleanable.dirty.ratio 1 never cleans
            if ratio <= lg.config.min_cleanable_dirty_ratio and not rng.overdue:
                continue
            self._again.add(key)  # cleanable: the next pick looks again, picked or not
            if best is None or rng.overdue > best[2].overdue or ratio > best[2].dirty_ratio:
                best = (key, lg, rng)
        self.metrics.cleaner_uncleanable_partitions.set(len(self.uncleanable))
        self.metrics.cleaner_max_dirty_percent.set(round(100 * self._max_ratio()))
        return best

    def _forget(self, key: TopicPartition) -> None:
        self.checkpoints.pop(key, None)
        self.uncleanable.discard(key)
        self._set_ratio(key, 0.0)

    def _set_ratio(self, key: TopicPartition, ratio: float) -> None:
        if ratio <= 0:
            self._ratios.pop(key, None)
        elif self._ratios.get(key) != ratio:
            self._ratios[key] = ratio
            heapq.heappush(self._ratio_heap, (-ratio, key))

    def _max_ratio(self) -> float:
        """The largest dirty ratio of the logs last looked at (stale heap entries dropped)."""
        heap = self._ratio_heap
        while heap and self._ratios.get(heap[0][1]) != -heap[0][0]:
            heapq.heappop(heap)
        if len(heap) > 2 * len(self._ratios) + 64:
            self._ratio_heap = heap = [(-r, k) for k, r in self._ratios.items()]
            heapq.heapify(heap)
        return -heap[0][0] if heap else 0.0

    # ---- bookkeeping ------------------------------------------------------------------------
    def _record(self, key: TopicPartition, stats: CleanStats) -> bool:
        """Metrics and log line of one cleaning; True when the checkpoint moved."""
        m = self.metrics
        m.cleaner_recopy_percent.set(round(100 * stats.recopy_ratio))
        m.cleaner_max_clean_time_secs.set(stats.elapsed_s)
        m.cleaner_buffer_utilization_percent.set(
            round(100 * stats.map_bytes / max(self.settings.map_budget_bytes, 1))
        )
        m.cleaner_runs.inc()
        if stats.aborted:
            log.info("log cleaning stopped: the log changed", topic=key[0], partition=key[1])
            return False
        moved = stats.end_offset > stats.first_dirty_offset
        if moved:
            self.checkpoints[key] = stats.end_offset
        log.info(
            "log cleaned",
            topic=key[0],
            partition=key[1],
            first_dirty_offset=stats.first_dirty_offset,
            cleaned_to=stats.end_offset,
            bytes_read=stats.bytes_read,
            bytes_written=stats.bytes_written,
            records_read=stats.records_read,
            records_retained=stats.records_retained,
            tombstones_dropped=stats.tombstones_dropped,
            keyless_dropped=stats.keyless_dropped,
            segments_before=stats.segments_before,
            segments_after=stats.segments_after,
            elapsed_s=round(stats.elapsed_s, 3),
        )
        return moved

    def _write_checkpoint(self) -> None:
        ckpt.write_offset_checkpoint(self.path, dict(self.checkpoints))


def _moves_with_time(cfg: LogConfig) -> bool:
    """Whether a log's cleanable range changes as time passes (nothing else changing)."""
    return cfg.min_compaction_lag_ms > 0 or cfg.max_compaction_lag_ms < LONG_MAX
