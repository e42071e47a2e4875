"""asyncio wrapper around kazoo.

kazoo runs its own threads; every call here returns to the event loop through
``call_soon_threadsafe``, and watch callbacks are delivered on the loop too, so
service code never blocks the loop on ZooKeeper.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.protocol.states import ZnodeStat

from services.common.logging import get_logger
from services.common.settings import ServiceSettings
from services.common.zk.layout import PERSISTENT_PATHS
from services.common.zk.multiread import MultiRead
from services.common.zk.security import (
    NO_SECURITY,
    SECURED_ROOTS,
    ZkSecurity,
    kazoo_client,
    tls_error,
    zk_security,
)

__all__ = [
    "AsyncZk",
    "NodeExistsError",
    "NoNodeError",
    "ZnodeStat",
    "KazooState",
    "ZkConnectError",
]

StateCallback = Callable[[str], None]

STOP_TIMEOUT_S = 3.0  # closing a session normally takes milliseconds

log = get_logger("zk.client")

#: what a ZooKeeper call raises while the ensemble is away (paused, restarting, partitioned):
#: a periodic job meeting one retries at its next run instead of logging a traceback
ZK_UNAVAILABLE = (ConnectionLoss, SessionExpiredError, ConnectionClosedError, OperationTimeoutError)


#: znodes per multiRead request of ``get_many`` (a window of partition states is ~100 KB)
MULTI_READ_WINDOW = 500


#: how long ``start`` waits for a first session unless told (zookeeper.connection.timeout.ms)
DEFAULT_CONNECT_TIMEOUT_S = 15.0


class ZkConnectError(RuntimeError):
    """No session within the connection timeout at start (one readable line: the address, the
    timeout and, over TLS, the last handshake failure). Kafka's broker exits on it too."""


