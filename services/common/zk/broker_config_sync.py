"""Feeds a ``BrokerConfigStore`` from ``/config/brokers/*`` (children and data watches).

Every service that applies dynamic broker configs (storage nodes, gateways) runs one; the
controller writes the znodes (and Kafka's ``/config/changes`` notification, for Kafka's tools).
Watching the znodes themselves, not the notifications, gives the same result without a
sequence to track, and a restarted service reads them at start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from services.common.broker_config_store import BrokerConfigStore
from services.common.logging import get_logger
from services.common.zk import layout
from services.common.zk.client import AsyncZk, ZnodeStat
from services.common.zk.watches import WatchSet

log = get_logger("broker_config")


class ZkBrokerConfigSync:
    def __init__(self, zk: AsyncZk, store: BrokerConfigStore) -> None:
        self._store = store
        self._watches = WatchSet(zk, threads=2)
        self._known: set[str] = set()

    async def start(self, load_timeout_s: float = 30.0) -> None:
        """Watch every entity; wait (bounded) until each one was read once."""
        self._watches.children(layout.CONFIG_BROKERS, self._on_children)
        try:
            await asyncio.wait_for(self._watches.wait_all_fired(), load_timeout_s)
        except TimeoutError:
            log.warning("broker config initial load timed out", pending=self._watches.unfired)
        self._store.loaded = True

    def stop(self) -> None:
        self._watches.stop_all()

    def _on_children(self, children: list[str]) -> None:
        names = set(children)
        for entity in names - self._known:
            self._watches.data(layout.broker_config_path(entity), self._bind(entity))
        for entity in self._known - names:
            self._watches.stop("data", layout.broker_config_path(entity))
            self._store.apply(entity, None)
        self._known = names

    def _bind(self, entity: str) -> Callable[[bytes | None, ZnodeStat | None], None]:
        def on_data(data: bytes | None, stat: ZnodeStat | None) -> None:
            self._store.apply(entity, data)

        return on_data
