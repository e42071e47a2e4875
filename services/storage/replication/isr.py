"""The leader's ISR changes, written to ZooKeeper as Kafka's ZooKeeper mode did.

Expand (checked on every follower fetch): a follower outside the ISR whose LEO reached the high
watermark and the start offset of the current leader epoch joins it, unless the controller's
last order named it shutting down (KIP-841). Shrink (checked every
replica.lag.time.max.ms / 2): a follower that has not caught up within replica.lag.time.max.ms
leaves it. Either way the leader writes ``/brokers/topics/<t>/partitions/<p>/state`` itself with
a conditional setData on the znode version it got from its last order (the partition epoch),
changing only the ISR (same leader epoch, the znode's controller epoch kept), adopts the new
version, and creates a sequential ``/isr_change_notification/isr_change_`` node
(``{"version":1,"partitions":[{"topic":..,"partition":..}]}``) so the controller reloads those
states. A version conflict means the controller changed the state: the leader re-reads it
(adopting it only if it is its own earlier write, i.e. same leader and epoch) and otherwise
waits for the controller's order. One change per partition is in flight at a time; while it is,
the partition counts the maximal ISR for its high watermark.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kazoo.exceptions import BadVersionError, NoNodeError

from services.common.logging import get_logger
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.storage.partition import Partition, TopicPartition
from services.storage.replica_manager import ReplicaManager

log = get_logger("storage.replication.isr")

PROPAGATION_DELAY_S = 0.05  # coalesce the notifications of changes made together
RETRY_AFTER_ERROR_S = 1.0  # after a ZooKeeper error, before the partition's next attempt
ISR_CHANGE_PREFIX = f"{layout.ISR_CHANGE_NOTIFICATION}/isr_change_"


class IsrVersionConflict(Exception):
    """The state znode is not at the expected version (or is gone)."""


class IsrStore(Protocol):
    """Where partition states live (ZooKeeper; a fake in unit tests)."""

    async def read(self, topic: str, partition: int) -> tuple[layout.PartitionStateZk, int] | None:
        """The state znode and its version, or None if it does not exist."""
        ...

    async def write(
        self, topic: str, partition: int, state: layout.PartitionStateZk, expected_version: int
    ) -> int:
        """Conditional set; returns the new version or raises IsrVersionConflict."""
        ...

    async def notify(self, partitions: Sequence[TopicPartition]) -> None:
        """Tell the controller these partitions' states changed."""
        ...


class ZkIsrStore:
    def __init__(self, zk: AsyncZk) -> None:
        self.zk = zk

    async def read(self, topic: str, partition: int) -> tuple[layout.PartitionStateZk, int] | None:
        got = await self.zk.get_or_none(layout.partition_state_path(topic, partition))
        if got is None:
            return None
        return layout.PartitionStateZk.from_json(got[0]), got[1].version

    async def write(
        self, topic: str, partition: int, state: layout.PartitionStateZk, expected_version: int
    ) -> int:
        path = layout.partition_state_path(topic, partition)
        try:
            stat = await self.zk.set(path, state.to_json(), version=expected_version)
        except (BadVersionError, NoNodeError) as exc:
            raise IsrVersionConflict(f"{path}: {type(exc).__name__}") from None
        return int(stat.version)

    async def notify(self, partitions: Sequence[TopicPartition]) -> None:
        body = {
            "version": 1,
            "partitions": [{"topic": t, "partition": p} for t, p in partitions],
        }
        await self.zk.create(ISR_CHANGE_PREFIX, layout.dumps(body), sequence=True)


@dataclass(frozen=True, slots=True)
class _Change:
    partition: Partition
    kind: str  # "expand" | "shrink"
    old_isr: tuple[int, ...]
    new_isr: tuple[int, ...]
    leader_epoch: int
    expected_version: int


