"""Which rolled segments retention deletes, and the delayed removal of deleted files
(Kafka's ``UnifiedLog.deleteOldSegments`` predicates and ``file.delete.delay.ms``).

Pure selection over a segment list; ``Log`` applies the result under its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from services.storage.log import files
from services.storage.log.segment import LogSegment

#: ``(segment, next segment or None) -> delete it?``; selection stops at the first False.
SegmentPredicate = Callable[[LogSegment, LogSegment | None], bool]


def deletable_segments(
    segments: Sequence[LogSegment],
    log_end_offset: int,
    high_watermark: int,
    predicate: SegmentPredicate,
) -> list[LogSegment]:
    """The oldest segments, in order, that ``predicate`` accepts and that lie wholly below the
    high watermark; an empty active segment is never one."""
    deletable: list[LogSegment] = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        upper = nxt.base_offset if nxt is not None else log_end_offset
        if nxt is None and seg.size == 0:
            break
        if high_watermark >= upper and predicate(seg, nxt):
            deletable.append(seg)
        else:
            break
    return deletable


def below_log_start(log_start_offset: int) -> SegmentPredicate:
    """Segments whose successor starts at or below the log start offset."""
    return lambda seg, nxt: nxt is not None and nxt.base_offset <= log_start_offset


def retention_ms_breached(now_ms: int, retention_ms: int) -> SegmentPredicate:
    """Segments whose largest timestamp is older than ``retention.ms``."""
    return lambda seg, nxt: now_ms - seg.largest_timestamp() > retention_ms


def retention_ms_due(segments: Sequence[LogSegment], retention_ms: int) -> int | None:
    """The first time at which :func:`retention_ms_breached` accepts the oldest segment (None: a
    log holding only an empty active segment, whose time retention waits for an append)."""
    if retention_ms < 0 or not segments or (len(segments) == 1 and segments[0].size == 0):
        return None
    return segments[0].largest_timestamp() + retention_ms + 1


def retention_size_breached(size: int, retention_bytes: int) -> SegmentPredicate:
    """The oldest segments whose removal keeps the log at or above ``retention.bytes``."""
    diff = size - retention_bytes

    def should_delete(seg: LogSegment, nxt: LogSegment | None) -> bool:
        nonlocal diff
        if diff - seg.size >= 0:
            diff -= seg.size
            return True
        return False

    return should_delete


@dataclass
class _PendingDelete:
    deadline_ms: int
    paths: list[Path]


class PendingDeletes:
    """Files renamed ``.deleted``, removed once ``file.delete.delay.ms`` has passed."""

    def __init__(self) -> None:
        self._pending: list[_PendingDelete] = []

    def delete_segment(self, seg: LogSegment, now_ms: int, delay_ms: int) -> None:
        """Delete ``seg``'s files now (no delay) or rename them ``.deleted`` for later."""
        if delay_ms <= 0:
            seg.delete_files()
            return
        self.defer(seg, now_ms + delay_ms)

    def defer(self, seg: LogSegment, deadline_ms: int) -> None:
        """Rename ``seg``'s files ``.deleted``; :meth:`purge` removes them after ``deadline_ms``."""
        paths = seg.rename_with_suffix(files.DELETED_SUFFIX)
        self._pending.append(_PendingDelete(deadline_ms, paths))

    def next_deadline(self) -> int | None:
        """When :meth:`purge` next has something to remove (None: nothing pending)."""
        return min((p.deadline_ms for p in self._pending), default=None)

    def purge(self, now_ms: int) -> int:
        """Remove the files whose delay has passed; returns files removed."""
        removed = 0
        keep: list[_PendingDelete] = []
        for pending in self._pending:
            if pending.deadline_ms <= now_ms:
                for p in pending.paths:
                    p.unlink(missing_ok=True)
                    removed += 1
            else:
                keep.append(pending)
        self._pending = keep
        return removed

    def clear(self) -> None:
        self._pending.clear()
