"""An ephemeral znode kept registered for as long as a process runs (storage brokers under
``/brokers/ids``, gateways and group coordinators under ``/kafka-py/...``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kazoo.exceptions import KazooException

from services.common.logging import get_logger
from services.common.zk.client import AsyncZk, NodeExistsError

log = get_logger("zk.registration")

RETRY_BACKOFF_S = 0.5
EXPIRY_GRACE_S = 2.0  # ZooKeeper expires sessions on tick boundaries, a little after the timeout
DEREGISTER_TIMEOUT_S = 2.0  # a stop while ZooKeeper is unreachable leaves the node to the expiry


class RegistrationError(RuntimeError):
    """The id is held by another live session; the message is one readable line."""


class EphemeralRegistrar:
    """Keeps the ephemeral ``path`` registered for as long as the process runs.

    At start, a node left by an old session of ours (e.g. after kill -9) is waited out, up to
    the session timeout plus a small grace once ZooKeeper answers. Connection loss and session
    expiry are retried until the node exists or :meth:`deregister` is called: a process never
    exits because ZooKeeper went away while it registered.
    After a session loss (kazoo LOST), the node is created again once connected.
    """

    def __init__(
        self,
        zk: AsyncZk,
        path: str,
        data: Callable[[], bytes],
        session_timeout_ms: int,
        what: str,
        on_registered: Callable[[], None] | None = None,
    ) -> None:
        self.zk = zk
        self.path = path
        self.what = what  # e.g. "broker.id 3", for messages
        self._data = data
        self._on_registered = on_registered
        self._session_timeout_s = session_timeout_ms / 1000.0
        self.registered = False
        self.czxid = (
            0  # of the node this process created (0 until registered); a new one per session
        )
        self._stopping = False
        self._session_lost = False
        self._repair: asyncio.Task[None] | None = None
        zk.on_state(self._on_state)

    async def register(self) -> None:
        """Create the ephemeral node, retrying through connection loss and session expiry until
        it exists; raise RegistrationError if another session keeps holding it (or when
        :meth:`deregister` was called meanwhile)."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None  # counted from when ZooKeeper showed the node held
        waited = False
        while not self._stopping:
            try:
                if await self._try_create():
                    return
            except KazooException as exc:
                # ConnectionLoss, SessionExpired, OperationTimeout...: the holder's expiry is
                # ZooKeeper's business, so count the wait again once it answers.
                deadline = None
                log.warning(
                    "registration failed, retrying", path=self.path, error=type(exc).__name__
                )
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            now = loop.time()
            if deadline is None:
                deadline = now + self._session_timeout_s + EXPIRY_GRACE_S
            elif now >= deadline:
                raise RegistrationError(
                    f"{self.what} is already registered at {self.path} by another live "
                    f"ZooKeeper session (is another process running with this id?)"
                )
            if not waited:
                log.info(
                    "id registered by an older session, waiting for it to expire",
                    path=self.path,
                    timeout_s=self._session_timeout_s,
                )
                waited = True
            await asyncio.sleep(min(RETRY_BACKOFF_S, max(deadline - now, 0.01)))
        raise RegistrationError(f"{self.what}: stopped before {self.path} was registered")

    async def _try_create(self) -> bool:
        try:
            await self.zk.create(self.path, self._data(), ephemeral=True)
        except NodeExistsError:
            pass
        found = await self.zk.exists(self.path)
        if found is None or found.ephemeralOwner != self.zk.session_id:
            return False
        self.czxid = found.czxid
        self.registered = True
        log.info("registered", path=self.path, session_id=self.zk.session_id, czxid=self.czxid)
        if self._on_registered is not None:
            self._on_registered()
        return True

    def _on_state(self, state: str) -> None:
        if self._stopping:
            return
        if state == "LOST":
            if self.registered:  # a register() still running retries in the new session itself
                self._session_lost = True
            self.registered = False
            self.czxid = 0
            log.warning("ZooKeeper session lost; registration is gone", path=self.path)
        elif state == "SUSPENDED":
            log.warning("ZooKeeper connection suspended")
        elif state == "CONNECTED" and self._session_lost:
            if self._repair is None or self._repair.done():
                self._repair = asyncio.ensure_future(self._reregister())

    async def _reregister(self) -> None:
        """Create the node again in the new session (retrying while the connection flaps)."""
        while not self._stopping:
            try:
                await self.register()
                self._session_lost = False
                log.info("re-registered after session loss", path=self.path)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("re-registration failed, retrying", error=repr(exc))
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def deregister(self) -> None:
        """Delete the node if this session holds it; bounded: when ZooKeeper does not answer in
        time the node goes with the session."""
        self._stopping = True
        if self._repair is not None and not self._repair.done():
            self._repair.cancel()
            await asyncio.gather(self._repair, return_exceptions=True)
        if not self.registered:
            return
        self.registered = False
        if not self.zk.connected:
            log.warning("not deregistered: ZooKeeper is unreachable", path=self.path)
            return
        try:
            async with asyncio.timeout(DEREGISTER_TIMEOUT_S):
                stat = await self.zk.exists(self.path)
                if stat is not None and stat.ephemeralOwner == self.zk.session_id:
                    await self.zk.delete(self.path, version=stat.version)
                    log.info("deregistered", path=self.path)
        except Exception as exc:  # the session ends right after anyway
            log.warning("deregistration failed", error=repr(exc))
