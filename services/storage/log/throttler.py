"""Pacing of background work in a worker thread: a byte-rate limit (Kafka's Throttler, used by
the log cleaner for ``log.cleaner.io.max.bytes.per.second``) and regular hand-overs of the GIL
to the event loop. Blocking: call them from a worker thread."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

CHECK_INTERVAL_S = 0.1


class Throttler:
    def __init__(
        self,
        bytes_per_second: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._period_start = clock()
        self._count = 0.0
        self.slept_s = 0.0

    @property
    def unlimited(self) -> bool:
        return math.isinf(self.rate) or self.rate >= 1.7e308

    def maybe_throttle(self, n: int) -> None:
        """Count ``n`` bytes; sleep when the rate since the last check is above the limit."""
        if self.unlimited:
            return
        self._count += n
        elapsed = self._clock() - self._period_start
        if elapsed < CHECK_INTERVAL_S:
            return
        wanted = self._count / self.rate
        if wanted > elapsed:
            self._sleep(wanted - elapsed)
            self.slept_s += wanted - elapsed
        self._period_start = self._clock()
        self._count = 0.0


GIL_SLICE_S = 0.001


class GilYielder:
    """Hands the GIL to other threads once per ``slice_s`` of work.

    A worker thread running pure Python keeps the GIL for the interpreter's switch interval
    (5 ms) before a waiting thread gets it, so the service's event loop would answer that much
    later while a log is being cleaned. ``time.sleep(0)`` releases the GIL at once.
    """

    def __init__(
        self, slice_s: float = GIL_SLICE_S, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._slice = slice_s
        self._clock = clock
        self._last = clock()

    def maybe_yield(self) -> None:
        now = self._clock()
        if now - self._last >= self._slice:
            time.sleep(0)
            self._last = self._clock()
