"""WatchSet against a real ZooKeeper: a pooled watch's reads do not hold the others back."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from services.common.zk.client import AsyncZk
from services.common.zk.watches import WatchSet

pytestmark = pytest.mark.integration


class _Seen:
    """A data watch's callback: every value it was called with, in order."""

    def __init__(self) -> None:
        self.values: list[bytes | None] = []
        self._changed = asyncio.Event()

    def __call__(self, data: bytes | None, stat: Any) -> None:
        self.values.append(data)
        self._changed.set()

    async def until(self, want: bytes) -> None:
        while want not in self.values:
            self._changed.clear()
            await self._changed.wait()


async def test_a_pooled_watch_reading_slowly_does_not_delay_the_other_watches(
    zk: AsyncZk,
) -> None:
    """Thousands of partition states change at once (ISR expansions): kazoo reads a changed
    znode again on its one callback thread, so each read held every other watch of the
    process (the gateway's /controller) behind it. The pooled watch's read is held here: the
    other watch still gets its change, and the pooled one gets its latest data once let go."""
    await zk.create("/state", b"s0", makepath=True)
    await zk.create("/controller", b"c0")
    watches = WatchSet(zk)
    states, controllers = _Seen(), _Seen()
    watches.data("/state", states, pooled=True)
    watches.data("/controller", controllers)
    try:
        await asyncio.wait_for(watches.wait_all_fired(), 10)
        assert (states.values, controllers.values) == ([b"s0"], [b"c0"])

        reading = threading.Event()
        release = threading.Event()
        real_get = zk.client.get

        def slow_get(path: str, *args: Any, **kwargs: Any) -> Any:
            if path.endswith("/state"):
                reading.set()
                release.wait(10)
            return real_get(path, *args, **kwargs)

        zk.client.get = slow_get  # the watch recipes read through it
        try:
            await zk.set("/state", b"s1")
            assert await asyncio.to_thread(reading.wait, 10), "the pooled watch never read"
            await zk.set("/controller", b"c1")
            await asyncio.wait_for(controllers.until(b"c1"), 5)
            assert states.values == [b"s0"]  # its read is still held
        finally:
            release.set()
        await zk.set("/state", b"s2")
        await asyncio.wait_for(states.until(b"s2"), 10)
        assert states.values[0] == b"s0" and states.values[-1] == b"s2"
    finally:
        del zk.client.get
        watches.stop_all()
