"""ZooKeeper side of a storage node: the cluster id and the ephemeral ``/brokers/ids/<id>``."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Callable

from services.common.logging import get_logger
from services.common.zk import layout
from services.common.zk.client import AsyncZk, NodeExistsError

log = get_logger("storage.registration")

RETRY_BACKOFF_S = 0.5
EXPIRY_GRACE_S = 2.0  # ZooKeeper expires sessions on tick boundaries, a little after the timeout


class StartupError(RuntimeError):
    """The node must not start; the message is one readable line."""


def new_cluster_id() -> str:
    """Kafka's cluster id: URL-safe base64 of a random UUID, no padding (22 characters)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cid.startswith("-"):  # keep ids usable as command-line arguments
            return cid


async def get_or_create_cluster_id(zk: AsyncZk) -> str:
    """Read ``/cluster/id``, creating it if absent; a concurrent creator wins and is read back."""
    existing = await zk.get_or_none(layout.CLUSTER_ID)
    if existing is None:
        candidate = new_cluster_id()
        try:
            await zk.create(layout.CLUSTER_ID, layout.cluster_id_json(candidate), makepath=True)
            log.info("created cluster id", cluster_id=candidate)
            return candidate
        except NodeExistsError:
            existing = await zk.get(layout.CLUSTER_ID)
    data = layout.loads(existing[0]) or {}
    cid = data.get("id")
    if not isinstance(cid, str) or not cid:
        raise StartupError(f"{layout.CLUSTER_ID} in ZooKeeper holds no cluster id: {existing[0]!r}")
    return cid


class BrokerRegistrar:
    """Keeps ``/brokers/ids/<id>`` registered for as long as the node runs.

    At start, a node left by an old session of ours (e.g. after kill -9) is waited out, up to
    the session timeout plus a small grace.
    After a session loss (kazoo LOST), the node is created again once connected.
    """

    def __init__(
        self,
        zk: AsyncZk,
        broker_id: int,
        registration: Callable[[], layout.BrokerRegistration],
        session_timeout_ms: int,
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.path = layout.broker_path(broker_id)
        self._registration = registration
        self._session_timeout_s = session_timeout_ms / 1000.0
        self.registered = False
        self._stopping = False
        self._session_lost = False
        self._repair: asyncio.Task[None] | None = None
        zk.on_state(self._on_state)

    async def register(self) -> None:
        """Create the ephemeral node; raise StartupError if another session keeps holding it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._session_timeout_s + EXPIRY_GRACE_S
        waited = False
        while True:
            if await self._try_create():
                return
            if loop.time() >= deadline:
                raise StartupError(
                    f"broker.id {self.broker_id} is already registered at {self.path} by another "
                    f"live ZooKeeper session (is another storage node running with this id?)"
                )
            if not waited:
                log.info(
                    "broker id registered by an older session, waiting for it to expire",
                    path=self.path,
                    timeout_s=self._session_timeout_s,
                )
                waited = True
            await asyncio.sleep(min(RETRY_BACKOFF_S, max(deadline - loop.time(), 0.01)))

    async def _try_create(self) -> bool:
        try:
            await self.zk.create(self.path, self._registration().to_json(), ephemeral=True)
        except NodeExistsError:
            found = await self.zk.exists(self.path)
            if found is None or found.ephemeralOwner != self.zk.session_id:
                return False
        self.registered = True
        log.info("registered broker", path=self.path, session_id=self.zk.session_id)
        return True

    def _on_state(self, state: str) -> None:
        if self._stopping:
            return
        if state == "LOST":
            self.registered = False
            self._session_lost = True
            log.warning("ZooKeeper session lost; broker registration is gone")
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
                log.info("re-registered broker after session loss", path=self.path)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("re-registration failed, retrying", error=repr(exc))
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def deregister(self) -> None:
        self._stopping = True
        if self._repair is not None and not self._repair.done():
            self._repair.cancel()
            await asyncio.gather(self._repair, return_exceptions=True)
        if not self.registered:
            return
        self.registered = False
        try:
            stat = await self.zk.exists(self.path)
            if stat is not None and stat.ephemeralOwner == self.zk.session_id:
                await self.zk.delete(self.path, version=stat.version)
                log.info("deregistered broker", path=self.path)
        except Exception as exc:  # the session ends right after anyway
            log.warning("deregistration failed", error=repr(exc))
