"""The shards a coordinator owns, following the controller's shard map (group and
transaction coordinators alike; ``CoordinatorKind`` says which).

On every metadata change the owned set is reconciled with ``<kind root>/shards``: a shard newly
placed here is loaded (``ShardLog.load``: replay, then fence) and then served; a shard placed
elsewhere, or whose epoch moved on, is resigned at once (its state's ``resign``: pending
requests answer NOT_COORDINATOR). Losing the ZooKeeper session resigns everything: the
controller may already have moved the shards. Logged as Kafka does: "Elected as the group
coordinator for partition N" / "Resigned as the group coordinator for partition N" (and the
same with "transaction").

A subclass says what a shard's state is: ``new_replay`` (what reads the partition) and
``build`` (the state, from a finished replay).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from prometheus_client import Gauge, Histogram

from services.common.coordinator.shard_log import Replay, ShardFencedError, ShardLog
from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.metadata_cache import MetadataCache
from services.common.storage_client import StorageClients
from services.common.zk.layout import CoordinatorKind, ShardMap, ShardOwner, shard_of

log = get_logger("coordinator.shards")

LOAD_RETRY_S = 0.5
SETTLE_POLL_S = 0.01


class ShardState(Protocol):
    def resign(self) -> None:
        """The shard moved away: answer every parked request NOT_COORDINATOR, write nothing."""
        ...


class ShardMetrics(Protocol):
    shards: Gauge  # shards owned
    load_seconds: Histogram  # time to load one


@dataclass(frozen=True, slots=True)
class ShardLogSettings:
    commit_timeout_ms: int  # offsets.commit.timeout.ms / transaction write timeout
    request_timeout_ms: int  # one storage call while loading
    load_buffer_bytes: int  # offsets.load.buffer.size / transaction.state.log.load.buffer.size


T = TypeVar("T", bound=ShardState)
R = TypeVar("R", bound=Replay)


@dataclass(slots=True)
class _Owned(Generic[T]):
    owner: ShardOwner
    log: ShardLog
    state: T | None = None  # set once loaded
    task: asyncio.Task[None] | None = None
    loaded_at: float = field(default=0.0)


class ShardManager(Generic[T, R]):
    def __init__(
        self,
        kind: CoordinatorKind,
        node_id: int,
        cache: MetadataCache,
        storage: StorageClients,
        log_settings: ShardLogSettings,
        metrics: ShardMetrics,
        fence_key: bytes,
        registration: Callable[[], int] | None = None,
    ) -> None:
        """``registration`` gives the czxid of this process's registration znode (0 while not
        registered); the shard map stamps each owner with it, so entries made for an earlier
        registration of this node id (a previous process, a lost session) are not taken.
        ``fence_key``: see ``ShardLog``."""
        self.kind = kind
        self.node_id = node_id
        self._registration = registration
        self._cache = cache
        self._storage = storage
        self._log_settings = log_settings
        self._metrics = metrics
        self._fence_key = fence_key
        self._owned: dict[int, _Owned[T]] = {}
        self._logs: dict[int, ShardLog] = {}  # kept while the epoch holds (sequence state)
        self._active = True

    # ---- what a shard is (subclasses) -------------------------------------------------------
    def new_replay(self) -> R:
        raise NotImplementedError

    def build(self, partition: int, shard_log: ShardLog, replay: R) -> T:
        """The loaded state of ``partition`` from a finished ``replay``."""
        raise NotImplementedError

    def loaded_fields(self, replay: R) -> dict[str, Any]:
        """What the "Elected as ..." line reports of a load."""
        return {}

    def on_loaded(self, partition: int, state: T) -> None:
        """Called once ``state`` serves ``partition``."""

    # ---- lookups --------------------------------------------------------------------------
    def _shard_map(self) -> ShardMap | None:
        return self._cache.shard_map_of(self.kind)

    def partition_of(self, key: str) -> int | None:
        """The shard of a group / transactional id (None while no shard map exists)."""
        shard_map = self._shard_map()
        if shard_map is None or shard_map.partitions <= 0:
            return None
        return shard_of(key, shard_map.partitions)

    def shard(self, partition: int | None) -> T | ErrorCode:
        """The loaded shard, or NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        owned = self._owned.get(partition) if partition is not None else None
        if owned is None:
            return ErrorCode.NOT_COORDINATOR
        if owned.state is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return owned.state

    async def settle(self, keys: list[str], timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until the shards of ``keys`` that the shard map
        places here are taken and loaded, so a request arriving just after a placement or
        during a load is served instead of bouncing with NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS (loads take milliseconds; clients back off much longer)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for key in keys:
            partition = self.partition_of(key)
            if partition is None:
                continue
            while (remaining := deadline - loop.time()) > 0:
                owned = self._owned.get(partition)
                if owned is not None:
                    if owned.state is None and owned.task is not None and not owned.task.done():
                        await asyncio.wait([owned.task], timeout=remaining)
                    break
                if not self._still_placed_here_now(partition):
                    break
                await asyncio.sleep(min(SETTLE_POLL_S, remaining))  # reconcile() takes it soon

    def _still_placed_here_now(self, partition: int) -> bool:
        shard_map = self._shard_map()
        owner = shard_map.shards.get(partition) if shard_map is not None else None
        return owner is not None and self._is_mine(owner) and self._active

    def _is_mine(self, owner: ShardOwner) -> bool:
        """Placed on this node id, for this registration (maps without sessions: any)."""
        if owner.owner != self.node_id:
            return False
        if self._registration is None or owner.session == 0:
            return True
        return owner.session == self._registration()

    def loaded_shards(self) -> list[T]:
        return [o.state for _, o in sorted(self._owned.items()) if o.state is not None]

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
        shard_map = self._shard_map()
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
            st = self._log_settings
            shard_log = ShardLog(
                self.kind.topic,
                partition,
                owner,
                self._cache,
                self._storage,
                commit_timeout_ms=st.commit_timeout_ms,
                request_timeout_ms=st.request_timeout_ms,
                load_buffer_bytes=st.load_buffer_bytes,
                on_fenced=self._on_fenced,
                fence_key=self._fence_key,
            )
            self._logs[partition] = shard_log
        owned: _Owned[T] = _Owned(owner, shard_log)
        self._owned[partition] = owned
        owned.task = asyncio.get_running_loop().create_task(
            self._load(partition, owned), name=f"load-shard-{partition}"
        )

    async def _load(self, partition: int, owned: _Owned[T]) -> None:
        started = time.monotonic()
        while self._owned.get(partition) is owned:
            replay = self.new_replay()
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
            state = self.build(partition, owned.log, replay)
            owned.state = state
            self.on_loaded(partition, state)
            owned.loaded_at = time.monotonic()
            seconds = owned.loaded_at - started
            self._metrics.load_seconds.observe(seconds)
            log.info(
                f"Elected as the {self.kind.name} coordinator for partition {partition}",
                partition=partition,
                epoch=owned.owner.epoch,
                load_ms=round(seconds * 1000, 1),
                **self.loaded_fields(replay),
            )
            return

    def _resign(self, partition: int, reason: str) -> None:
        owned = self._owned.pop(partition)
        if owned.task is not None and not owned.task.done():
            owned.task.cancel()
        if owned.state is not None:
            owned.state.resign()
        if self._logs.get(partition) is owned.log and (
            owned.log.fenced or not self._still_placed_here(partition, owned.owner)
        ):
            del self._logs[partition]
        log.info(
            f"Resigned as the {self.kind.name} coordinator for partition {partition}",
            partition=partition,
            epoch=owned.owner.epoch,
            reason=reason,
        )

    def _still_placed_here(self, partition: int, owner: ShardOwner) -> bool:
        shard_map = self._shard_map()
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
