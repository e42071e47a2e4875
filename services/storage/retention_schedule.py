"""When each log's retention is next due by time alone, so a retention pass visits only the logs
marked as changed since the last pass and those whose time has come (issue 19).

An unchanged log's retention can only start deleting because time passed: its oldest segment's
largest timestamp falls out of ``retention.ms``, or a segment deleted earlier waits out
``file.delete.delay.ms``. The log computes that moment (``Log.retention_due_ms``) after each
visit; everything else retention looks at (size, high watermark, log start, configuration)
changes only with a mark.
"""

from __future__ import annotations

import heapq

TopicPartition = tuple[str, int]


class RetentionSchedule:
    """A min-heap of (due ms, partition); a rescheduled or forgotten partition's old entries are
    skipped when they surface."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, TopicPartition]] = []
        self._due: dict[TopicPartition, int] = {}

    def schedule(self, key: TopicPartition, due_ms: int | None) -> None:
        """``key`` is next due at ``due_ms`` (None: only a change makes it due)."""
        if due_ms is None:
            self._due.pop(key, None)
            return
        if self._due.get(key) == due_ms:
            return
        self._due[key] = due_ms
        heapq.heappush(self._heap, (due_ms, key))

    def forget(self, key: TopicPartition) -> None:
        self._due.pop(key, None)

    def take_due(self, now_ms: int) -> set[TopicPartition]:
        """The partitions due at ``now_ms``; they leave the schedule until set again."""
        due: set[TopicPartition] = set()
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            at, key = heapq.heappop(heap)
            if self._due.get(key) == at:
                del self._due[key]
                due.add(key)
        if len(heap) > 2 * len(self._due) + 64:  # stale entries of rescheduled logs
            self._heap = [(at, key) for key, at in self._due.items()]
            heapq.heapify(self._heap)
        return due

    def due_at(self, key: TopicPartition) -> int | None:
        return self._due.get(key)

    def __len__(self) -> int:
        return len(self._due)