class IsrManager:
    """Expands and shrinks the ISR of the partitions this node leads."""

    def __init__(self, rm: ReplicaManager, store: IsrStore) -> None:
        self.rm = rm
        self.store = store
        self._inflight: dict[TopicPartition, asyncio.Task[None]] = {}
        # (leader epoch, partition epoch) at which a partition's change was refused: no new
        # attempt until an order from the controller moves it
        self._blocked: dict[TopicPartition, tuple[int, int]] = {}
        self._retry_at: dict[TopicPartition, float] = {}
        self._changed: set[TopicPartition] = set()
        self._notify_wanted = asyncio.Event()
        self._propagator: asyncio.Task[None] | None = None
        self._closed = False

    # ---- triggers -----------------------------------------------------------------------
    def maybe_expand(self, p: Partition, replica_id: int) -> None:
        """After a follower fetch: add it to the ISR if it caught up (Kafka's maybeExpandIsr),
        unless the controller said it is shutting down (KIP-841's INELIGIBLE_REPLICA)."""
        if replica_id in self.rm.ineligible_replicas:
            return
        new_isr = p.isr_to_expand(replica_id)
        if new_isr is not None and self._may_try(p):
            self._start(p, "expand", new_isr)

    def maybe_shrink_all(self) -> int:
        """Remove lagging followers from the ISRs (Kafka's maybeShrinkIsr); returns how many
        partitions got a change started."""
        now = self.rm.clock()
        started = 0
        for key in list(self.rm.led_with_followers):  # an RF 1 partition has none to shrink
            p = self.rm.get(*key)
            if p is None or not p.is_leader:
                continue
            new_isr = p.isr_to_shrink(now)
            if new_isr is not None and self._may_try(p):
                self._start(p, "shrink", new_isr)
                started += 1
        return started

    def _may_try(self, p: Partition) -> bool:
        key = p.key
        if self._closed or key in self._inflight:
            return False
        blocked = self._blocked.get(key)
        if blocked is not None:
            if blocked == (p.leader_epoch, p.partition_epoch):
                return False
            del self._blocked[key]
        retry_at = self._retry_at.get(key)
        if retry_at is not None:
            if asyncio.get_running_loop().time() < retry_at:
                return False
            del self._retry_at[key]
        return True

    def _start(self, p: Partition, kind: str, new_isr: tuple[int, ...]) -> None:
        change = _Change(p, kind, p.isr, new_isr, p.leader_epoch, p.partition_epoch)
        p.begin_isr_change(new_isr)
        log.info(
            f"{'expanding' if kind == 'expand' else 'shrinking'} ISR",
            topic=p.topic,
            partition=p.partition,
            isr=list(change.old_isr),
            new_isr=list(new_isr),
            leader_epoch=p.leader_epoch,
            high_watermark=p.high_watermark,
            log_end_offset=p.log.log_end_offset,
        )
        task = asyncio.create_task(self._apply(change), name=f"isr-{p.topic}-{p.partition}")
        self._inflight[p.key] = task
        task.add_done_callback(functools.partial(self._done, p.key))

    def _done(self, key: TopicPartition, task: asyncio.Task[None]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]

    # ---- the write --------------------------------------------------------------------
    async def _apply(self, c: _Change) -> None:
        p = c.partition
        try:
            await self._write(c)
        except asyncio.CancelledError:
            p.abort_isr_change(c.leader_epoch)
            raise
        except Exception as exc:  # noqa: BLE001 - ZooKeeper down: try again later
            p.abort_isr_change(c.leader_epoch)
            self.rm.metrics.failed_isr_updates.inc()
            self._retry_at[p.key] = asyncio.get_running_loop().time() + RETRY_AFTER_ERROR_S
            log.warning(
                "ISR change not written, will retry",
                topic=p.topic,
                partition=p.partition,
                new_isr=list(c.new_isr),
                error=repr(exc),
            )

    async def _write(self, c: _Change) -> None:
        p = c.partition
        got = await self.store.read(p.topic, p.partition)
        if got is None or got[1] != c.expected_version:
            self._settle_conflict(c, got)
            return
        current, version = got
        if current.leader != self.rm.broker_id or current.leader_epoch != c.leader_epoch:
            self._settle_conflict(c, got)
            return
        state = layout.PartitionStateZk(
            self.rm.broker_id, c.leader_epoch, list(c.new_isr), current.controller_epoch
        )
        try:
            new_version = await self.store.write(p.topic, p.partition, state, version)
        except IsrVersionConflict:
            self._settle_conflict(c, await self.store.read(p.topic, p.partition))
            return
        self._committed(c, c.new_isr, new_version)

    def _committed(self, c: _Change, isr: Sequence[int], version: int) -> None:
        """ZooKeeper holds ``isr`` at ``version`` for this leader epoch."""
        p = c.partition
        self._queue_notification(p.key)
        if not p.complete_isr_change(c.leader_epoch, c.expected_version, isr, version):
            log.info(
                "ISR written but a newer order arrived meanwhile",
                topic=p.topic,
                partition=p.partition,
                isr=list(isr),
            )
            return
        grew = len(isr) > len(c.old_isr)
        (self.rm.metrics.isr_expands if grew else self.rm.metrics.isr_shrinks).inc()
        log.info(
            "ISR updated",
            topic=p.topic,
            partition=p.partition,
            isr=list(isr),
            previous_isr=list(c.old_isr),
            partition_epoch=version,
            leader_epoch=c.leader_epoch,
        )
        self.rm.on_isr_changed(p)

    def _settle_conflict(self, c: _Change, got: tuple[layout.PartitionStateZk, int] | None) -> None:
        p = c.partition
        if (
            got is not None
            and got[0].leader == self.rm.broker_id
            and got[0].leader_epoch == c.leader_epoch
            and got[1] > c.expected_version
        ):
            # Only this leader changes the state within its epoch: it is an earlier write of
            # ours whose answer was lost (e.g. a connection loss). Adopt it.
            self._committed(c, got[0].isr, got[1])
            return
        p.abort_isr_change(c.leader_epoch)
        self.rm.metrics.failed_isr_updates.inc()
        self._blocked[p.key] = (c.leader_epoch, c.expected_version)
        log.info(
            "ISR not changed: the partition state moved on in ZooKeeper; "
            "waiting for the controller's order",
            topic=p.topic,
            partition=p.partition,
            expected_version=c.expected_version,
            zk_version=got[1] if got else None,
            zk_leader=got[0].leader if got else None,
            zk_leader_epoch=got[0].leader_epoch if got else None,
        )

    # ---- notifications ------------------------------------------------------------------
    def _queue_notification(self, key: TopicPartition) -> None:
        self._changed.add(key)
        self._notify_wanted.set()
        if self._propagator is None or self._propagator.done():
            self._propagator = asyncio.create_task(self._propagate(), name="isr-propagation")

    async def _propagate(self) -> None:
        while True:
            await self._notify_wanted.wait()
            await asyncio.sleep(PROPAGATION_DELAY_S)
            self._notify_wanted.clear()
            batch = sorted(self._changed)
            self._changed.clear()
            if not batch:
                continue
            try:
                await self.store.notify(batch)
            except asyncio.CancelledError:
                self._changed.update(batch)
                raise
            except Exception as exc:  # noqa: BLE001 - ZooKeeper down: keep them for later
                self._changed.update(batch)
                log.warning("ISR change notification failed, retrying", error=repr(exc))
                await asyncio.sleep(RETRY_AFTER_ERROR_S)
                self._notify_wanted.set()

    async def flush_notifications(self) -> None:
        """Write pending notifications now (at shutdown)."""
        if self._changed:
            batch = sorted(self._changed)
            self._changed.clear()
            await self.store.notify(batch)

    async def close(self, grace_s: float = 2.0) -> None:
        """Let writes in flight finish (a write cancelled half-way might land unannounced),
        then send the pending notifications."""
        self._closed = True
        tasks = [*self._inflight.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        for t in tasks:
            t.cancel()
        if self._propagator is not None:
            self._propagator.cancel()
            tasks.append(self._propagator)
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.flush_notifications()
