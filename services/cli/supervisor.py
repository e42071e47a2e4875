"""Restarts processes of a LocalCluster that die unexpectedly, a bounded number of times."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from services.cli.local_cluster import ZOOKEEPER, LocalClusterError, LocalClusterInterrupted

Log = Callable[[str], None]


class Restartable(Protocol):
    def exited(self) -> dict[str, int]: ...

    def start_process(
        self, role: str, index: int = 0, *, timeout: float = 60.0, wait: bool = True
    ) -> None: ...


def split_name(name: str) -> tuple[str, int]:
    """``"storage-2"`` -> ``("storage", 2)``; ``"zookeeper"`` -> ``("zookeeper", 0)``."""
    if name == ZOOKEEPER:
        return ZOOKEEPER, 0
    role, _, index = name.rpartition("-")
    return role, int(index)


def _start_rank(name: str) -> tuple[int, int]:
    role, index = split_name(name)
    order = {ZOOKEEPER: 0, "controller": 1, "storage": 2, "gateway": 3}
    return order.get(role, 9), index


class Supervisor:
    """Call ``tick()`` periodically. A process is restarted at most ``max_restarts`` times within
    ``window_s`` seconds; after that it is left down (and reported once). Consecutive restarts of
    the same process back off exponentially (1 s, 2 s, 4 s ... capped at 30 s).
    """

    def __init__(
        self,
        cluster: Restartable,
        log: Log,
        *,
        max_restarts: int = 5,
        window_s: float = 600.0,
        ready_timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.log = log
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.ready_timeout = ready_timeout
        self.clock = clock
        self.history: dict[str, deque[float]] = {}
        self.given_up: set[str] = set()
        self._not_before: dict[str, float] = {}
        self._reported: set[str] = set()

    def tick(self) -> list[str]:
        """Restart what died; returns the names restarted in this call."""
        restarted: list[str] = []
        dead = self.cluster.exited()
        for name in sorted(dead, key=_start_rank):  # ZooKeeper before the services that need it
            if name in self.given_up:
                continue
            now = self.clock()
            recent = self.history.setdefault(name, deque())
            while recent and now - recent[0] > self.window_s:
                recent.popleft()
            if name not in self._reported:
                self._reported.add(name)
                self.log(f"{name} exited unexpectedly with code {dead[name]}")
            if len(recent) >= self.max_restarts:
                self.given_up.add(name)
                self.log(
                    f"{name} was restarted {len(recent)} times in {self.window_s:g}s; "
                    "leaving it down"
                )
                continue
            if now < self._not_before.get(name, 0.0):
                continue
            recent.append(now)
            self._not_before[name] = now + min(30.0, 2.0 ** (len(recent) - 1))
            self._reported.discard(name)
            self.log(f"restarting {name} ({len(recent)}/{self.max_restarts})")
            role, index = split_name(name)
            try:
                self.cluster.start_process(role, index, timeout=self.ready_timeout)
            except LocalClusterInterrupted:
                raise
            except LocalClusterError as exc:
                self.log(f"restart of {name} failed: {exc.one_line()}")
                continue
            restarted.append(name)
            self.log(f"{name} is back")
        return restarted
