"""The delayed-operation waiter behind acks=all produces and long-poll fetches."""

from __future__ import annotations

import asyncio
import time

from services.storage.delayed import DelayedOperations


async def test_ready_at_once_does_not_park() -> None:
    ops = DelayedOperations("t")
    assert await ops.wait_until([("t", 0)], lambda: True, 5.0)
    assert ops.watcher_count() == 0


async def test_notify_wakes_and_rechecks_condition() -> None:
    ops = DelayedOperations("t")
    state = {"hw": 0}
    task = asyncio.create_task(ops.wait_until([("t", 0)], lambda: state["hw"] >= 2, 5.0))
    await asyncio.sleep(0)
    assert ops.watcher_count(("t", 0)) == 1
    state["hw"] = 1
    ops.notify(("t", 0))  # spurious for this waiter: condition still false, it parks again
    await asyncio.sleep(0.01)
    assert not task.done()
    assert ops.watcher_count(("t", 0)) == 1
    started = time.monotonic()
    state["hw"] = 2
    ops.notify(("t", 0))
    assert await task is True
    assert time.monotonic() - started < 0.5
    assert ops.watcher_count() == 0


async def test_notify_on_other_key_does_not_wake() -> None:
    ops = DelayedOperations("t")
    flag = {"v": False}
    task = asyncio.create_task(ops.wait_until([("a", 0)], lambda: flag["v"], 0.2))
    await asyncio.sleep(0)
    flag["v"] = True
    ops.notify(("b", 0))
    await asyncio.sleep(0.05)
    assert not task.done()
    # at the deadline the condition is checked one last time
    assert await task is True


async def test_timeout_returns_false_and_cleans_up() -> None:
    ops = DelayedOperations("t")
    started = time.monotonic()
    assert await ops.wait_until([("t", 0), ("t", 1)], lambda: False, 0.05) is False
    assert 0.04 <= time.monotonic() - started < 1.0
    assert ops.watcher_count() == 0


async def test_cancelled_waiter_unregisters() -> None:
    ops = DelayedOperations("t")
    task = asyncio.create_task(ops.wait_until([("t", 0)], lambda: False, 30.0))
    await asyncio.sleep(0)
    assert ops.watcher_count() == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert ops.watcher_count() == 0
    ops.notify(("t", 0))  # nothing left to wake; must not raise
