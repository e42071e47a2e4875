"""The broker-level offset checkpoints (recovery points, high watermarks, log start offsets),
kept up to date from the marks of ``services.storage.changes`` instead of rebuilt (issue 19).

Each file's content per log dir lives here as a map; a run applies the marked partitions to it
(O(changed)) and writes only the dirs whose map changed. :meth:`OffsetCheckpoint.rebuild` is the
full rebuild (every hosted log read again), used at shutdown and to check that both agree.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

TopicPartition = tuple[str, int]


class OffsetCheckpoint:
    """One checkpoint file (``name``) in every log dir: ``offset(log)`` of each hosted partition
    of that dir, left out where ``keep(offset)`` is false (the log-start file lists only logs
    whose start moved past 0)."""

    def __init__(
        self,
        name: str,
        offset: Callable[[Any], int],
        keep: Callable[[int], bool] = lambda _v: True,
    ) -> None:
        self.name = name
        self.offset = offset
        self.keep = keep
        self.by_dir: dict[Path, dict[TopicPartition, int]] = {}
        self._dir_of: dict[TopicPartition, Path] = {}  # where each entry is
        self._dirty: set[Path] = set()
        self._written: set[Path] = set()  # dirs whose file holds their map (as last written)

    def _entry(
        self, key: TopicPartition, logs: Mapping[TopicPartition, Any], dirs: Mapping[Any, Path]
    ) -> tuple[Path, int] | None:
        lg = logs.get(key)
        d = dirs.get(key)
        if lg is None or d is None:
            return None
        value = self.offset(lg)
        return (d, value) if self.keep(value) else None

    def update(
        self,
        keys: Iterable[TopicPartition],
        logs: Mapping[TopicPartition, Any],
        dirs: Mapping[Any, Path],
    ) -> None:
        """Apply the marked partitions (``logs``: hosted log by partition, ``dirs``: its dir)."""
        for key in keys:
            entry = self._entry(key, logs, dirs)
            old_dir = self._dir_of.get(key)
            if old_dir is not None and (entry is None or entry[0] != old_dir):
                del self.by_dir[old_dir][key]
                del self._dir_of[key]
                self._dirty.add(old_dir)
            if entry is None:
                continue
            d, value = entry
            mine = self.by_dir.setdefault(d, {})
            if mine.get(key) != value:
                mine[key] = value
                self._dir_of[key] = d
                self._dirty.add(d)

    def rebuild(
        self,
        logs: Mapping[TopicPartition, Any],
        dirs: Mapping[Any, Path],
        online: Collection[Path],
    ) -> dict[Path, dict[TopicPartition, int]]:
        """What every online dir's file holds when built from every hosted log."""
        out: dict[Path, dict[TopicPartition, int]] = {d: {} for d in online}
        for key in logs:
            entry = self._entry(key, logs, dirs)
            if entry is not None and entry[0] in out:
                out[entry[0]][key] = entry[1]
        return out

    def reset(self, full: Mapping[Path, Mapping[TopicPartition, int]]) -> None:
        """Replace the maps by a full rebuild; dirs whose content changed are to be written."""
        for d in set(self.by_dir) | set(full):
            if self.by_dir.get(d, {}) != full.get(d, {}):
                self._dirty.add(d)
        self.by_dir = {d: dict(m) for d, m in full.items()}
        self._dir_of = {key: d for d, m in full.items() for key in m}

    def to_write(self, online: Iterable[Path]) -> list[tuple[Path, dict[TopicPartition, int]]]:
        """The online dirs whose file is out of date, each with a copy of its content; they
        count as written (call :meth:`failed` for one that was not)."""
        out = []
        for d in online:
            if d in self._dirty or d not in self._written:
                out.append((d, dict(self.by_dir.get(d, {}))))
                self._dirty.discard(d)
                self._written.add(d)
        return out

    def failed(self, d: Path) -> None:
        self._written.discard(d)
