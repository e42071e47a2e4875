"""Topic deletion (Kafka's TopicDeletionManager).

A topic is queued by a child of ``/admin/delete_topics``. Its replicas are stopped and deleted
with StopReplicas(delete_partitions=true); when every replica's storage node acknowledged, the
topic's znodes are removed. While a replica's node is down the topic stays queued (ineligible)
and deletion resumes when the node registers again.
"""

from __future__ import annotations

import asyncio

from kazoo.exceptions import NoNodeError

from services.common.logging import get_logger
from services.common.zk import layout
from services.controller import zkstore
from services.controller.core import ControllerCore
from services.controller.links import OrderResult
from services.controller.zkstore import Delete

log = get_logger("controller.deletion")

RETRY_S = 1.0


class TopicDeleter:
    def __init__(self, controller: ControllerCore) -> None:
        self.c = controller
        self._in_flight: set[str] = set()
        self._waiters: dict[str, list[asyncio.Future[bool]]] = {}

    # ---- waiting for a deletion -----------------------------------------------------------
    def waiter(self, name: str) -> asyncio.Future[bool]:
        """Resolves True once ``name`` is deleted (False if this controller's term ends)."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if name not in self.c.ctx.topics:
            fut.set_result(True)
        else:
            self._waiters.setdefault(name, []).append(fut)
        return fut

    def _resolve(self, name: str, value: bool) -> None:
        for fut in self._waiters.pop(name, []):
            if not fut.done():
                fut.set_result(value)

    def fail_waiters(self) -> None:
        for name in list(self._waiters):
            self._resolve(name, False)

    # ---- events ---------------------------------------------------------------------------
    async def on_delete_topics_change(self) -> None:
        ctx = self.c.ctx
        names = sorted(await self.c.zk.get_children(layout.DELETE_TOPICS))
        unknown = [n for n in names if n not in ctx.topics]
        if unknown:
            log.warning("Ignoring request to delete non-existing topics", topics=unknown)
            await self._remove_markers(unknown)
        known = [n for n in names if n in ctx.topics]
        if not known:
            return
        if not self.c.settings.delete_topic_enable:
            log.info("Removing topics since delete topic is disabled", topics=known)
            await self._remove_markers(known)
            return
        fresh = [n for n in known if n not in ctx.topics_to_delete]
        if fresh:
            log.info("topics queued for deletion", topics=fresh)
        ctx.topics_to_delete.update(known)
        for n in fresh:
            ctx.topic_changed(n)
        if layout.SHARDED_TOPICS.intersection(fresh):
            await self.c.place_shards()  # its coordinators resign before the replicas go
        self.resume()

    async def _remove_markers(self, names: list[str]) -> None:
        for name in names:
            try:
                await self.c.guard.commit([Delete(layout.delete_topic_path(name))])
            except zkstore.ZkOpError as exc:
                if not isinstance(exc.cause, NoNodeError):
                    raise

    def resume(self) -> None:
        """Start deleting every queued topic whose replicas are all on live storage nodes."""
        for name in sorted(self.c.ctx.topics_to_delete):
            self._try(name)

    def _try(self, name: str) -> None:
        ctx = self.c.ctx
        topic = ctx.topics.get(name)
        if topic is None or name in self._in_flight:
            return
        by_broker: dict[int, list[tuple[str, int, int]]] = {}
        for p, replicas in sorted(topic.assignment.items()):
            st = topic.states.get(p)
            for r in replicas:
                by_broker.setdefault(r, []).append((name, p, st.leader_epoch if st else 0))
        dead = sorted(b for b in by_broker if b not in ctx.brokers)
        if dead:
            log.info("topic deletion waits for storage nodes to return", topic=name, brokers=dead)
            return
        self._in_flight.add(name)
        acks: dict[int, asyncio.Future[OrderResult]] = {}
        for broker_id, parts in sorted(by_broker.items()):
            link = self.c.links.get(broker_id)
            if link is not None:
                acks[broker_id] = link.stop_replicas(parts, delete=True)
        self.c.spawn(self._await_replicas(name, acks), f"delete-{name}")

    async def _await_replicas(
        self, name: str, acks: dict[int, asyncio.Future[OrderResult]]
    ) -> None:
        results = await asyncio.gather(*acks.values())
        failed = {b: r for b, r in zip(acks, results, strict=True) if not r.ok}
        if not failed:
            self.c.enqueue(f"TopicDeletionDone({name})", lambda: self._complete(name))
            return
        log.warning(
            "replica deletion failed, will retry",
            topic=name,
            brokers={
                b: (r.outcome.value, r.error_code, r.partition_errors[:5])
                for b, r in failed.items()
            },
        )
        await asyncio.sleep(RETRY_S)
        self.c.enqueue(f"TopicDeletionRetry({name})", lambda: self._retry(name))

    async def _retry(self, name: str) -> None:
        self._in_flight.discard(name)
        if name in self.c.ctx.topics_to_delete:
            self._try(name)

    async def _complete(self, name: str) -> None:
        """Every replica is gone: remove the topic's znodes (one guarded multi per 1000 ops)."""
        self._in_flight.discard(name)
        ctx = self.c.ctx
        if name not in ctx.topics:
            self._resolve(name, True)
            return
        zk = self.c.zk
        ops: list[zkstore.Op] = [
            Delete(p) for p in await zkstore.subtree(zk, layout.topic_path(name))
        ]
        for path in (layout.topic_config_path(name), layout.delete_topic_path(name)):
            if await zk.exists(path) is not None:
                ops.append(Delete(path))
        await self.c.guard.commit(ops)
        ctx.topics.pop(name, None)  # its counts left when it was queued (topic_changed above)
        ctx.topics_to_delete.discard(name)
        log.info("deleted topic", topic=name)
        self._resolve(name, True)
