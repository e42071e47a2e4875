"""Placement of the partitions ("shards") of ``__consumer_offsets`` on group coordinators and of
``__transaction_state`` on transaction coordinators (one ``ShardPlacer`` per ``CoordinatorKind``).

The active controller is the only writer of ``<kind root>/shards``. Rules of
``place_shards``: every shard gets a live owner; a shard stays with its owner while that owner
is live with the same registration and holds no more than its fair share (ceil(shards/live));
the rest go to the least loaded live coordinator (lowest id first). Any change of owner - a
restarted owner (new registration znode) counts as a new one - bumps the shard's epoch, which
is also the producer epoch its owner writes with, so storage fences the former owner. A new
shard gets epoch 0 and its own producer id, kept for its life (a new one only if the int16
epoch would reach 32767). With no live coordinator the map is left as it is.

A map of another topic of the same name (it was deleted and created again) starts over.
While the topic is queued for deletion or gone, the map is emptied: owners resign, as Kafka's
coordinators do when their partitions are deleted (StopReplica with delete).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from services.common.logging import get_logger
from services.common.zk.client import AsyncZk
from services.common.zk.layout import CoordinatorKind, ShardMap, ShardOwner
from services.common.zk.producer_ids import claim_block
from services.controller.zkstore import Create, EpochGuard, SetData

log = get_logger("controller.shards")

MAX_EPOCH = 32766  # producer epochs are int16, kept below Short.MAX_VALUE


def place_shards(
    current: ShardMap | None,
    live: Mapping[int, int],
    partitions: int,
    new_producer_id: Callable[[], int],
    topic_id: str = "",
) -> ShardMap | None:
    """The map that should be written (None = leave it as it is). ``live`` maps each live
    coordinator id to its registration's czxid; ``topic_id`` is the topic's (a map recorded
    for another topic id is not reused; one without any is adopted)."""
    if not live or partitions <= 0:
        return None
    old = reusable(current, topic_id)
    fair = math.ceil(partitions / len(live))
    load = dict.fromkeys(live, 0)
    kept: dict[int, ShardOwner] = {}
    for p in range(partitions):
        s = old.get(p)
        if s is not None and live.get(s.owner) == s.session and load[s.owner] < fair:
            kept[p] = s
            load[s.owner] += 1
    shards: dict[int, ShardOwner] = {}
    for p in range(partitions):
        if p in kept:
            shards[p] = kept[p]
            continue
        owner = min(load, key=lambda c: (load[c], c))
        load[owner] += 1
        prev = old.get(p)
        if prev is None or prev.epoch >= MAX_EPOCH:
            shards[p] = ShardOwner(owner, 0, new_producer_id(), live[owner])
        else:
            shards[p] = ShardOwner(owner, prev.epoch + 1, prev.producer_id, live[owner])
    return ShardMap(partitions, shards, topic_id)


def reusable(current: ShardMap | None, topic_id: str) -> dict[int, ShardOwner]:
    """The shards of ``current`` that belong to the topic ``topic_id`` (a map without a topic
    id is taken as this topic's)."""
    if current is None or current.topic_id not in ("", topic_id):
        return {}
    return dict(current.shards)


def released(current: ShardMap | None) -> ShardMap | None:
    """The map once the topic is gone or going (None = already so)."""
    if current is None or (current.partitions == 0 and not current.shards):
        return None
    return ShardMap(0, {})


class ShardPlacer:
    """Reads the live coordinators of ``kind`` and its topic, writes the placement
    (epoch-guarded)."""

    def __init__(
        self, zk: AsyncZk, guard: EpochGuard, controller_id: int, kind: CoordinatorKind
    ) -> None:
        self.kind = kind
        self._zk = zk
        self._guard = guard
        self._controller_id = controller_id
        self.placed: ShardMap | None = None  # what this controller last read or wrote

    async def _live(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for child in await self._zk.get_children(self.kind.ids):
            try:
                node_id = int(child)
            except ValueError:
                continue
            got = await self._zk.get_or_none(f"{self.kind.ids}/{child}")
            if got is not None:
                out[node_id] = got[1].czxid
        return out

    async def reconcile(self, partitions: int | None, topic_id: str = "") -> None:
        """``partitions`` = the partition count of the kind's topic (None: the topic is gone or
        queued for deletion), ``topic_id`` its id."""
        got = await self._zk.get_or_none(self.kind.shards)
        current = ShardMap.from_json(got[0]) if got is not None and got[0] else None
        self.placed = current
        if partitions is None:
            empty = released(current)
            if empty is not None and got is not None:
                await self._write(empty, got[1].version)
                log.info(
                    f"shards of {self.kind.topic} released: the topic is being deleted",
                    shards=len(current.shards) if current is not None else 0,
                )
            return
        live = await self._live()
        fresh: list[int] = []

        def reserve() -> int:
            # placeholders -1, -2, ... become ids of one block claimed below (only if needed)
            fresh.append(-1)
            return -len(fresh)

        wanted = place_shards(current, live, partitions, reserve, topic_id)
        if wanted is None or wanted == current:
            return
        if fresh:
            block = await claim_block(self._zk, self._controller_id, len(fresh))
            wanted = ShardMap(
                wanted.partitions,
                {
                    p: (
                        ShardOwner(s.owner, s.epoch, block.first - s.producer_id - 1, s.session)
                        if s.producer_id < 0
                        else s
                    )
                    for p, s in wanted.shards.items()
                },
                wanted.topic_id,
            )
        await self._write(wanted, got[1].version if got is not None else None)
        old = reusable(current, wanted.topic_id)
        moves = [(p, old.get(p), s) for p, s in sorted(wanted.shards.items()) if old.get(p) != s]
        for p, before, after in moves:
            log.info(
                f"shard {p} of {self.kind.topic} moved from "
                f"{before.owner if before else 'nobody'} to {after.owner}, epoch {after.epoch}",
                partition=p,
                owner=after.owner,
                epoch=after.epoch,
            )
        log.info(
            "coordinator shards placed",
            topic=self.kind.topic,
            partitions=partitions,
            moved=len(moves),
            per_coordinator={c: sum(s.owner == c for s in wanted.shards.values()) for c in live},
        )

    async def _write(self, shard_map: ShardMap, version: int | None) -> None:
        """Create the znode (``version`` None) or replace that version of it, epoch-guarded."""
        data = shard_map.to_json()
        path = self.kind.shards
        op = Create(path, data) if version is None else SetData(path, data, version)
        await self._guard.commit([op])
        self.placed = shard_map
