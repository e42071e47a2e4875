"""The ``__consumer_offsets`` shards this group coordinator owns (``ShardManager`` of common,
with ``GroupShard`` as a shard's state).

Offsets of deleted topics are removed (Kafka's onPartitionsDeleted): from every loaded shard
when the metadata cache sees a topic go (``on_topic_removed``), and from a shard just loaded for
the topics that no longer exist, which covers deletions no coordinator saw while the shard was
unowned. ``topic_exists`` asks ZooKeeper, so a topic this node's cache has not caught up with yet
is never taken for a deleted one (None: no load-time sweep).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from services.common.coordinator.markers import MarkerWriter
from services.common.coordinator.shard_log import ShardLog
from services.common.coordinator.shard_manager import ShardLogSettings
from services.common.coordinator.shard_manager import ShardManager as CommonShardManager
from services.common.errors import ErrorCode
from services.common.internal_topics.consumer_offsets import group_metadata_key
from services.common.logging import get_logger
from services.common.metadata_cache import MetadataCache
from services.common.storage_client import StorageClients
from services.common.zk.layout import GROUP
from services.group_coordinator.config import GroupConfig
from services.group_coordinator.groups import GroupShard
from services.group_coordinator.metrics import CoordinatorMetrics
from services.group_coordinator.replay import ShardReplay
from services.group_coordinator.settings import GroupCoordinatorSettings

log = get_logger("group_coordinator.shards")

MARKER_RETRY_BACKOFF_MS = 100
MARKER_WRITE_TIMEOUT_S = 10.0


class ShardManager(CommonShardManager[GroupShard, ShardReplay]):
    def __init__(
        self,
        node_id: int,
        cache: MetadataCache,
        storage: StorageClients,
        settings: GroupCoordinatorSettings,
        config: GroupConfig,
        metrics: CoordinatorMetrics,
        registration: Callable[[], int] | None = None,
        topic_exists: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        super().__init__(
            GROUP,
            node_id,
            cache,
            storage,
            ShardLogSettings(
                commit_timeout_ms=settings.offsets_commit_timeout_ms,
                request_timeout_ms=settings.request_timeout_ms,
                load_buffer_bytes=settings.offsets_load_buffer_size,
            ),
            metrics,
            fence_key=group_metadata_key(""),  # group "" cannot exist
            registration=registration,
        )
        self._config = config
        self._topic_exists = topic_exists
        self._markers = MarkerWriter(cache, storage, MARKER_RETRY_BACKOFF_MS)

    async def write_txn_marker(
        self, partition: int, producer_id: int, epoch: int, coordinator_epoch: int, commit: bool
    ) -> ErrorCode:
        """A transaction coordinator's marker for an owned ``__consumer_offsets`` partition
        (Kafka: WriteTxnMarkers to the partition's broker, which then tells its group
        coordinator): written through the partition's leader, then the producer's
        transactional offsets are applied (COMMIT) or dropped (ABORT). Retriable errors: the
        transaction coordinator sends it again."""
        shard = self.shard(partition)
        if isinstance(shard, ErrorCode):
            return shard
        deadline = asyncio.get_running_loop().time() + MARKER_WRITE_TIMEOUT_S

        def live() -> bool:
            return not shard.resigned and asyncio.get_running_loop().time() < deadline

        written = await self._markers.write(
            producer_id, epoch, coordinator_epoch, commit, [(GROUP.topic, partition)], live
        )
        if not written:
            if shard.resigned:
                return ErrorCode.NOT_COORDINATOR
            if asyncio.get_running_loop().time() >= deadline:
                return ErrorCode.REQUEST_TIMED_OUT
            return ErrorCode.INVALID_PRODUCER_EPOCH  # storage fenced the marker
        applied = shard.complete_txn(producer_id, commit)
        log.info(
            "transaction_offsets_completed",
            partition=partition,
            producer_id=producer_id,
            commit=commit,
            offsets=applied,
        )
        return ErrorCode.NONE

    def new_replay(self) -> ShardReplay:
        return ShardReplay()

    def build(self, partition: int, shard_log: ShardLog, replay: ShardReplay) -> GroupShard:
        groups = GroupShard(partition, shard_log, self._config, coordinator_id=self.node_id)
        groups.load(replay.snapshot())
        return groups

    def loaded_fields(self, replay: ShardReplay) -> dict[str, Any]:
        snapshot = replay.snapshot()
        return {
            "groups": len(snapshot.groups),
            "offsets": sum(len(o) for o in snapshot.offsets.values()),
            "pending_txn_offsets": sum(
                len(o) for g in snapshot.pending_txn.values() for o in g.values()
            ),
        }

    def on_loaded(self, partition: int, state: GroupShard) -> None:
        state.tasks.spawn(self._remove_offsets_of_deleted_topics(state))

    def on_topic_removed(self, topic: str) -> None:
        """A topic left the metadata cache (its deletion completed)."""
        for shard in self.loaded_shards():
            shard.tasks.spawn(shard.offsets.remove_topics({topic}))

    async def _remove_offsets_of_deleted_topics(self, shard: GroupShard) -> None:
        if self._topic_exists is None:
            return
        unknown = sorted(shard.offsets.topics() - set(self._cache.topics))
        gone: list[str] = []
        for topic in unknown:
            try:
                if not await self._topic_exists(topic):
                    gone.append(topic)
            except Exception as exc:  # noqa: BLE001 - kept for the next load
                log.warning("deleted_topic_check_failed", topic=topic, error=repr(exc))
                return
        if gone:
            await shard.offsets.remove_topics(gone)
