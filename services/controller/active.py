"""The active controller: one term, from election to resignation.

Like Kafka's KafkaController, everything that reads or changes the cluster state runs as an event
on one queue, processed by one task, so handlers never interleave. ZooKeeper watches and API
requests only enqueue events. Writes go through the epoch guard; a ControllerMovedError ends the
term (the owner resigns).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Sequence,
)
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)

from services.common.broker_config import DEFAULT_ENTITY
from services.common.broker_config_store import BrokerConfigStore
from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.controller import zkstore
from services.controller.config_changes import purge_expired_config_changes
from services.controller.coordinator_shards import ShardPlacer
from services.controller.core import AckMap, NotControllerError
from services.controller.deletion import TopicDeleter
from services.controller.elastic import ElasticStorage
from services.controller.elections import NO_LEADER, initial_leader_isr, next_leader_isr
from services.controller.leader_balance import LeaderBalancer
from services.controller.links import BrokerLinks, OrderResult
from services.controller.metrics import ControllerMetrics
from services.controller.model import (
    ControllerContext,
    Part,
    PartitionState,
    TopicState,
    Transition,
)
from services.controller.provisioners.factory import make_provisioner
from services.controller.reassignment import Reassigner
from services.controller.settings import ControllerSettings
from services.controller.zkstore import ControllerMovedError, Create, EpochGuard, Op, SetData

log = get_logger("controller")

ELECTION_ATTEMPTS = 3
ZK_RETRY_S = 0.1
FAILOVER_ERROR_BACKOFF_S = 1.0
REQUEST_PRIORITY_S = 1.0
REQUEST_PRIORITY_BUDGET_S = 3.0

__all__ = ["AckMap", "ActiveController", "NotControllerError"]


@dataclass(slots=True)
class _Event:
    name: str
    run: Callable[[], Awaitable[Any]]
    future: asyncio.Future[Any] | None
    key: Any = None
    early: bool = False  # may run before the failover finished (see ActiveController.start)
    # changes nothing in the context: the gauges (a pass over every partition) are not refreshed
    read_only: bool = False
    queued: float = 0.0  # time.monotonic() when it was queued


class _FailoverError(Exception):
    """Finishing the failover failed for another reason than losing control."""


UNCLEAN = "unclean.leader.election.enable"


class ActiveController:
    def __init__(
        self,
        zk: AsyncZk,
        settings: ControllerSettings,
        epoch: int,
        epoch_zk_version: int,
        metrics: ControllerMetrics,
        on_moved: Callable[[str], None],
        watch_topic: Callable[[str], None] = lambda name: None,
        broker_configs: BrokerConfigStore | None = None,
    ) -> None:
        self.zk = zk
        self.settings = settings
        # dynamic broker configs (the cluster default's unclean.leader.election.enable)
        self.broker_configs = broker_configs if broker_configs is not None else BrokerConfigStore()
        self.ctx = ControllerContext(epoch, epoch_zk_version)
        self.guard = EpochGuard(zk, epoch, epoch_zk_version)
        self.links = BrokerLinks(
            settings.controller_id,
            epoch,
            settings.controller_socket_timeout_ms / 1000,
            ineligible=lambda: self.ctx.shutting_down,
        )
        self.metrics = metrics
        self.deleter = TopicDeleter(self)
        self.balancer = LeaderBalancer(self)
        self.reassigner = Reassigner(self)
        self.shards = ShardPlacer(zk, self.guard, settings.controller_id, layout.GROUP)
        self.txn_shards = ShardPlacer(zk, self.guard, settings.controller_id, layout.TRANSACTION)
        self.elastic = ElasticStorage(
            self,
            self.reassigner,
            make_provisioner(settings, zk, self.guard, lambda: self.ctx.brokers),
            metrics.elastic,
        )
        self._on_moved = on_moved
        self.watch_topic = watch_topic
        self._queue: asyncio.Queue[_Event] = asyncio.Queue()
        # events that must finish the failover first, held while the states load (see _next)
        self._deferred: collections.deque[_Event] = collections.deque()
        self._pending_keys: set[Any] = set()
        self._worker: asyncio.Task[None] | None = None
        self._current: _Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._states: asyncio.Task[list[tuple[TopicState, dict[int, PartitionState]]]] | None
        self._states = None
        self.failover_done = False
        self._requests = 0  # client requests in flight (see request())
        self._yielded = 0.0  # seconds the state load waited for them (see _yield)
        self._no_requests = asyncio.Event()
        self._no_requests.set()
        self._started = 0.0  # time.monotonic() of start(): the failover's timings count from it
        self.running = False

    @property
    def epoch(self) -> int:
        return self.ctx.epoch

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Take over (Kafka's onControllerFailover), serving as early as is safe.

        First the brokers and the topics (assignment and config: two reads per topic); then
        the event worker starts. The partition states (one znode per partition, most of the
        failover's reads) load in the background. Events marked ``early`` (CreateTopics, new
        partitions of a topic) run before they are loaded: they touch only partitions that
        were not in ZooKeeper at the first step, so they need no loaded state. Any other event
        first finishes the failover on the worker (:meth:`_finish_failover`: the states into
        the context, elections, full state to every storage node, deletions, reassignments,
        shards), as does the event the loader queues when it is done. Elections therefore
        never plan from a state that was not read in this term, and every write stays guarded
        by the epoch and the state znode's version."""
        self.running = True
        self.metrics.active.set(1)
        self._started = time.monotonic()
        await self._retrying_zk(self._load_topics)
        snapshot = list(self.ctx.topics.values())
        log.info(
            "controller serving, loading partition states",
            epoch=self.epoch,
            topics=len(snapshot),
            partitions=self.ctx.partition_count(),
            topics_s=self._since_start(),
        )
        self._states = self.spawn(self._load_states(snapshot), "load-partition-states")
        self._worker = asyncio.create_task(self._run(), name="controller-events")
        self.spawn(purge_expired_config_changes(self.zk), "purge-config-changes")
        if self.settings.auto_leader_rebalance_enable:
            self.spawn(self.balancer.run(), "leader-balance")

    async def stop(self) -> None:
        """End the term: stop handling events, drop pending orders, fail waiting requests."""
        self.running = False
        current = asyncio.current_task()
        for task in [self._worker, *self._tasks]:
            if task is not None and task is not current:
                task.cancel()
        await asyncio.gather(
            *(t for t in [self._worker, *self._tasks] if t is not None and t is not current),
            return_exceptions=True,
        )
        unfinished = [self._current] if self._current is not None else []
        unfinished += self._deferred
        self._deferred.clear()
        while not self._queue.empty():
            unfinished.append(self._queue.get_nowait())
        for ev in unfinished:
            if ev.future is not None and not ev.future.done():
                ev.future.set_exception(NotControllerError())
        self.deleter.fail_waiters()
        self.reassigner.fail_waiters()
        await self.links.close_all()
        if self.elastic.provisioner is not None:
            await self.elastic.provisioner.close()

    def _since_start(self) -> float:
        return round(time.monotonic() - self._started, 3)

    def spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- events ---------------------------------------------------------------------------
    def enqueue(
        self,
        name: str,
        run: Callable[[], Awaitable[Any]],
        *,
        key: Any = None,
        want_result: bool = False,
        early: bool = False,
        read_only: bool = False,
    ) -> asyncio.Future[Any] | None:
        """Queue an event; events with a ``key`` already pending are coalesced. ``early``: it
        may run before the failover finished (see :meth:`start`)."""
        if not self.running:
            if want_result:
                fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                fut.set_exception(NotControllerError())
                return fut
            return None
        if key is not None:
            if key in self._pending_keys:
                return None
            self._pending_keys.add(key)
        future = asyncio.get_running_loop().create_future() if want_result else None
        self._queue.put_nowait(_Event(name, run, future, key, early, read_only, time.monotonic()))
        return future

    async def call(
        self,
        name: str,
        run: Callable[[], Awaitable[Any]],
        *,
        early: bool = False,
        read_only: bool = False,
    ) -> Any:
        fut = self.enqueue(name, run, want_result=True, early=early, read_only=read_only)
        assert fut is not None
        return await fut

    def notify(self, kind: str, arg: str | None = None) -> None:
        """A ZooKeeper watch fired."""
        handlers: dict[str, Callable[[], Awaitable[Any]]] = {
            "brokers": self._on_broker_change,
            "topics": self._on_topic_change,
            "delete_topics": self._on_delete_topics_change,
            "isr_change": self._on_isr_change_notification,
            "log_dir_event": self._on_log_dir_event,
            "coordinators": self.place_shards,
            "broker_config": self._elect_offline_partitions,
            "reassign_partitions": self.reassigner.on_legacy_change,
        }
        if kind == "topic" and arg is not None:
            self.enqueue(
                f"PartitionModifications({arg})",
                lambda: self._on_partition_modification(arg),
                key=("topic", arg),
                early=True,
            )
        elif kind in handlers:
            self.enqueue(kind, handlers[kind], key=kind)

    async def _next(self) -> _Event:
        """The next event, in the order they came, except while the partition states still
        load: then an ``early`` event overtakes the others, which would only wait for the
        load (each first finishes the failover). They are held in order and run once the load
        is done (the loader's own event wakes this up). A client's CreateTopics in a failover
        so never waits behind watch events (ISR-change notices, broker changes) that fire
        while the states load; in ZooKeeper-mode Kafka it does not go through the
        controller's queue at all."""
        while True:
            if self._deferred and self._states_loaded():
                return self._deferred.popleft()
            ev = await self._queue.get()
            if self._states_loaded():
                if not self._deferred:
                    return ev
                self._deferred.append(ev)  # behind the ones held before it
            elif ev.early:
                return ev
            else:
                self._deferred.append(ev)

    def _states_loaded(self) -> bool:
        return self.failover_done or (self._states is not None and self._states.done())

    async def _run(self) -> None:
        while True:
            ev = self._current = await self._next()
            if ev.key is not None:
                self._pending_keys.discard(ev.key)
            began = time.monotonic()
            try:
                if not ev.early:
                    await self._retrying_zk(self._finish_failover)
                result = await self._retrying_zk(ev.run)
            except _FailoverError:
                log.exception("error while becoming controller, triggering controller movement")
                if ev.future is not None and not ev.future.done():
                    ev.future.set_exception(NotControllerError())
                self.running = False
                await asyncio.sleep(FAILOVER_ERROR_BACKOFF_S)
                self._on_moved("failover error")
                return
            except NotControllerError as exc:
                if ev.future is not None and not ev.future.done():
                    ev.future.set_exception(exc)
                return
            except (ControllerMovedError, SessionExpiredError) as exc:
                log.info(
                    "controller moved to another controller while processing event",
                    controller_event=ev.name,
                    reason=type(exc).__name__,
                )
                if ev.future is not None and not ev.future.done():
                    ev.future.set_exception(NotControllerError())
                self.running = False
                self._on_moved(str(exc) or type(exc).__name__)
                return
            except Exception as exc:  # noqa: BLE001 - one bad event must not stop the controller
                log.exception("error processing event", controller_event=ev.name)
                if ev.future is not None and not ev.future.done():
                    ev.future.set_exception(exc)
            else:
                if ev.future is not None and not ev.future.done():
                    ev.future.set_result(result)
            finally:
                self._current = None
                if self.running and self.failover_done and not ev.read_only:
                    self.metrics.update(self.ctx)
                log.debug(
                    "controller event",
                    controller_event=ev.name,
                    wait_s=round(began - ev.queued, 3),
                    run_s=round(time.monotonic() - began, 3),
                    queued=self._queue.qsize() + len(self._deferred),
                )

    async def _retrying_zk(self, run: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``run``; on a lost connection wait for it to come back and run it again."""
        while True:
            try:
                return await run()
            except (ConnectionLoss, OperationTimeoutError, ConnectionClosedError):
                if not self.running:
                    raise NotControllerError() from None
                while True:
                    if self.zk.connected or not self.running:
                        break
                    await asyncio.sleep(ZK_RETRY_S)
                if not self.running:
                    raise NotControllerError() from None

    # ---- startup --------------------------------------------------------------------------
    async def _load_topics(self) -> None:
        """The failover's first step: brokers and topics without their partition states.
        Idempotent: runs again from scratch if the connection drops half-way."""
        await self.links.close_all()
        self.ctx.topics.clear()
        self.ctx.topics_to_delete.clear()
        await self.zk.ensure_layout()
        self.ctx.brokers = await zkstore.read_brokers(self.zk)
        for broker_id, b in self.ctx.brokers.items():
            self.links.add(broker_id, b.registration.address)
        names = sorted(await self.zk.get_children(layout.BROKER_TOPICS))
        for topic, fresh_id in await zkstore.read_topics(self.zk, names):
            await self._add_topic(topic, fresh_id)

    async def _load_states(
        self, topics: list[TopicState]
    ) -> list[tuple[TopicState, dict[int, PartitionState]]]:
        """The partition states of the topics of the first step, read in the background; then
        an event that finishes the failover (if no other event did before). Only the partitions
        assigned at the first step: early events may add others meanwhile, and own their
        states."""
        snapshot = [(t, sorted(t.assignment)) for t in topics]

        async def read() -> list[tuple[TopicState, dict[int, PartitionState]]]:
            parts = [(t.name, p) for t, ps in snapshot for p in ps]
            found = await zkstore.read_partition_states(self.zk, parts, between=self._yield)
            return [
                (t, {p: st for p in ps if (st := found.get((t.name, p))) is not None})
                for t, ps in snapshot
            ]

        try:
            return await self._retrying_zk(read)
        finally:
            log.debug("partition states read", states_read_s=self._since_start())
            self.enqueue("ControllerFailover", _nothing)

    @contextlib.asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        """A client request served while the failover still loads partition states: the loader
        yields to it (see :meth:`_yield`)."""
        self._requests += 1
        self._no_requests.clear()
        try:
            yield
        finally:
            self._requests -= 1
            if not self._requests:
                self._no_requests.set()

    async def _yield(self) -> None:
        """Between two windows of the state load: wait while requests are served, at most
        REQUEST_PRIORITY_S per window and REQUEST_PRIORITY_BUDGET_S per failover (requests
        must not hold back the elections that finish it). The load's reads and parsing share
        this process's CPU with them; a CreateTopics answered behind the whole load is what a
        failover must avoid."""
        left = REQUEST_PRIORITY_BUDGET_S - self._yielded
        if left <= 0 or self._no_requests.is_set():
            return
        started = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._no_requests.wait(), min(REQUEST_PRIORITY_S, left))
        self._yielded += time.monotonic() - started

    async def _finish_failover(self) -> None:
        """The rest of Kafka's onControllerFailover, once, on the event worker: the loaded
        partition states into the context, then elections, the full state to every storage
        node, pending deletions and reassignments, coordinator shards, elastic storage.
        Idempotent until done (a dropped connection runs it again)."""
        if self.failover_done:
            return
        assert self._states is not None
        try:
            loaded = await self._states
            for topic, states in loaded:
                if self.ctx.topics.get(topic.name) is topic:
                    topic.states.update(states)
            log.info(
                "controller context loaded",
                epoch=self.epoch,
                brokers=sorted(self.ctx.brokers),
                topics=len(self.ctx.topics),
                partitions=self.ctx.partition_count(),
                loaded_s=self._since_start(),
            )
            parts = [(t, p) for t in self.eligible_topics() for p in sorted(t.assignment)]
            applied = await self.elect(parts)
            log.debug("failover elections done", elected=len(applied), elect_s=self._since_start())
            created = {(tr.topic, tr.partition) for tr in applied if tr.create}
            self.send_full_states(self.ctx.brokers, new_parts=created)
            log.debug("full state sent", sent_s=self._since_start())
            await self.deleter.on_delete_topics_change()
            await self.reassigner.resume()
            await self.place_shards()
            await self.elastic.start()
        except (
            ControllerMovedError,
            NotControllerError,
            SessionExpiredError,
            ConnectionLoss,
            OperationTimeoutError,
            ConnectionClosedError,
        ):
            raise
        except Exception as exc:  # noqa: BLE001 - Kafka: any failover error moves the controller
            raise _FailoverError(str(exc)) from exc
        self.failover_done = True
        self.metrics.update(self.ctx)
        log.info("controller failover finished", epoch=self.epoch, finished_s=self._since_start())

    async def place_shards(self) -> None:
        """Place the shards of ``__consumer_offsets`` on the live group coordinators and of
        ``__transaction_state`` on the live transaction coordinators."""
        for placer in (self.shards, self.txn_shards):
            topic = self.ctx.topics.get(placer.kind.topic)
            if topic is None or topic.name in self.ctx.topics_to_delete:
                await placer.reconcile(None)  # gone or going: owners resign
            else:
                await placer.reconcile(len(topic.assignment), topic.topic_id)
        self.metrics.update_shards(self.shards.placed)

    async def _add_topic(self, topic: TopicState, fresh_id: bool) -> None:
        """Put a topic read from ZooKeeper into the context; give it a topic id if it has none."""
        if fresh_id:
            got = await zkstore.read_assignment(self.zk, topic.name)
            if got is None:
                return
            await self.guard.commit(
                [SetData(layout.topic_path(topic.name), topic.assignment_json(), got[2])]
            )
            log.info("assigned topic id", topic=topic.name, topic_id=topic.topic_id)
        self.ctx.topics[topic.name] = topic
        self.ctx.topic_changed(topic.name)
        self.watch_topic(topic.name)

    def eligible_topics(self) -> list[TopicState]:
        return [t for n, t in sorted(self.ctx.topics.items()) if n not in self.ctx.topics_to_delete]

    # ---- elections ------------------------------------------------------------------------
    def _unclean(self, topic: TopicState) -> bool:
        """Topic override, else the cluster-wide dynamic default, else this controller's
        setting (a controller is no broker, so no per-broker value applies)."""
        raw = topic.config.get(UNCLEAN) or self.broker_configs.entity(DEFAULT_ENTITY).get(UNCLEAN)
        if raw is None:
            return self.settings.unclean_leader_election_enable
        return raw.strip().lower() == "true"

    def _plan(self, parts: Iterable[Part]) -> list[Transition]:
        out: list[Transition] = []
        for topic, p in parts:
            live = self.ctx.live_for(topic.name, p)
            replicas = topic.assignment[p]
            st = topic.states.get(p)
            if st is None:
                li = initial_leader_isr(replicas, live)
                if li is not None:
                    out.append(Transition(topic.name, p, li.leader, li.isr, True))
            else:
                li = next_leader_isr(replicas, st.leader, st.isr, live, self._unclean(topic))
                if li is not None:
                    out.append(Transition(topic.name, p, li.leader, li.isr, False))
        return out

    async def elect(
        self,
        parts: Sequence[Part],
        plan: Callable[[Sequence[Part]], list[Transition]] | None = None,
    ) -> list[Transition]:
        """Bring partitions to their right leader/ISR for the live brokers and write the result
        (``plan``: what is right; by default failover, Kafka's offline-partition election).

        A state znode changed by someone else (a leader shrinking its ISR) fails the guarded
        multi: re-read those partitions and plan again.
        """
        started = time.monotonic()
        for attempt in range(ELECTION_ATTEMPTS):
            transitions = (plan or self._plan)(parts)
            if not transitions:
                return []
            try:
                await self.write_transitions(transitions)
            except zkstore.ZkOpError as exc:
                if attempt == ELECTION_ATTEMPTS - 1 or not isinstance(
                    exc.cause, BadVersionError | NodeExistsError | NoNodeError
                ):
                    raise
                log.info("partition state changed underneath, re-reading", path=exc.op.path)
                await self.reload_states(parts)
                continue
            leader_changes = [t for t in transitions if t.leader != NO_LEADER]
            if leader_changes:
                self.metrics.leader_election_ms.observe((time.monotonic() - started) * 1000)
            offline = [f"{t.topic}-{t.partition}" for t in transitions if t.leader == NO_LEADER]
            if offline:
                log.warning(
                    "partitions offline: no live in-sync replica",
                    partitions=offline[:20],
                    count=len(offline),
                )
            return transitions
        return []

    async def reload_states(self, parts: Sequence[Part]) -> None:
        found = await zkstore.read_partition_states(self.zk, [(t.name, p) for t, p in parts])
        for topic, p in parts:
            st = found.get((topic.name, p))
            if st is None:
                topic.states.pop(p, None)
            else:
                topic.states[p] = st

    async def write_transitions(
        self, transitions: Sequence[Transition], extra_ops: Sequence[Op] = ()
    ) -> None:
        """Write new leader/ISR states (epoch-guarded) and update the context."""
        ops: list[Op] = list(extra_ops)
        epoch = self.ctx.epoch
        made_parents = {op.path for op in extra_ops if isinstance(op, Create)}
        for tr in transitions:
            topic = self.ctx.topics[tr.topic]
            path = layout.partition_state_path(tr.topic, tr.partition)
            if tr.create:
                for parent in (
                    layout.partitions_path(tr.topic),
                    layout.partition_path(tr.topic, tr.partition),
                ):
                    if parent not in made_parents and await self.zk.exists(parent) is None:
                        ops.append(Create(parent))
                    made_parents.add(parent)
                data = layout.PartitionStateZk(tr.leader, 0, list(tr.isr), epoch).to_json()
                ops.append(Create(path, data))
            else:
                st = topic.states[tr.partition]
                data = layout.PartitionStateZk(
                    tr.leader, st.leader_epoch + 1, list(tr.isr), epoch
                ).to_json()
                ops.append(SetData(path, data, st.zk_version))
        results = await self.guard.commit(ops)
        by_path = dict(zip((op.path for op in ops), results, strict=True))
        for tr in transitions:
            topic = self.ctx.topics[tr.topic]
            if tr.create:
                topic.states[tr.partition] = PartitionState(tr.leader, 0, list(tr.isr), epoch, 0)
            else:
                st = topic.states[tr.partition]
                stat = by_path[layout.partition_state_path(tr.topic, tr.partition)]
                topic.states[tr.partition] = PartitionState(
                    tr.leader, st.leader_epoch + 1, list(tr.isr), epoch, stat.version
                )

    # ---- orders ---------------------------------------------------------------------------
    def send_states(
        self, parts: Iterable[tuple[str, int]], *, is_new: bool = False, skip: Collection[int] = ()
    ) -> AckMap:
        """UpdatePartitions with the current state of ``parts`` to each live replica (partitions
        without a leader/ISR state yet are skipped)."""
        batches: dict[int, list[storage_pb2.PartitionState]] = {}
        for name, p in parts:
            topic = self.ctx.topics[name]
            if p not in topic.states:
                continue
            for r in topic.assignment[p]:
                if (
                    r in self.ctx.brokers
                    and r not in skip
                    and (name, p) not in self.ctx.offline_replicas.get(r, ())
                ):
                    batches.setdefault(r, []).append(topic.order(p, is_new=is_new))
        acks: AckMap = {}
        for broker_id, states in sorted(batches.items()):
            link = self.links.get(broker_id)
            if link is not None:
                acks[broker_id] = self._watch_storage_errors(
                    broker_id, link.update_partitions(states)
                )
        return acks

    def send_full_state(
        self, broker_id: int, new_parts: Collection[tuple[str, int]] = ()
    ) -> asyncio.Future[OrderResult] | None:
        """Everything a (re)registered storage node must know: all its partitions."""
        return self.send_full_states([broker_id], new_parts).get(broker_id)

    def send_full_states(
        self, broker_ids: Iterable[int], new_parts: Collection[tuple[str, int]] = ()
    ) -> AckMap:
        """:meth:`send_full_state` to each of ``broker_ids`` that has a link. Each is sent once
        no other order waits on its link, and built then (``update_partitions_when_idle``)."""
        acks: AckMap = {}
        for broker_id in sorted(set(broker_ids)):
            link = self.links.get(broker_id)
            if link is None:
                continue
            fut = link.update_partitions_when_idle(
                functools.partial(self._full_state, broker_id, new_parts)
            )
            fut.add_done_callback(_log_full_state_ack(broker_id))
            acks[broker_id] = self._watch_storage_errors(broker_id, fut)
        return acks

    def _full_state(
        self, broker_id: int, new_parts: Collection[tuple[str, int]]
    ) -> list[storage_pb2.PartitionState]:
        states = [
            t.order(p, is_new=(t.name, p) in new_parts)
            for t, p in self.ctx.partitions_on(broker_id)
        ]
        log.info("sending full state", broker=broker_id, partitions=len(states))
        return states

    # ---- offline replicas (KIP-112) ---------------------------------------------------------
    def _watch_storage_errors(
        self, broker_id: int, fut: asyncio.Future[OrderResult]
    ) -> asyncio.Future[OrderResult]:
        """Replicas a node answers KAFKA_STORAGE_ERROR for are offline (Kafka's handling of
        LeaderAndIsr responses): they are re-led elsewhere and leave the ISRs."""

        def done(f: asyncio.Future[OrderResult]) -> None:
            if f.cancelled() or f.exception() is not None:
                return
            offline = sorted(
                (t, p)
                for t, p, code in f.result().partition_errors
                if code == ErrorCode.KAFKA_STORAGE_ERROR
            )
            if offline:
                self.enqueue(
                    f"ReplicasOffline({broker_id})",
                    lambda: self._on_replicas_offline(broker_id, offline),
                )

        fut.add_done_callback(done)
        return fut

    async def _on_replicas_offline(self, broker_id: int, parts: list[tuple[str, int]]) -> None:
        if broker_id not in self.ctx.brokers:
            return  # gone or restarted since: its registration decides again
        known = self.ctx.offline_replicas.setdefault(broker_id, set())
        fresh = [tp for tp in parts if tp not in known]
        if not fresh:
            return
        known.update(fresh)
        log.warning(
            "replicas offline on a failed log dir",
            broker=broker_id,
            partitions=[f"{t}-{p}" for t, p in fresh[:20]],
            count=len(fresh),
        )
        elect = [
            (self.ctx.topics[t], p)
            for t, p in fresh
            if t in self.ctx.topics and t not in self.ctx.topics_to_delete
        ]
        applied = await self.elect(elect)
        self.send_states((tr.topic, tr.partition) for tr in applied)

    async def _on_log_dir_event(self) -> None:
        """``/log_dir_event_notification/log_dir_event_<seq>`` ``{"broker": id, "event": 1}``:
        ask those nodes which of their replicas are offline (their answer to the full state),
        then consume the notices (Kafka's LogDirEventNotification handling)."""
        path = layout.LOG_DIR_EVENT_NOTIFICATION
        children = sorted(await self.zk.get_children(path))
        if not children:
            return
        brokers: set[int] = set()
        for child in children:
            got = await self.zk.get_or_none(f"{path}/{child}")
            body = layout.loads(got[0]) if got else None
            try:
                brokers.add(int((body or {})["broker"]))
            except (KeyError, TypeError, ValueError):
                log.warning("ignoring malformed log dir event", znode=child)
        log.info("log dir failure reported", brokers=sorted(brokers))
        for broker_id in sorted(brokers & set(self.ctx.brokers)):
            self.send_full_state(broker_id)
        await self.guard.commit([zkstore.Delete(f"{path}/{c}") for c in children])

    # ---- broker changes -------------------------------------------------------------------
    async def refresh_brokers(self) -> None:
        """Apply the registrations ZooKeeper holds now (what the broker watch's next event would
        do; idempotent): for a request naming a broker that registered a moment ago. On the
        event worker; an early event (CreateTopics) finishes the failover first, as the broker
        event would."""
        await self._finish_failover()
        await self._on_broker_change()

    async def _on_broker_change(self) -> None:
        current = await zkstore.read_brokers(self.zk)
        old = self.ctx.brokers
        dead = set(old) - set(current)
        new = set(current) - set(old)
        bounced = {i for i in set(old) & set(current) if old[i].epoch != current[i].epoch}
        moved = {
            i
            for i in set(old) & set(current) - bounced
            if old[i].registration.address != current[i].registration.address
        }
        if not (dead or new or bounced or moved):
            return
        log.info(
            "broker change",
            new=sorted(new),
            dead=sorted(dead),
            bounced=sorted(bounced),
            moved=sorted(moved),
        )
        gone = dead | bounced
        was_shutting_down = bool(self.ctx.shutting_down & (gone | moved))
        for broker_id in sorted(gone | moved):
            await self.links.remove(broker_id)
            del self.ctx.brokers[broker_id]
            self.ctx.offline_replicas.pop(broker_id, None)
            self.ctx.shutting_down.discard(broker_id)
        if gone:
            await self._on_brokers_failure(gone)
        started = new | bounced | moved
        for broker_id in sorted(started):
            self.ctx.brokers[broker_id] = current[broker_id]
            self.links.add(broker_id, current[broker_id].registration.address)
        if was_shutting_down:
            # a node back from its controlled shutdown may rejoin the ISRs: leaders whose
            # partitions get no new order from this change learn it too
            self.links.announce_ineligible()
        if started:
            await self._on_brokers_startup(started)
        if new:
            self.elastic.on_brokers_added(new)

    async def _on_brokers_failure(self, dead: set[int]) -> None:
        parts = [
            (t, p)
            for t in self.eligible_topics()
            for p, replicas in sorted(t.assignment.items())
            if any(r in dead for r in replicas)
        ]
        applied = await self.elect(parts)
        self.send_states((tr.topic, tr.partition) for tr in applied)

    async def _elect_offline_partitions(self) -> None:
        """Kafka's triggerOnlinePartitionStateChange, run when the cluster-wide
        unclean.leader.election.enable changes: leaderless partitions may now get a leader."""
        live = self.ctx.live_ids
        parts = [
            (t, p)
            for t in self.eligible_topics()
            for p in sorted(t.assignment)
            if (st := t.states.get(p)) is not None and st.leader not in live
        ]
        applied = await self.elect(parts)
        self.send_states([(tr.topic, tr.partition) for tr in applied])

    async def _on_brokers_startup(self, started: set[int]) -> None:
        live = self.ctx.live_ids
        parts = [
            (t, p)
            for t in self.eligible_topics()
            for p in sorted(t.assignment)
            if (st := t.states.get(p)) is None or st.leader == NO_LEADER or st.leader not in live
        ]
        applied = await self.elect(parts)
        created = {(tr.topic, tr.partition) for tr in applied if tr.create}
        self.send_full_states(started, new_parts=created)
        self.send_states(
            [(tr.topic, tr.partition) for tr in applied if not tr.create], skip=started
        )
        self.send_states(sorted(created), is_new=True, skip=started)
        self.deleter.resume()
        await self.reassigner.on_brokers_startup(started)

    # ---- topic changes --------------------------------------------------------------------
    async def _on_delete_topics_change(self) -> None:
        await self.deleter.on_delete_topics_change()
        await self.reassigner.forget_deleted()

    async def _on_topic_change(self) -> None:
        names = set(await self.zk.get_children(layout.BROKER_TOPICS))
        removed = set(self.ctx.topics) - names
        for name in sorted(removed):
            log.warning("topic removed from ZooKeeper by someone else", topic=name)
            self.ctx.topics.pop(name, None)
            self.ctx.topics_to_delete.discard(name)
            self.ctx.topic_changed(name)
        added: list[TopicState] = []
        for name in sorted(names - set(self.ctx.topics)):
            got = await zkstore.read_topic(self.zk, name)
            if got is not None:
                await self._add_topic(*got)
                added.append(got[0])
                log.info(
                    "new topic found in ZooKeeper", topic=name, partitions=len(got[0].assignment)
                )
        await self._bring_online(added, {t.name: sorted(t.assignment) for t in added})
        if removed:
            await self.reassigner.forget_deleted()
        if layout.SHARDED_TOPICS & (removed | {t.name for t in added}):
            await self.place_shards()

    async def _on_partition_modification(self, name: str) -> None:
        topic = self.ctx.topics.get(name)
        if topic is None or name in self.ctx.topics_to_delete:
            return
        got = await zkstore.read_assignment(self.zk, name)
        if got is None:
            return
        added = {p: r for p, r in got[0].items() if p not in topic.assignment}
        if not added:
            return
        log.info("new partitions found in ZooKeeper", topic=name, partitions=sorted(added))
        topic.assignment.update(added)
        self.ctx.topic_changed(name)
        await self.reload_states([(topic, p) for p in added])
        await self._bring_online([topic], {name: sorted(added)})
        if name in layout.SHARDED_TOPICS:
            await self.place_shards()

    async def _bring_online(
        self, topics: Sequence[TopicState], parts: dict[str, list[int]]
    ) -> None:
        """Elect leaders for new partitions and order their replicas."""
        all_parts = [(t, p) for t in topics for p in parts[t.name]]
        await self.elect(all_parts)
        self.send_states([(t.name, p) for t, p in all_parts], is_new=True)

    async def _on_isr_change_notification(self) -> None:
        """Leaders changed ISRs in ZooKeeper: refresh those partitions, consume the notices."""
        children = sorted(await self.zk.get_children(layout.ISR_CHANGE_NOTIFICATION))
        if not children:
            return
        started = time.monotonic()
        refresh: set[tuple[str, int]] = set()
        # one multiRead per window: a restarted node's expansions leave hundreds of notices
        notices = await self.zk.get_many(
            [f"{layout.ISR_CHANGE_NOTIFICATION}/{child}" for child in children]
        )
        for got in notices:
            body = layout.loads(got[0]) if got else None
            for entry in (body or {}).get("partitions", []):
                refresh.add((str(entry["topic"]), int(entry["partition"])))
        parts = [
            (self.ctx.topics[t], p)
            for t, p in sorted(refresh)
            if t in self.ctx.topics and p in self.ctx.topics[t].assignment
        ]
        await self.reload_states(parts)
        await self.guard.commit(
            [zkstore.Delete(f"{layout.ISR_CHANGE_NOTIFICATION}/{c}") for c in children]
        )
        await self.reassigner.on_isr_change(parts)
        log.debug(
            "ISR change notices processed",
            notices=len(children),
            partitions=len(parts),
            isr_s=round(time.monotonic() - started, 3),
        )


def _log_full_state_ack(broker_id: int) -> Callable[[asyncio.Future[OrderResult]], None]:
    issued = time.monotonic()

    def done(fut: asyncio.Future[OrderResult]) -> None:
        log.info(
            "full state acknowledged",
            broker=broker_id,
            outcome="cancelled" if fut.cancelled() else fut.result().outcome.value,
            ack_s=round(time.monotonic() - issued, 3),
        )

    return done


async def _nothing() -> None:
    """The event that finishes a failover nobody else's event finished (see ``_run``)."""
