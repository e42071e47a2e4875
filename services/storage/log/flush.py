"""Flushing a log: which files to fsync for a target offset, and the fsyncs themselves.

The plan is made under the log's lock, the fsyncs run outside it (as Kafka's
``UnifiedLog.flush``), and the log applies the result under the lock again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from services.storage.log import files
from services.storage.log.segment import LogSegment, fsync_targets


@dataclass
class FlushPlan:
    target: int  # the recovery point once the handles are fsynced
    targets: list[int | Path]  # own descriptors (closed after the fsync) or files
    sync_dir: bool  # the directory changed (segments created): fsync it too
    truncations: int  # Log.truncations when planned
    messages: int  # unflushed messages the flush covers


def flush_targets(
    segments: Sequence[LogSegment], log_end_offset: int, recovery_point: int, target: int
) -> list[int | Path]:
    """The files of the segments holding offsets in [recovery_point, target)."""
    targets: list[int | Path] = []
    if target > recovery_point:
        for i, seg in enumerate(segments):
            end = segments[i + 1].base_offset if i + 1 < len(segments) else log_end_offset
            if seg.base_offset < target and end > recovery_point:
                targets.extend(seg.flush_targets())
    return targets


def run_flush(plan: FlushPlan, dir: Path) -> None:
    """fsync a plan's files (and ``dir`` when it changed); the plan's targets are consumed.
    A log directory deleted meanwhile needs no fsync."""
    targets, plan.targets = plan.targets, []
    fsync_targets(targets)
    if plan.sync_dir:
        try:
            files.fsync_dir(dir)
        except FileNotFoundError:  # the log was deleted meanwhile
            pass
