"""The shards this coordinator owns, following the controller's shard map.

On every metadata change the owned set is reconciled with ``/kafka-py/group-coordinators/shards``:
a shard newly placed here is loaded (``ShardLog.load``: replay, then fence) and then served; a
shard placed elsewhere, or whose epoch moved on, is resigned at once (pending joins answer
NOT_COORDINATOR). Losing the ZooKeeper session resigns everything: the controller may already
have moved the shards. Kafka logs these as "Elected as the group coordinator for partition N" /
"Resigned as the group coordinator for partition N".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.metadata_cache import MetadataCache
from services.common.storage_client import StorageClients
from services.common.zk.layout import ShardOwner, group_partition
from services.group_coordinator.config import GroupConfig
from services.group_coordinator.groups import GroupShard
from services.group_coordinator.metrics import CoordinatorMetrics
from services.group_coordinator.replay import ShardReplay
from services.group_coordinator.settings import GroupCoordinatorSettings
from services.group_coordinator.shard_log import ShardFencedError, ShardLog

log = get_logger("group_coordinator.shards")

LOAD_RETRY_S = 0.5
SETTLE_POLL_S = 0.01


@dataclass(slots=True)
class _Owned:
    owner: ShardOwner
    log: ShardLog
    groups: GroupShard | None = None  # set once loaded
    task: asyncio.Task[None] | None = None
    loaded_at: float = field(default=0.0)


class ShardManager:
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
        """``registration`` gives the czxid of this process's registration znode (0 while not
        registered); the shard map stamps each owner with it, so entries made for an earlier
        registration of this node id (a previous process, a lost session) are not taken.

        Offsets of deleted topics are removed (Kafka's onPartitionsDeleted): from every loaded
        shard when the metadata cache sees a topic go (``on_topic_removed``), and from a shard just loaded for the
        topics that no longer exist, which covers deletions no coordinator saw while the shard
        was unowned. ``topic_exists`` asks ZooKeeper, so a topic this node's cache has not
        caught up with yet is never taken for a deleted one (None: no load-time sweep)."""
        self.node_id = node_id
        self._registration = registration
        self._cache = cache
        self._storage = storage
        self._settings = settings
        self._config = config
        self._metrics = metrics
        self._owned: dict[int, _Owned] = {}
        self._logs: dict[int, ShardLog] = {}  # kept while the epoch holds (sequence state)
        self._active = True
        self._topic_exists = topic_exists

    # ---- lookups --------------------------------------------------------------------------
    def partition_of(self, group_id: str) -> int | None:
        """The shard of ``group_id`` (None while no shard map exists)."""
        shard_map = self._cache.shard_map
        if shard_map is None or shard_map.partitions <= 0:
            return None
        return group_partition(group_id, shard_map.partitions)

    def shard(self, partition: int | None) -> GroupShard | ErrorCode:
        """The loaded shard, or NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        owned = self._owned.get(partition) if partition is not None else None
        if owned is None:
            return ErrorCode.NOT_COORDINATOR
        if owned.groups is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return owned.groups

    async def settle(self, group_ids: list[str], timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until the shards of ``group_ids`` that the shard map
        places here are taken and loaded, so a request arriving just after a placement or
        during a load is served instead of bouncing with NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS (loads take milliseconds; clients back off much longer)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for group_id in group_ids:
            partition = self.partition_of(group_id)
            if partition is None:
                continue
            while (remaining := deadline - loop.time()) > 0:
                owned = self._owned.get(partition)
                if owned is not None:
                    if owned.groups is None and owned.task is not None and not owned.task.done():
                        await asyncio.wait([owned.task], timeout=remaining)
                    break
                if not self._still_placed_here_now(partition):
                    break
                await asyncio.sleep(min(SETTLE_POLL_S, remaining))  # reconcile() takes it soon

    def _still_placed_here_now(self, partition: int) -> bool:
        shard_map = self._cache.shard_map
        owner = shard_map.shards.get(partition) if shard_map is not None else None
        return owner is not None and self._is_mine(owner) and self._active

    def _is_mine(self, owner: ShardOwner) -> bool:
        """Placed on this node id, for this registration (maps without sessions: any)."""
        if owner.owner != self.node_id:
            return False
        if self._registration is None or owner.session == 0:
            return True
        return owner.session == self._registration()

    def loaded_shards(self) -> list[GroupShard]:
        return [o.groups for _, o in sorted(self._owned.items()) if o.groups is not None]

    @property
    def owned(self) -> list[int]:
        return sorted(self._owned)

    # ---- following the shard map ----------------------------------------------------------
    async def run(self) -> None:
        """Reconcile now and after every metadata change, until cancelled."""
        while True:
            changed = asyncio.ensure_future(self._cache.changed())
            try:
                self.reconcile()
                await changed
            finally:
                changed.cancel()

    def reconcile(self) -> None:
        if not self._active:
            return
        shard_map = self._cache.shard_map
        wanted = {
            p: s for p, s in (shard_map.shards.items() if shard_map else ()) if self._is_mine(s)
        }
        for p, owned in list(self._owned.items()):
            if wanted.get(p) != owned.owner:
                self._resign(p, "placed elsewhere" if p not in wanted else "new epoch")
        for p, owner in wanted.items():
            if p not in self._owned:
                self._take(p, owner)
        self._metrics.shards.set(len(self._owned))

    def resign_all(self, reason: str) -> None:
        for p in list(self._owned):
            self._resign(p, reason)
        self._metrics.shards.set(0)

    def suspend(self) -> None:
        """ZooKeeper session lost: serve nothing until it is back."""
        self._active = False
        self.resign_all("ZooKeeper session lost")

    def resume(self) -> None:
        self._active = True
        self.reconcile()

    async def stop(self) -> None:
        self._active = False
        tasks = [o.task for o in self._owned.values() if o.task is not None]
        self.resign_all("shutdown")
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- internals ------------------------------------------------------------------------
    def _take(self, partition: int, owner: ShardOwner) -> None:
        shard_log = self._logs.get(partition)
        if shard_log is None or shard_log.owner != owner or shard_log.fenced:
            shard_log = ShardLog(
                partition,
                owner,
                self._cache,
                self._storage,
                commit_timeout_ms=self._settings.offsets_commit_timeout_ms,
                request_timeout_ms=self._settings.request_timeout_ms,
                load_buffer_bytes=self._settings.offsets_load_buffer_size,
                on_fenced=self._on_fenced,
            )
            self._logs[partition] = shard_log
        owned = _Owned(owner, shard_log)
        self._owned[partition] = owned
        owned.task = asyncio.get_running_loop().create_task(
            self._load(partition, owned), name=f"load-shard-{partition}"
        )

    async def _load(self, partition: int, owned: _Owned) -> None:
        started = time.monotonic()
        while self._owned.get(partition) is owned:
            replay = ShardReplay()
            try:
                await owned.log.load(replay)
            except ShardFencedError as exc:
                log.warning("shard_fenced_while_loading", partition=partition, error=str(exc))
                return
            except KafkaError as exc:
                log.warning(
                    "shard_load_retry", partition=partition, error=exc.code.name, detail=str(exc)
                )
                await asyncio.sleep(LOAD_RETRY_S)
                continue
            if self._owned.get(partition) is not owned:
                return
            snapshot = replay.snapshot()
            groups = GroupShard(partition, owned.log, self._config, coordinator_id=self.node_id)
            groups.load(snapshot)
            owned.groups = groups
            groups.tasks.spawn(self._remove_offsets_of_deleted_topics(groups))
            owned.loaded_at = time.monotonic()
            seconds = owned.loaded_at - started
            self._metrics.load_seconds.observe(seconds)
            log.info(
                f"Elected as the group coordinator for partition {partition}",
                partition=partition,
                epoch=owned.owner.epoch,
                groups=len(snapshot.groups),
                offsets=sum(len(o) for o in snapshot.offsets.values()),
                load_ms=round(seconds * 1000, 1),
            )
            return

    # ---- deleted topics ---------------------------------------------------------------------
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

    def _resign(self, partition: int, reason: str) -> None:
        owned = self._owned.pop(partition)
        if owned.task is not None and not owned.task.done():
            owned.task.cancel()
        if owned.groups is not None:
            owned.groups.resign()
        if self._logs.get(partition) is owned.log and (
            owned.log.fenced or not self._still_placed_here(partition, owned.owner)
        ):
            del self._logs[partition]
        log.info(
            f"Resigned as the group coordinator for partition {partition}",
            partition=partition,
            epoch=owned.owner.epoch,
            reason=reason,
        )

    def _still_placed_here(self, partition: int, owner: ShardOwner) -> bool:
        shard_map = self._cache.shard_map
        return shard_map is not None and shard_map.shards.get(partition) == owner

    def _on_fenced(self, partition: int) -> None:
        owned = self._owned.get(partition)
        if owned is not None and owned.log.fenced:
            self._resign(partition, "fenced by a newer owner")
            # The shard map may still place the shard here: storage also fences an owner whose
            # producer state it lost (UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER), and no
            # metadata change follows that. Look again after a pause; a real newer owner is in
            # the map by then, and a retake's own fence write is refused by storage anyway.
            asyncio.get_running_loop().call_later(LOAD_RETRY_S, self.reconcile)
