"""ZooKeeper side of a storage node: the cluster id and the ephemeral ``/brokers/ids/<id>``."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable

from services.common.logging import get_logger
from services.common.zk import layout
from services.common.zk.client import AsyncZk, NodeExistsError
from services.common.zk.registration import EphemeralRegistrar, RegistrationError

log = get_logger("storage.registration")


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


class BrokerRegistrar(EphemeralRegistrar):
    """Keeps ``/brokers/ids/<id>`` registered for as long as the node runs."""

    def __init__(
        self,
        zk: AsyncZk,
        broker_id: int,
        registration: Callable[[], layout.BrokerRegistration],
        session_timeout_ms: int,
    ) -> None:
        super().__init__(
            zk,
            layout.broker_path(broker_id),
            lambda: registration().to_json(),
            session_timeout_ms,
            f"broker.id {broker_id}",
        )
        self.broker_id = broker_id

    async def register(self) -> None:
        try:
            await super().register()
        except RegistrationError as exc:
            raise StartupError(str(exc)) from None
