"""Replication of one storage node: fetchers for what it follows, ISR changes for what it leads."""

from __future__ import annotations

from services.common.zk.client import AsyncZk
from services.storage.replica_manager import ReplicaManager
from services.storage.replication.endpoints import BrokerAddresses, GrpcEndpoints
from services.storage.replication.fetcher import FetcherConfig
from services.storage.replication.isr import IsrManager, ZkIsrStore
from services.storage.replication.manager import ReplicaFetcherManager
from services.storage.settings import StorageSettingsBase


def fetcher_config(settings: StorageSettingsBase) -> FetcherConfig:
    return FetcherConfig(
        broker_id=settings.broker_id,
        max_wait_ms=settings.replica_fetch_wait_max_ms,
        min_bytes=settings.replica_fetch_min_bytes,
        max_bytes=settings.replica_fetch_max_bytes,
        response_max_bytes=settings.replica_fetch_response_max_bytes,
        backoff_ms=settings.replica_fetch_backoff_ms,
        request_timeout_ms=settings.replica_socket_timeout_ms,
    )


class Replication:
    """Creates the fetchers and the ISR manager and attaches them to the replica manager."""

    def __init__(self, zk: AsyncZk, rm: ReplicaManager, settings: StorageSettingsBase) -> None:
        self.rm = rm
        self.addresses = BrokerAddresses(zk, on_change=self._address_changed)
        self.fetchers = ReplicaFetcherManager(
            rm, GrpcEndpoints(self.addresses), fetcher_config(settings)
        )
        self.isr = IsrManager(rm, ZkIsrStore(zk))
        rm.attach_replication(self.fetchers, self.isr)

    def _address_changed(self, broker_id: int) -> None:
        self.fetchers.wake(broker_id)

    async def shrink_isrs(self) -> None:
        """The periodic ISR expiration check (every replica.lag.time.max.ms / 2)."""
        self.isr.maybe_shrink_all()

    async def close(self) -> None:
        await self.fetchers.close()
        await self.isr.close()
