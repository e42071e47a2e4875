"""Leader-epoch cache persisted to ``leader-epoch-checkpoint`` (Kafka's LeaderEpochFileCache).

Each entry is (epoch, start offset): the first offset written under that leader epoch.
Entries are strictly increasing in both epoch and start offset.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from services.common.logging import get_logger
from services.storage.log.checkpoint import read_epoch_checkpoint, write_epoch_checkpoint
from services.storage.log.files import LEADER_EPOCH_CHECKPOINT

log = get_logger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(
        self, dir: Path, log_end_offset: Callable[[], int] | None = None, *, sync: bool = True
    ) -> None:
        self.path = dir / LEADER_EPOCH_CHECKPOINT
        self._log_end_offset = log_end_offset
        self._sync = sync
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = []
        if not self.path.exists():
            self.path.touch()  # Kafka creates the (empty) checkpoint file with the log
        for epoch, offset in read_epoch_checkpoint(self.path):
            self._assign(EpochEntry(epoch, offset))

    # ------------------------------------------------------------------ reads
    @property
    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        entry = self.latest_entry
        return entry.epoch if entry else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    def previous_epoch(self, epoch: int) -> int | None:
        with self._lock:
            i = bisect_left([e.epoch for e in self._entries], epoch)
            return self._entries[i - 1].epoch if i > 0 else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """Epoch under which ``offset`` was written (largest entry with start offset <= offset)."""
        with self._lock:
            i = bisect_right([e.start_offset for e in self._entries], offset)
            return self._entries[i - 1].epoch if i > 0 else None

    def end_offset_for(
        self, requested_epoch: int, log_end_offset: int | None = None
    ) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's OffsetForLeaderEpoch answers it.

        The epoch is the largest known epoch <= the requested one; the end offset is the start
        offset of the next larger epoch, or the log end offset for the latest epoch.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self._entries and self._entries[-1].epoch == requested_epoch:
                if log_end_offset is None:
                    if self._log_end_offset is None:
                        raise ValueError("log end offset unknown")
                    log_end_offset = self._log_end_offset()
                return requested_epoch, log_end_offset
            epochs = [e.epoch for e in self._entries]
            higher = bisect_right(epochs, requested_epoch)
            if higher == len(epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            higher_entry = self._entries[higher]
            if higher == 0:
                return requested_epoch, higher_entry.start_offset
            return self._entries[higher - 1].epoch, higher_entry.start_offset

    # ----------------------------------------------------------------- writes
    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op if already known)."""
        with self._lock:
            if self._assign(EpochEntry(epoch, start_offset)):
                self._write()

    def assign_unwritten(self, epoch: int, start_offset: int) -> bool:
        """``assign`` in memory only; True if the checkpoint file must now be written (by
        ``write``, which the caller runs before it acknowledges the change)."""
        with self._lock:
            return self._assign(EpochEntry(epoch, start_offset))

    def write(self) -> None:
        """Write the checkpoint file with the current entries (thread-safe: it may run on a
        worker thread while the event loop reads the entries)."""
        with self._lock:
            self._write()

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}")
        latest = self._entries[-1] if self._entries else None
        if (
            latest is not None
            and entry.epoch == latest.epoch
            and entry.start_offset >= latest.start_offset
        ):
            return False
        removed: list[EpochEntry] = []
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch
            or self._entries[-1].start_offset >= entry.start_offset
        ):
            removed.append(self._entries.pop())
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            log.warning(
                "leader_epoch_truncated_conflicting",
                new=entry,
                removed=removed,
                path=str(self.path),
            )
        self._entries.append(entry)
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries whose start offset >= ``end_offset`` (follower truncation)."""
        with self._lock:
            if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
                return
            while self._entries and self._entries[-1].start_offset >= end_offset:
                self._entries.pop()
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries before ``start_offset``; the last one at or before it moves to ``start_offset``."""
        with self._lock:
            removed: list[EpochEntry] = []
            while self._entries and self._entries[0].start_offset <= start_offset:
                removed.append(self._entries.pop(0))
            if removed:
                first = EpochEntry(removed[-1].epoch, start_offset)
                self._entries.insert(0, first)
                if removed != [first]:  # unchanged (the usual case at open): no rewrite
                    self._write()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._write()

    def _write(self) -> None:
        if self.path.parent.exists():
            write_epoch_checkpoint(
                self.path, [(e.epoch, e.start_offset) for e in self._entries], sync=self._sync
            )
