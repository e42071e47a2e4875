"""Liveness while the faults run: who acts as controller, sampled twice a second.

A controller acts when its ``kafka_controller_kafkacontroller_activecontrollercount`` gauge
reads 1 (a stopped or dead process does not act). The ``ControllerMonitor`` notes every change
on the timeline and measures each stretch without an acting controller, counting the time
ZooKeeper was running in it, so a controller that resigned and never came back (issue 12 §1)
shows even when a later fault repairs it before the heal.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from dataclasses import dataclass

from services.cli.local_cluster import ZOOKEEPER, LocalCluster
from tests.e2e.checker.timeline import Timeline

_ACTIVE = re.compile(r"^kafka_controller_kafkacontroller_activecontrollercount (\S+)$", re.M)


def acting_controllers(cluster: LocalCluster, timeout: float = 0.5) -> tuple[list[int], str]:
    """(indexes of the controllers whose gauge reads 1, a per-controller description)."""
    acting: list[int] = []
    seen: list[str] = []
    for p in cluster.processes():
        if p.role != "controller":
            continue
        if not p.running:
            seen.append(f"{p.index}:down")
            continue
        url = cluster.admin_url("controller", p.index) + "/metrics"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                m = _ACTIVE.search(r.read().decode())
        except OSError:
            seen.append(f"{p.index}:unreachable")
            continue
        value = m.group(1) if m else "?"
        seen.append(f"{p.index}:{value}")
        if value in ("1", "1.0"):
            acting.append(p.index)
    return acting, " ".join(seen)


def stopped(pid: int | None) -> bool:
    """Whether a process is stopped (SIGSTOP): state ``T`` in /proc."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except OSError:
        return False


@dataclass(slots=True)
class Gap:
    """A stretch without an acting controller; ``zk_up`` counts only the time ZooKeeper was
    running (a stopped or killed ZooKeeper explains a gap by itself)."""

    start: float  # wall clock
    end: float
    zk_up: float = 0.0

    @property
    def seconds(self) -> float:
        return self.end - self.start


class ControllerMonitor:
    """Samples the acting controllers from its own thread between ``start()`` and ``stop()``."""

    def __init__(self, cluster: LocalCluster, timeline: Timeline, interval: float = 0.5) -> None:
        self.cluster = cluster
        self.timeline = timeline
        self.interval = interval
        self.gaps: list[Gap] = []  # stretches without an acting controller
        self.samples = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def longest_gap(self) -> Gap | None:
        """The gap with the most time of ZooKeeper running."""
        return max(self.gaps, key=lambda g: g.zk_up, default=None)

    def _run(self) -> None:
        last: list[int] | None = None
        gap: Gap | None = None
        prev = time.time()
        while not self._halt.is_set():
            now = time.time()
            zk_pid = self.cluster.pids().get(ZOOKEEPER)
            zk_stopped = zk_pid is None or stopped(zk_pid)  # killed, or SIGSTOPped
            try:
                acting, seen = acting_controllers(self.cluster)
            except Exception as exc:  # noqa: BLE001 - a sample lost, not the monitor
                acting, seen = [], f"sample failed: {exc!r}"
            self.samples += 1
            if acting != last:
                what = (
                    f"controller-{acting[0]} acting"
                    if len(acting) == 1
                    else (
                        "NO acting controller" if not acting else f"{len(acting)} acting: {acting}"
                    )
                )
                self.timeline.note("monitor", f"{what} ({seen})")
                last = acting
            if gap is not None and not zk_stopped:
                gap.zk_up += now - prev
            if not acting and gap is None:
                gap = Gap(now, now)
            elif acting and gap is not None:
                gap.end = now
                self.gaps.append(gap)
                gap = None
            prev = now
            self._halt.wait(self.interval)
        if gap is not None:
            gap.end = time.time()
            self.gaps.append(gap)