class AsyncZk:
    """One ZooKeeper session used from asyncio code."""

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18000,
        security: ZkSecurity = NO_SECURITY,
        connection_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        self.connect_string = connect
        self.security = security
        self.connection_timeout_s = connection_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self.client = kazoo_client(
            connect,
            security,
            timeout=session_timeout_ms / 1000.0,
            # Cap the reconnect backoff: kazoo's default grows towards an hour.
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2},
        )
        self._state_callbacks: list[StateCallback] = []
        self.client.add_listener(self._on_state)
        #: ``get_many`` through multiRead; False once a ZooKeeper before 3.6 refused it
        self.multi_read = True

    @classmethod
    def for_service(cls, settings: ServiceSettings) -> AsyncZk:
        """The session of a service: its connect string, timeouts, digest credentials,
        ``zookeeper.set.acl`` and TLS (security.py); ConfigError on an unusable file."""
        connection_ms = settings.zookeeper_connection_timeout_ms
        return cls(
            settings.zookeeper_connect,
            settings.zookeeper_session_timeout_ms,
            zk_security(settings),
            connection_ms / 1000.0
            if connection_ms is not None
            else max(DEFAULT_CONNECT_TIMEOUT_S, settings.zookeeper_session_timeout_ms / 1000.0),
        )

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "AsyncZk.start() first"
        return self._loop

    # ---- lifecycle ------------------------------------------------------------------
    async def start(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 - kazoo's
        """Connect (kazoo blocks up to ``timeout``, by default the connection timeout);
        ZkConnectError when no session came. Cancellable: a process stopped while ZooKeeper
        does not answer need not wait for the attempt (it runs on a daemon thread)."""
        self._loop = asyncio.get_running_loop()
        timeout = self.connection_timeout_s if timeout is None else timeout
        hosts, _, chroot = self.connect_string.partition("/")
        try:
            if chroot:
                await _on_daemon_thread(
                    self._ensure_chroot, hosts, "/" + chroot, timeout, self.security
                )
            await _on_daemon_thread(self.client.start, timeout)
        except self.client.handler.timeout_exception as exc:
            why = tls_error(self.client) or _chroot_tls_error(exc) or "no answer"
            raise ZkConnectError(
                f"cannot connect to ZooKeeper at {self.connect_string} within {timeout:g}s: {why}"
            ) from None

    @staticmethod
    def _ensure_chroot(hosts: str, chroot: str, timeout: float, security: ZkSecurity) -> None:
        base = kazoo_client(hosts, security, timeout=timeout)
        try:
            base.start(timeout)
        except base.handler.timeout_exception as exc:
            exc.tls_error = tls_error(base)  # for the start's error line
            raise
        try:
            base.ensure_path(chroot)
        finally:
            base.stop()
            base.close()

    async def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:  # noqa: ASYNC109
        """Close the session; returns False when it did not close within ``timeout`` seconds.

        kazoo's stop waits for its connection thread, which can sit in a connection attempt
        for a whole session timeout (or longer) while ZooKeeper does not answer. It runs on a
        daemon thread, never on the loop's executor (whose threads an exiting process joins),
        and is abandoned after ``timeout``: the session then ends by expiry, and the process
        can still exit."""
        try:
            await asyncio.wait_for(asyncio.shield(_on_daemon_thread(self._stop_sync)), timeout)
        except TimeoutError:
            log.warning("zookeeper session not closed in time, left to expire", timeout_s=timeout)
            return False
        return True

    def _stop_sync(self) -> None:
        try:
            self.client.stop()
        finally:
            self.client.close()

    @property
    def connected(self) -> bool:
        return bool(self.client.connected)

    @property
    def session_id(self) -> int | None:
        sid = self.client.client_id
        return sid[0] if sid else None

    @property
    def held_session_id(self) -> int | None:
        """The session this client holds, also while disconnected (``session_id`` is None
        then); None before the first connection and after an expiry."""
        sid = self.client._session_id
        return int(sid) if sid else None

    def on_state(self, callback: StateCallback) -> None:
        """Call ``callback("LOST"|"SUSPENDED"|"CONNECTED")`` on the loop when the session changes."""
        self._state_callbacks.append(callback)

    def _on_state(self, state: str) -> None:
        if self._loop is None:
            return
        for cb in list(self._state_callbacks):
            with contextlib.suppress(RuntimeError):  # closed loop: the process is exiting
                self._loop.call_soon_threadsafe(cb, str(state))

    # ---- bridging -------------------------------------------------------------------
    def _bridge(self, async_result: Any) -> asyncio.Future[Any]:
        loop = self.loop
        fut: asyncio.Future[Any] = loop.create_future()

        def _resolve(value: Any, exc: BaseException | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(value)

        def _done(ar: Any) -> None:
            try:
                value, exc = ar.get_nowait(), None
            except BaseException as error:  # noqa: BLE001 - delivered to the awaiting coroutine
                value, exc = None, error
            # an abandoned session (see stop) may answer after the loop closed
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, value, exc)

        async_result.rawlink(_done)
        return fut

    # ---- operations -----------------------------------------------------------------
    async def get(self, path: str) -> tuple[bytes, ZnodeStat]:
        return await self._bridge(self.client.get_async(path))  # type: ignore[no-any-return]

    async def get_or_none(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            return await self.get(path)
        except NoNodeError:
            return None

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]:
        """Read ``paths``; the answers in order, None for a missing znode. MULTI_READ_WINDOW
        znodes per multiRead request (see multiread.py; ~30x less CPU than a request per
        znode), or, from a ZooKeeper before 3.6, pipelined reads with one future for the lot.
        Any other error is raised once the answers of its window are in."""
        out: list[tuple[bytes, ZnodeStat] | None] = []
        for start in range(0, len(paths), MULTI_READ_WINDOW):
            chunk = paths[start : start + MULTI_READ_WINDOW]
            answers: list[Any] | None = None
            if self.multi_read:
                try:
                    answers = await self._bridge(self._multi_read(chunk))
                except UnimplementedError:
                    log.warning("ZooKeeper has no multiRead (before 3.6): one request per znode")
                    self.multi_read = False
            if answers is None:
                answers = await self._get_pipelined(chunk)
            error = next(
                (
                    a
                    for a in answers
                    if isinstance(a, BaseException) and not isinstance(a, NoNodeError)
                ),
                None,
            )
            if error is not None:
                raise error
            out += [None if isinstance(a, BaseException) else a for a in answers]
        return out

    def _multi_read(self, paths: Sequence[str]) -> Any:
        client = self.client
        async_result = client.handler.async_result()
        # kazoo's chroot is normalized ("/a/b", no trailing slash); the paths asked for are
        # absolute and normalized too, so prefixing is a concatenation (kazoo's own
        # _prefix_root normalizes each path again: ~40 % of this read's CPU)
        root = client.chroot or ""
        client._call(MultiRead([root + p for p in paths] if root else paths), async_result)
        return async_result

    async def _get_pipelined(self, paths: Sequence[str]) -> list[Any]:
        """One ``get_async`` per path, one future for the lot (a single loop wake-up); each
        answer is ``(data, stat)`` or the exception of that read."""
        loop = self.loop
        fut: asyncio.Future[list[Any]] = loop.create_future()
        out: list[Any] = [None] * len(paths)
        left = [len(paths)]
        lock = threading.Lock()

        def answer(i: int) -> Callable[[Any], None]:
            def done(ar: Any) -> None:
                try:
                    out[i] = ar.get_nowait()
                except BaseException as error:  # noqa: BLE001 - handed to the caller
                    out[i] = error
                with lock:
                    left[0] -= 1
                    last = left[0] == 0
                if last:
                    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                        loop.call_soon_threadsafe(
                            lambda: None if fut.done() else fut.set_result(out)
                        )

            return done

        for i, path in enumerate(paths):
            self.client.get_async(path).rawlink(answer(i))
        return await fut

    async def get_children(self, path: str) -> list[str]:
        return await self._bridge(self.client.get_children_async(path))  # type: ignore[no-any-return]

    async def exists(self, path: str) -> ZnodeStat | None:
        return await self._bridge(self.client.exists_async(path))  # type: ignore[no-any-return]

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        ar = self.client.create_async(
            path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath
        )
        return await self._bridge(ar)  # type: ignore[no-any-return]

    async def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return await self._bridge(self.client.set_async(path, value, version))  # type: ignore[no-any-return]

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        if recursive:
            await asyncio.to_thread(self.client.delete, path, version, True)
        else:
            await self._bridge(self.client.delete_async(path, version))

    async def ensure_path(self, path: str) -> None:
        await self._bridge(self.client.ensure_path_async(path))

    async def ensure_layout(self) -> None:
        """Create the persistent paths Kafka creates at start (with ``zookeeper.set.acl``, the
        ACL roots too, so nobody else can create them first with an open ACL)."""
        paths = (*PERSISTENT_PATHS, *SECURED_ROOTS) if self.security.set_acl else PERSISTENT_PATHS
        await asyncio.gather(*(self.ensure_path(p) for p in paths))

    async def commit(self, build: Callable[[Any], None]) -> list[Any]:
        """Run a multi-op transaction: ``build(txn)`` adds operations; raises on failure."""
        txn = self.client.transaction()
        build(txn)
        results = await self._bridge(txn.commit_async())
        for r in results:
            if isinstance(r, Exception):
                raise r
        return results  # type: ignore[no-any-return]

    async def sync(self, path: str = "/") -> None:
        await self._bridge(self.client.sync_async(path))

    # ---- watches --------------------------------------------------------------------
    def watch_children(
        self, path: str, callback: Callable[[list[str]], Awaitable[None] | None]
    ) -> None:
        """Call ``callback(children)`` on the loop now and on every change (kazoo ChildrenWatch)."""
        loop = self.loop

        def _fire(children: list[str]) -> None:
            loop.call_soon_threadsafe(_run, callback, children)

        self.client.ChildrenWatch(path, _fire, allow_session_lost=True)

    def watch_data(
        self,
        path: str,
        callback: Callable[[bytes | None, ZnodeStat | None], Awaitable[None] | bool | None],
    ) -> None:
        """Call ``callback(data, stat)`` on the loop now and on every change; data None = no node."""
        loop = self.loop

        def _fire(data: bytes | None, stat: ZnodeStat | None) -> None:
            loop.call_soon_threadsafe(_run, callback, data, stat)

        self.client.DataWatch(path, _fire)


def _chroot_tls_error(exc: BaseException) -> str | None:
    return getattr(exc, "tls_error", None)


def _on_daemon_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """Run blocking kazoo work on a daemon thread: unlike ``asyncio.to_thread`` (whose pool an
    exiting process joins), a thread stuck on an unreachable ZooKeeper never delays an exit."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def finish(value: Any, exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is None:
            done.set_result(value)
        else:
            done.set_exception(exc)

    def run() -> None:
        try:
            value, exc = fn(*args), None
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting coroutine
            value, exc = None, error
        with contextlib.suppress(RuntimeError):  # the loop may be closed by now
            loop.call_soon_threadsafe(finish, value, exc)

    threading.Thread(target=run, name="zk-blocking", daemon=True).start()
    return done


def _run(callback: Callable[..., Any], *args: Any) -> None:
    result = callback(*args)
    if asyncio.iscoroutine(result):
        asyncio.ensure_future(result)
