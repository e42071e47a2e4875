"""Delayed operations ("purgatory"): coroutines parked until a keyed event or a deadline.

A waiter registers under one or more keys (a partition), and sleeps until ``notify(key)``
wakes it; it then re-checks its own completion condition, so a notify is only a hint and
spurious wake-ups are harmless. No polling: between notifications nothing runs. A cancelled
waiter (the RPC's client went away) just unregisters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable


class DelayedOperations:
    """Futures keyed by partition; ``notify`` resolves every future watching that key."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, set[asyncio.Future[None]]] = {}

    def watcher_count(self, key: Hashable | None = None) -> int:
        if key is not None:
            return len(self._watchers.get(key, ()))
        return sum(len(s) for s in self._watchers.values())

    def notify(self, key: Hashable) -> None:
        """Wake every waiter watching ``key`` (they re-check their condition)."""
        futures = self._watchers.pop(key, None)
        if not futures:
            return
        for fut in futures:
            if not fut.done():
                fut.set_result(None)

    def notify_all(self) -> None:
        for key in list(self._watchers):
            self.notify(key)

    async def wait_until(
        self, keys: Iterable[Hashable], ready: Callable[[], bool], timeout_s: float
    ) -> bool:
        """Wait until ``ready()`` is true (checked at start and after each notify on ``keys``).

        Returns True when ready, False when ``timeout_s`` passed first.
        """
        if ready():
            return True
        key_list = list(dict.fromkeys(keys))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ready()
            fut: asyncio.Future[None] = loop.create_future()
            for key in key_list:
                self._watchers.setdefault(key, set()).add(fut)
            try:
                async with asyncio.timeout(remaining):
                    await fut
            except TimeoutError:
                return ready()
            finally:
                self._unwatch(key_list, fut)
            if ready():
                return True

    def _unwatch(self, keys: list[Hashable], fut: asyncio.Future[None]) -> None:
        if not fut.done():
            fut.cancel()
        for key in keys:
            watchers = self._watchers.get(key)
            if watchers is not None:
                watchers.discard(fut)
                if not watchers:
                    del self._watchers[key]
