"""Errors of the local cluster, carrying the tail of the failing process's log."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


class LocalClusterError(RuntimeError):
    """Start-up or control failure. ``process`` names the process; ``log_tail`` ends its log."""

    def __init__(
        self,
        message: str,
        *,
        process: str | None = None,
        log_path: Path | None = None,
        log_tail: Sequence[str] = (),
    ) -> None:
        self.summary = message
        self.process = process
        self.log_path = log_path
        self.log_tail = list(log_tail)
        text = message
        if log_path is not None:
            text += f" (log: {log_path})"
        if self.log_tail:
            text += "\n" + "\n".join("    " + line for line in self.log_tail)
        super().__init__(text)

    def one_line(self) -> str:
        """The summary plus the last log line, for a single-line CLI error."""
        text = self.summary
        if self.log_path is not None:
            text += f" (log: {self.log_path})"
        if self.log_tail:
            text += f": {self.log_tail[-1].strip()}"
        return text


class LocalClusterInterrupted(LocalClusterError):
    """``interrupt()`` was called while the cluster was starting."""


def process_failed(message: str, name: str, log_path: Path) -> LocalClusterError:
    """An error about process ``name`` that quotes the end of its log."""
    return LocalClusterError(message, process=name, log_path=log_path, log_tail=tail(log_path))


def tail(path: Path, lines: int = 15) -> list[str]:
    """The last non-blank ``lines`` of a log file (at most its last 16 KiB); [] if unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]
