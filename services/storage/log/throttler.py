"""A byte-rate limit for background I/O (Kafka's Throttler, used by the log cleaner for
``log.cleaner.io.max.bytes.per.second``). Blocking: call it from a worker thread."""

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
