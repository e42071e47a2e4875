"""How late a service's event loop runs what is due.

Every request a service handles waits while its event loop is busy with something else (a long
callback, a blocking call, a collection, a process that gets no CPU). A timer that should fire
every ``INTERVAL_S`` measures that: how late it fires is the loop's lag at that moment. The
histogram ``kafkapy_event_loop_lag_seconds`` shows it over time; a lag of ``STALL_LOG_S`` or
more is also logged, so a latency outlier can be matched to the process that stalled.

The timer wakes an idle process, and on the 2-vCPU virtual machine the figures come from, waking an
idle process costs 220-350 us of CPU (measured from /proc/self/schedstat). Once a second keeps
that near 0.03% of a core per service; a stall shorter than the interval is caught when the
timer falls due inside it, so short stalls show in proportion to their length.
"""

from __future__ import annotations

import asyncio

from prometheus_client import Histogram

from services.common.logging import get_logger

log = get_logger("runtime.loop_lag")

INTERVAL_S = 1.0
STALL_LOG_S = 0.2

LOOP_LAG = Histogram(
    "kafkapy_event_loop_lag_seconds",
    f"How late a timer due every {INTERVAL_S} s ran on the event loop",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)


async def watch(
    interval_s: float = INTERVAL_S,
    stall_log_s: float = STALL_LOG_S,
    histogram: Histogram = LOOP_LAG,
) -> None:
    """Sample the loop's lag until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        lag = max(0.0, loop.time() - due)
        histogram.observe(lag)
        if lag >= stall_log_s:
            log.warning("event_loop_stalled", seconds=round(lag, 3))
