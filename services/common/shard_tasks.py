"""The tasks and timers of one coordinator shard, on the event loop: tasks are kept alive
until done (their failure is logged); timers fire nothing once the shard has resigned and a
failing timer callback is logged, never raised into the loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from services.common.logging import get_logger

log = get_logger("common.shard_tasks")

_T = TypeVar("_T")


def now_ms() -> int:
    return int(time.time() * 1000)


class ShardTasks:
    def __init__(self, partition: int, label: str) -> None:
        """``label`` names the coordinator in log events (``<label>_task_failed``)."""
        self.partition = partition
        self.label = label
        self.resigned = False
        self.loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        """Run ``coro`` as a task kept alive until done (its failure is logged)."""
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                f"{self.label}_task_failed",
                partition=self.partition,
                error=repr(task.exception()),
            )

    def call_later(
        self, delay_ms: int, callback: Callable[..., None], *args: Any
    ) -> asyncio.TimerHandle:
        return self.loop.call_later(max(delay_ms, 0) / 1000.0, self._guarded, callback, args)

    def _guarded(self, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        if self.resigned:
            return
        try:
            callback(*args)
        except Exception as exc:  # a timer must never kill the loop's callback
            log.exception(f"{self.label}_timer_failed", partition=self.partition, error=repr(exc))
