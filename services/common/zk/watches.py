"""Stoppable ZooKeeper watches for asyncio code.

kazoo's ``DataWatch``/``ChildrenWatch`` read the znode synchronously when they are created, so
they are created on a small thread pool, never on the event loop. Callbacks run on the loop.
A watch can be stopped (a deleted topic's znodes), which kazoo's recipes only support by the
callback returning False on the next event; we also drop the recipe's session listener so
stopped watches do not pile up in the client.

kazoo runs every watch event of a client on one callback thread, and its ``DataWatch`` reads
the changed znode again there, synchronously: a burst of changes to many watched znodes (the
ISR expansions of a restarted storage node, thousands of partition states) holds every other
watch of the process behind one ZooKeeper round trip each (a gateway learnt of a new active
controller seconds late). Watches added with ``pooled=True`` read again on this set's threads
instead, so the callback thread only hands their events over.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from services.common.logging import get_logger
from services.common.zk.client import AsyncZk

DataCallback = Callable[[bytes | None, ZnodeStat | None], None]
ChildrenCallback = Callable[[list[str]], None]

_RETRY_DELAY_S = 1.0

log = get_logger("gateway.zk")


class _Watch:
    __slots__ = ("stopped", "recipe", "fired")

    def __init__(self) -> None:
        self.stopped = False
        self.fired = False
        self.recipe: Any = None


class _PooledDataWatch(DataWatch):  # type: ignore[misc]
    """kazoo's DataWatch whose reads after an event (and after a reconnect) run on ``pool``,
    not on kazoo's callback thread (and not on a new thread per watch, as kazoo's reconnect
    does)."""

    def __init__(
        self,
        client: KazooClient,
        path: str,
        func: Callable[[bytes | None, ZnodeStat | None], bool | None],
        pool: _DaemonPool,
    ) -> None:
        self._pool = pool
        super().__init__(client, path, func)

    def _watcher(self, event: WatchedEvent) -> None:
        self._submit(functools.partial(self._get_data, event=event))

    def _session_watcher(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._submit(self._get_data)

    def _submit(self, read: Callable[[], None]) -> None:
        def run() -> None:
            try:
                read()
            except Exception as exc:  # noqa: BLE001 - e.g. a lost session: the reconnect reads again
                log.warning("zk_watch_read_failed", path=self._path, error=repr(exc))

        with contextlib.suppress(RuntimeError):  # the set was stopped
            self._pool.submit(run)


class WatchSet:
    """Data and children watches keyed by path; each path is watched at most once per kind."""

    def __init__(self, zk: AsyncZk, threads: int = 4) -> None:
        self._zk = zk
        self._threads = threads
        self._executor = _DaemonPool(threads, "zk-watch")  # creates watches
        self._readers: _DaemonPool | None = None  # the pooled watches' reads (made on first use)
        self._active: dict[tuple[str, str], _Watch] = {}
        self._unfired = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    @property
    def unfired(self) -> int:
        """Watches registered but not yet delivered once (initial-load tracking)."""
        return self._unfired

    async def wait_all_fired(self) -> None:
        await self._idle.wait()

    def watching(self, kind: str, path: str) -> bool:
        return (kind, path) in self._active

    def data(self, path: str, callback: DataCallback, *, pooled: bool = False) -> None:
        """Watch ``path``'s data. ``pooled``: for the many watches of one kind (partition
        states), read again on this set's threads (see the module's docstring)."""
        self._add("data", path, callback, pooled)

    def children(self, path: str, callback: ChildrenCallback) -> None:
        self._add("children", path, callback)

    def stop(self, kind: str, path: str) -> None:
        w = self._active.pop((kind, path), None)
        if w is not None:
            self._stop(w)

    def stop_prefix(self, prefix: str) -> None:
        for key in [k for k in self._active if k[1].startswith(prefix)]:
            self._stop(self._active.pop(key))

    def stop_all(self) -> None:
        for w in self._active.values():
            self._stop(w)
        self._active.clear()
        self._closed = True
        self._executor.shutdown()
        if self._readers is not None:
            self._readers.shutdown()

    # ---- internals ------------------------------------------------------------------
    def _reader_pool(self) -> _DaemonPool:
        """Threads of their own for the pooled watches' reads: a burst of them must not delay
        the creation of new watches (a topic created meanwhile, awaited by CreateTopics)."""
        if self._readers is None:
            self._readers = _DaemonPool(self._threads, "zk-watch-read")
        return self._readers

    def _stop(self, w: _Watch) -> None:
        w.stopped = True
        if not w.fired:
            w.fired = True
            self._fired_once()
        recipe = w.recipe
        if recipe is not None:
            # kazoo recipes only stop when their callback returns False; also drop the
            # session listener now so the stopped recipe is released.
            recipe._stopped = True
            try:
                self._zk.client.remove_listener(recipe._session_watcher)
            except (AttributeError, ValueError):
                pass

    def _fired_once(self) -> None:
        self._unfired -= 1
        if self._unfired == 0:
            self._idle.set()

    def _add(
        self, kind: str, path: str, callback: Callable[..., None], pooled: bool = False
    ) -> None:
        key = (kind, path)
        if key in self._active or self._closed:
            return
        w = _Watch()
        self._active[key] = w
        self._unfired += 1
        self._idle.clear()
        self._start(kind, path, w, callback, pooled)

    def _start(
        self, kind: str, path: str, w: _Watch, callback: Callable[..., None], pooled: bool
    ) -> None:
        loop = self._zk.loop

        def deliver(*args: Any) -> None:
            if w.stopped:
                return
            try:
                callback(*args)
            except Exception:  # noqa: BLE001 - a bad znode must not stop the watch
                log.exception("zk_watch_callback_failed", path=path)
            # Counted after the callback, which may register the watches it depends on
            # (topic -> partition states), so the initial load waits for those too.
            if not w.fired:
                w.fired = True
                self._fired_once()

        if kind == "data":

            def on_data(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
                if w.stopped:
                    return False
                loop.call_soon_threadsafe(deliver, data, stat)
                return None

            def create() -> Any:
                if pooled:
                    return _PooledDataWatch(self._zk.client, path, on_data, self._reader_pool())
                return DataWatch(self._zk.client, path, on_data)
        else:

            def on_children(children: list[str]) -> bool | None:
                if w.stopped:
                    return False
                loop.call_soon_threadsafe(deliver, list(children))
                return None

            def create() -> Any:
                return ChildrenWatch(self._zk.client, path, on_children, allow_session_lost=True)

        def created(fut: Future[Any]) -> None:
            if fut.cancelled() or loop.is_closed():
                return
            exc = fut.exception()
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (exiting)
                if exc is None:
                    w.recipe = fut.result()
                    if w.stopped:
                        loop.call_soon_threadsafe(self._stop, w)
                    elif kind == "children" and w.recipe._stopped:
                        # kazoo gives up silently when the parent znode does not exist yet.
                        loop.call_soon_threadsafe(deliver, [])
                        loop.call_soon_threadsafe(loop.call_later, _RETRY_DELAY_S, retry)
                    return
                log.warning("zk_watch_create_failed", path=path, error=repr(exc))
                loop.call_soon_threadsafe(loop.call_later, _RETRY_DELAY_S, retry)

        def retry() -> None:
            if not w.stopped and not self._closed:
                self._start(kind, path, w, callback, pooled)

        try:
            self._executor.submit(create).add_done_callback(created)
        except RuntimeError:  # executor shut down
            pass


class _DaemonPool:
    """A few worker threads that never delay the process's exit: creating a watch blocks on
    ZooKeeper, and an exiting process joins ``ThreadPoolExecutor`` workers, so a worker stuck on
    an unreachable ZooKeeper would hold a stopped service for as long as kazoo retries."""

    def __init__(self, threads: int, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._threads = threads
        self._closed = False
        for i in range(threads):
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True).start()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        if self._closed:
            raise RuntimeError("pool shut down")
        fut: Future[Any] = Future()
        self._queue.put((fut, fn))
        return fut

    def shutdown(self) -> None:
        """Cancel what has not started; workers end after their current job."""
        self._closed = True
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in range(self._threads):
            self._queue.put(None)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            fut, fn = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the future's owner
                fut.set_exception(exc)
