"""Liveness while the faults run: who acts as controller, sampled twice a second.

A controller acts when its ``kafka_controller_kafkacontroller_activecontrollercount`` gauge
reads 1 (a stopped or dead process does not act). The ``ControllerMonitor`` notes every change
on the timeline and reports the longest stretch without an acting controller, so a controller
that resigned and never came back (issue 12 §1) shows even when a later fault repairs it
before the heal.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from dataclasses import dataclass

from services.cli.local_cluster import LocalCluster
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


@dataclass(slots=True)
class Gap:
    start: float  # wall clock
    end: float

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
        self._thread.join(10)

    def longest_gap(self) -> Gap | None:
        return max(self.gaps, key=lambda g: g.seconds, default=None)

    def _run(self) -> None:
        last: list[int] | None = None
        gap_start: float | None = None
        while not self._halt.is_set():
            now = time.time()
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
            if not acting and gap_start is None:
                gap_start = now
            elif acting and gap_start is not None:
                self.gaps.append(Gap(gap_start, now))
                gap_start = None
            self._halt.wait(self.interval)
        if gap_start is not None:
            self.gaps.append(Gap(gap_start, time.time()))
