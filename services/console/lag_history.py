"""Consumer-group lag over time: the groups someone looked at are sampled periodically and the
last N samples kept, so the console can chart lag without a metrics backend."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from services.common.logging import get_logger

log = get_logger(__name__)


class LagHistory:
    def __init__(
        self,
        total_lag: Callable[[str], int],
        interval_s: float,
        points: int,
        watch_s: float,
        max_groups: int,
    ) -> None:
        self._total_lag = total_lag  # blocking; run in a thread
        self.interval = interval_s
        self.points = points
        self.watch = watch_s
        self.max_groups = max_groups
        self._watched: OrderedDict[str, float] = OrderedDict()  # group -> last looked at
        self._samples: dict[str, deque[tuple[float, int]]] = {}

    def looked_at(self, group: str) -> None:
        """Start (or keep) sampling ``group``; the least recently viewed beyond the cap stop."""
        self._watched[group] = time.monotonic()
        self._watched.move_to_end(group)
        while len(self._watched) > self.max_groups:
            old, _ = self._watched.popitem(last=False)
            self._samples.pop(old, None)

    def record(self, group: str, lag: int, at: float | None = None) -> None:
        series = self._samples.setdefault(group, deque(maxlen=self.points))
        series.append((time.time() if at is None else at, lag))

    def samples(self, group: str) -> list[tuple[float, int]]:
        return list(self._samples.get(group, ()))

    async def run(self) -> None:
        """Sample every watched group each interval until cancelled."""
        while True:
            now = time.monotonic()
            for group, seen in list(self._watched.items()):
                if now - seen > self.watch:
                    self._watched.pop(group, None)
                    continue
                try:
                    lag = await asyncio.to_thread(self._total_lag, group)
                except Exception as exc:  # a group gone or the cluster away: try next time
                    log.debug("lag sample failed", group=group, error=str(exc))
                    continue
                self.record(group, lag)
            await asyncio.sleep(self.interval)
