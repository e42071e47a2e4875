"""The event-loop lag monitor: a loop kept busy shows up in the histogram and in the log."""

from __future__ import annotations

import asyncio
import contextlib
import time

import uvloop
from prometheus_client import CollectorRegistry, Histogram
from structlog.testing import capture_logs

from services.common import loop_lag


def _histogram() -> tuple[Histogram, CollectorRegistry]:
    registry = CollectorRegistry()
    buckets = (0.01, 1.0, 5.0)
    return Histogram("lag_seconds", "test", buckets=buckets, registry=registry), registry


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    assert value is not None
    return value


def test_a_blocked_loop_is_measured_and_logged() -> None:
    """The block (1.2 s) is far above any scheduling delay of a loaded test machine (a quiet
    sample once lagged more than 0.1 s in CI at load 15), so exactly one sample is a stall."""
    histogram, registry = _histogram()

    async def scenario() -> None:
        watcher = asyncio.get_running_loop().create_task(
            loop_lag.watch(interval_s=0.02, stall_log_s=1.0, histogram=histogram)
        )
        await asyncio.sleep(0.1)  # a few quiet samples
        time.sleep(1.2)  # noqa: ASYNC251 - blocks the loop: the next sample is about 1.2 s late
        await asyncio.sleep(0.1)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher

    with capture_logs() as logs:
        uvloop.run(scenario())
    assert _sample(registry, "lag_seconds_count") >= 4
    assert _sample(registry, "lag_seconds_bucket", le="1.0") >= 3  # the quiet ones
    assert (
        _sample(registry, "lag_seconds_bucket", le="5.0")
        - _sample(registry, "lag_seconds_bucket", le="1.0")
        == 1
    )  # the blocked one
    stalls = [e for e in logs if e["event"] == "event_loop_stalled"]
    assert len(stalls) == 1 and 1.1 <= stalls[0]["seconds"] < 5.0
    assert stalls[0]["log_level"] == "warning"


def test_a_quiet_loop_logs_nothing() -> None:
    histogram, registry = _histogram()

    async def scenario() -> None:
        watcher = asyncio.get_running_loop().create_task(
            loop_lag.watch(interval_s=0.01, stall_log_s=0.5, histogram=histogram)
        )
        await asyncio.sleep(0.1)
        watcher.cancel()

    with capture_logs() as logs:
        uvloop.run(scenario())
    assert _sample(registry, "lag_seconds_count") >= 3
    assert not [e for e in logs if e["event"] == "event_loop_stalled"]
