"""Which logs changed since each periodic job last looked, so an idle node's jobs visit nothing.

The replica manager marks a partition (on the event loop) whenever its log's end, size, high
watermark, log start or configuration may have moved: appends, follower fetches, truncations,
retention, compaction, DeleteRecords, config changes, orders that create, move or remove it.
Each job (the flush pass, the usage report, the three offset checkpoints, retention, the
cleaner's pick) takes its own set of marks and visits only those (plus what it keeps itself:
logs still unflushed, retention due by time, logs the cleaner left dirty): idle cost flat in
partition count (issue 19), where each of them used to visit every log.
"""

from __future__ import annotations

from collections.abc import Iterable

TopicPartition = tuple[str, int]

FLUSH = "flush"
USAGE = "usage"
HIGH_WATERMARKS = "high-watermarks"
RECOVERY_POINTS = "recovery-points"  # also marked by the flush pass for the logs it flushed
LOG_STARTS = "log-starts"
RETENTION = "retention"
CLEANER = "cleaner"
JOBS = (FLUSH, USAGE, HIGH_WATERMARKS, RECOVERY_POINTS, LOG_STARTS, RETENTION, CLEANER)


class LogChanges:
    """A set of changed partitions per job; ``take`` hands a job its set and starts a new one."""

    def __init__(self, jobs: Iterable[str] = JOBS) -> None:
        self._sets: dict[str, set[TopicPartition]] = {job: set() for job in jobs}
        self._all = tuple(self._sets.values())

    def mark(self, key: TopicPartition) -> None:
        for changed in self._all:
            changed.add(key)

    def mark_many(self, keys: Iterable[TopicPartition]) -> None:
        keys = list(keys)
        for changed in self._all:
            changed.update(keys)

    def mark_for(self, job: str, keys: Iterable[TopicPartition]) -> None:
        """Marks for one job only (the flush pass moved these logs' recovery points)."""
        self._sets[job].update(keys)

    def take(self, job: str) -> set[TopicPartition]:
        taken = self._sets[job]
        self._sets[job] = set()
        self._all = tuple(self._sets.values())
        return taken
