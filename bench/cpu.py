"""CPU time of a set of processes (and their descendants) from /proc."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    try:
        for task in task_dir.iterdir():
            text = (task / "children").read_text().split()
            kids.extend(int(k) for k in text)
    except OSError:
        pass
    return kids


def process_tree(pids: Iterable[int]) -> set[int]:
    seen: set[int] = set()
    stack = list(pids)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(_children(pid))
    return seen


def cpu_seconds(pids: Iterable[int]) -> float:
    """utime + stime of every live process in the trees rooted at ``pids``."""
    total = 0
    for pid in process_tree(pids):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / _TICKS
