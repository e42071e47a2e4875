"""Which partitions this node follows, from which leader (Kafka's ReplicaFetcherManager).

One :class:`ReplicaFetcher` per leader broker, created when the first partition led by that
broker is followed and stopped when its last one goes (the partition became leader here, moved
to another leader, was stopped or deleted).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from services.common.logging import get_logger
from services.storage.partition import Partition, TopicPartition
from services.storage.replica_manager import ReplicaManager
from services.storage.replication.endpoints import EndpointProvider
from services.storage.replication.fetcher import FetcherConfig, ReplicaFetcher

log = get_logger("storage.replication.manager")


class ReplicaFetcherManager:
    def __init__(
        self, rm: ReplicaManager, endpoints: EndpointProvider, config: FetcherConfig
    ) -> None:
        self.rm = rm
        self.endpoints = endpoints
        self.config = config
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[TopicPartition, int] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._closed = False

    def follow(self, p: Partition) -> None:
        """(Re)start following ``p`` from its current leader and epoch (truncation first)."""
        if self._leader_of.get(p.key) != p.leader_id:
            self._remove(p.key)
        if self._closed or p.leader_id < 0 or p.leader_id == self.rm.broker_id:
            self._remove(p.key)
            return
        fetcher = self.fetchers.get(p.leader_id)
        if fetcher is None:
            fetcher = self.fetchers[p.leader_id] = ReplicaFetcher(
                p.leader_id, self.rm, self.endpoints, self.config
            )
            fetcher.start()
            log.info("started replica fetcher", leader=p.leader_id)
        fetcher.add(p)
        self._leader_of[p.key] = p.leader_id

    def unfollow(self, keys: Iterable[TopicPartition]) -> None:
        for key in keys:
            self._remove(key)

    def is_following(self, key: TopicPartition) -> bool:
        return key in self._leader_of

    def leader_of(self, key: TopicPartition) -> int | None:
        return self._leader_of.get(key)

    def leader_log_end_offset(self, key: TopicPartition) -> int:
        leader = self._leader_of.get(key)
        fetcher = self.fetchers.get(leader) if leader is not None else None
        state = fetcher.states.get(key) if fetcher is not None else None
        return state.leader_log_end_offset if state is not None else -1

    def log_start_moved(self, keys: Iterable[TopicPartition]) -> None:
        for key in keys:
            leader = self._leader_of.get(key)
            fetcher = self.fetchers.get(leader) if leader is not None else None
            if fetcher is not None:
                fetcher.touch(key)

    def max_lag(self) -> int:
        return max((f.max_lag() for f in self.fetchers.values()), default=0)

    def wake(self, leader_id: int) -> None:
        """Retry the leader now (its address changed)."""
        fetcher = self.fetchers.get(leader_id)
        if fetcher is not None:
            fetcher.wake()

    def _remove(self, key: TopicPartition) -> None:
        leader = self._leader_of.pop(key, None)
        if leader is None:
            return
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            return
        fetcher.remove(key)
        if fetcher.empty:
            del self.fetchers[leader]
            task = fetcher.cancel()
            if task is not None:
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)
            log.info("stopped idle replica fetcher", leader=leader)

    async def close(self) -> None:
        """Stop every fetcher (before the logs are closed)."""
        self._closed = True
        self.unfollow(list(self._leader_of))
        if self._stopping:
            await asyncio.gather(*list(self._stopping), return_exceptions=True)
        await self.endpoints.close()
