"""Partition reassignment in the active controller (Kafka's ZooKeeper-mode KafkaController, KIP-455).

One entry point for every caller (AlterPartitionReassignments, the legacy znode, the planner,
decommission, the autoscaler, controlled shutdown)::

    errors = await controller.reassigner.submit({("t", 0): [3, 4, 5], ("t", 1): None})
    ongoing = await controller.reassigner.list_ongoing()  # {("t", 0): ReplicaAssignment}
    done = await controller.reassigner.wait_done([("t", 0)])  # False if the term ended first

``submit`` maps each partition to its target replicas (``None`` cancels) and returns, per
partition, ``None`` (accepted) or the KafkaError Kafka answers (UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS, INVALID_REPLICATION_FACTOR when the
replication factor may not change). Call it from outside controller events (it queues one);
code running as a controller event calls ``submit_in_event`` instead.

The state lives where Kafka keeps it: the topic znode's ``partitions`` (RS = target + removed),
``adding_replicas`` (AR) and ``removing_replicas`` (RR). The steps, per partition:

1. RS/AR/RR are written to the topic znode; replicas no longer wanted by a changed or cancelled
   reassignment leave the ISR and are deleted; a new leader epoch is ordered to every replica in
   RS (UpdatePartitions), so the added replicas are created and follow the leader.
2. When the leader's ISR change notification shows every target replica in the ISR, the
   partition's leader moves to the first live in-sync target replica if the leader is being
   removed (a new leader epoch either way) and the removed replicas leave the ISR, the target
   replicas are ordered, the removed ones get StopReplicas(delete), then the topic znode holds
   RS = target with no AR/RR, and the partition leaves ``/admin/reassign_partitions``.

Every step is idempotent and reads its input from ZooKeeper, so a new active controller resumes
a reassignment from the topic znodes and the legacy znode (:meth:`resume`), and a restarted
storage node gets its replicas from the full state every registration gets. A removed replica
whose node does not acknowledge its deletion is deleted again when the node registers again
(within this term).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping, Sequence

from kazoo.exceptions import NoNodeError

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.zk import layout
from services.controller.core import ControllerCore
from services.controller.elections import NO_LEADER
from services.controller.links import OrderResult
from services.controller.model import Part, TopicState, Transition
from services.controller.replica_assignment import ReplicaAssignment, validate_target
from services.controller.zkstore import Delete, Op, SetData, ZkOpError

log = get_logger("controller.reassignment")

TopicPartition = tuple[str, int]
Moves = Mapping[TopicPartition, Sequence[int] | None]

UNKNOWN_PARTITION = "The partition does not exist."


class Reassigner:
    def __init__(self, controller: ControllerCore) -> None:
        self.c = controller
        # partitions between step 1 and step 2 (a cancel with nothing left to add or remove may
        # wait here for its replicas to be back in the ISR)
        self._ongoing: set[TopicPartition] = set()
        self._waiters: dict[TopicPartition, list[asyncio.Future[bool]]] = {}
        # removed replicas whose deletion no node acknowledged yet, by node: sent again when the
        # node registers again (this term only)
        self._undeleted: dict[int, set[TopicPartition]] = {}

    # ---- the entry points ---------------------------------------------------------------
    async def submit(
        self, moves: Moves, *, allow_replication_factor_change: bool = True
    ) -> dict[TopicPartition, KafkaError | None]:
        """Start, change or cancel (target ``None``) reassignments; per partition the error."""
        result: dict[TopicPartition, KafkaError | None] = await self.c.call(
            "AlterPartitionReassignments",
            lambda: self._submit(dict(moves), allow_replication_factor_change, from_zk=False),
        )
        return result

    async def submit_in_event(
        self, moves: Moves, *, allow_replication_factor_change: bool = True
    ) -> dict[TopicPartition, KafkaError | None]:
        """``submit`` for code already running as a controller event (which must not queue
        another and wait for it)."""
        return await self._submit(dict(moves), allow_replication_factor_change, from_zk=False)

    async def list_ongoing(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """Partitions being reassigned (all, or those of ``partitions`` that are)."""
        result: dict[TopicPartition, ReplicaAssignment] = await self.c.call(
            "ListPartitionReassignments", lambda: self._list(partitions), read_only=True
        )
        return result

    def wait_done(self, partitions: Iterable[TopicPartition]) -> asyncio.Future[bool]:
        """Resolves True once none of ``partitions`` is being reassigned any more (False if
        this controller's term ends first)."""
        futs = []
        for tp in partitions:
            fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            if tp in self._ongoing or self._busy(tp):
                self._waiters.setdefault(tp, []).append(fut)
            else:
                fut.set_result(True)
            futs.append(fut)

        async def all_done() -> bool:
            return all(await asyncio.gather(*futs))

        return asyncio.ensure_future(all_done())

    def fail_waiters(self) -> None:
        for tp in list(self._waiters):
            self._resolve(tp, False)

    # ---- events (run on the controller's queue) -------------------------------------------
    async def resume(self) -> None:
        """A new term: continue every reassignment found in the topic znodes, then the
        legacy znode's (Kafka's initializePartitionReassignments)."""
        self._ongoing.clear()
        for topic in self.c.eligible_topics():
            moving = [
                p for p in sorted(set(topic.adding) | set(topic.removing)) if p in topic.assignment
            ]
            for p in moving:
                log.info("resuming partition reassignment", partition=f"{topic.name}-{p}")
                self._ongoing.add((topic.name, p))
            await self._advance(topic, moving, announce=True)
        await self.on_legacy_change()

    async def on_legacy_change(self) -> None:
        """``/admin/reassign_partitions`` was created or changed: start what it asks for;
        entries that cannot start are removed from it (Kafka's processZkPartitionReassignment)."""
        got = await self.c.zk.get_or_none(layout.REASSIGN_PARTITIONS)
        if got is None:
            return
        try:
            moves = layout.parse_reassign_partitions(got[0])
        except ValueError as exc:
            log.warning("removing malformed /admin/reassign_partitions", error=str(exc))
            await self._commit_ignoring_gone([Delete(layout.REASSIGN_PARTITIONS)])
            return
        results = await self._submit(dict(moves), True, from_zk=True)
        failed = {tp: e for tp, e in results.items() if e is not None}
        if failed:
            log.warning(
                "failed reassignment through zookeeper",
                errors={f"{t}-{p}": e.code.name for (t, p), e in sorted(failed.items())},
            )
            await self._remove_from_legacy(set(failed))

    async def on_isr_change(self, parts: Sequence[Part]) -> None:
        """ISRs changed (states already reloaded): complete reassignments now in sync."""
        for topic, p in parts:
            if (topic.name, p) in self._ongoing:
                await self._advance(topic, [p], announce=False)

    async def on_brokers_startup(self, started: Iterable[int]) -> None:
        """Nodes came back: removed replicas they still hold are deleted, and a reassignment
        waiting for a live leader may go on."""
        for broker_id in started:
            for name, p in sorted(self._undeleted.pop(broker_id, set())):
                topic = self.c.ctx.topics.get(name)
                if topic is not None and broker_id not in topic.assignment.get(p, [broker_id]):
                    self._stop_and_delete(topic, p, [broker_id])
        for name, p in sorted(self._ongoing):
            topic = self.c.ctx.topics.get(name)
            if topic is not None and p in topic.assignment:
                await self._advance(topic, [p], announce=False)

    async def forget_deleted(self) -> None:
        """Topics gone or queued for deletion end their reassignments (their waiters resolve;
        the legacy znode drops them): the deletion stops every replica of the full set."""
        ctx = self.c.ctx
        gone = {
            (t, p)
            for t, p in self._ongoing | set(self._waiters)
            if t not in ctx.topics or t in ctx.topics_to_delete
        }
        for tp in sorted(gone):
            self._finished(tp)
        got = await self.c.zk.get_or_none(layout.REASSIGN_PARTITIONS)
        if got is not None:
            with contextlib.suppress(ValueError):
                named = layout.parse_reassign_partitions(got[0])
                await self._remove_from_legacy(
                    {tp for tp in named if tp[0] not in ctx.topics or tp[0] in ctx.topics_to_delete}
                )

    # ---- submitting -----------------------------------------------------------------------
    async def _submit(
        self,
        moves: dict[TopicPartition, Sequence[int] | None],
        allow_rf_change: bool,
        from_zk: bool,
    ) -> dict[TopicPartition, KafkaError | None]:
        ctx = self.c.ctx
        out: dict[TopicPartition, KafkaError | None] = {}
        accepted: dict[str, dict[int, ReplicaAssignment]] = {}
        for (name, p), target in moves.items():
            try:
                topic = ctx.topics.get(name)
                if topic is None or name in ctx.topics_to_delete or p not in topic.assignment:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_PARTITION)
                current = self._of(topic, p)
                if target is None:
                    if not current.is_being_reassigned and (name, p) not in self._ongoing:
                        raise KafkaError(
                            ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                            f"No reassignment is in progress for partition {name}-{p}",
                        )
                    target = current.origin
                else:
                    validate_target(current, target, ctx.live_ids)
                    if not allow_rf_change and len(target) != len(current.origin):
                        raise KafkaError(
                            ErrorCode.INVALID_REPLICATION_FACTOR,
                            f"The replication factor is changed from {len(current.origin)} "
                            f"to {len(target)}",
                        )
                accepted.setdefault(name, {})[p] = current.reassign_to(target)
                out[(name, p)] = None
            except KafkaError as exc:
                out[(name, p)] = exc
        for name, wanted in sorted(accepted.items()):
            await self._start(ctx.topics[name], wanted)
        if not from_zk:  # the API takes over partitions the legacy znode named
            await self._remove_from_legacy({(n, p) for n, ps in accepted.items() for p in ps})
        return out

    async def _start(self, topic: TopicState, wanted: dict[int, ReplicaAssignment]) -> None:
        """Step 1 for some partitions of one topic (Kafka's updateCurrentReassignment and
        onPartitionReassignment's first half)."""
        before = {p: self._of(topic, p) for p in wanted}
        changed = {p: a for p, a in wanted.items() if a != before[p]}
        if changed:
            await self._write_assignment(topic, changed)
        moving: list[int] = []
        for p, a in sorted(wanted.items()):
            old = before[p]
            unneeded = [r for r in old.replicas if r not in a.replicas]
            if unneeded:  # replicas a changed or cancelled reassignment no longer adds
                await self._remove_replicas(topic, p, a.replicas, unneeded)
            if p not in changed and (topic.name, p) in self._ongoing:
                continue  # the same target again: nothing to redo
            log.info(
                "partition reassignment started"
                if old == ReplicaAssignment(old.replicas)
                else "partition reassignment changed",
                partition=f"{topic.name}-{p}",
                replicas=list(a.replicas),
                adding=list(a.adding),
                removing=list(a.removing),
                origin=list(a.origin),
                target=list(a.target),
            )
            self._ongoing.add((topic.name, p))
            moving.append(p)
        await self._advance(topic, moving, announce=True)

    # ---- the steps ------------------------------------------------------------------------
    async def _advance(
        self, topic: TopicState, partitions: Sequence[int], *, announce: bool
    ) -> None:
        """Complete the reassignments whose target replicas are in the ISR; when ``announce``,
        order the full replica set of the others with a new leader epoch (one election and one
        order per node for all of them)."""
        if topic.name in self.c.ctx.topics_to_delete or topic.name not in self.c.ctx.topics:
            for p in partitions:
                self._finished((topic.name, p))
            return
        waiting: list[Part] = []
        for p in partitions:
            a = self._of(topic, p)
            st = topic.states.get(p)
            if st is not None and set(a.target) <= set(st.isr):
                await self._complete(topic, p, a)
            else:
                waiting.append((topic, p))
        if announce and waiting:
            await self.c.elect(waiting, plan=self._plan_same_leader)
            self.c.send_states([(t.name, p) for t, p in waiting])

    async def _complete(self, topic: TopicState, p: int, a: ReplicaAssignment) -> None:
        """Step 2 (Kafka's onPartitionReassignment, B1-B8)."""
        target = list(a.target)
        removed = [r for r in a.replicas if r not in target]
        if not await self._shrink(topic, p, target, removed):
            log.info(
                "partition reassignment waits for a live in-sync target replica",
                partition=f"{topic.name}-{p}",
                target=target,
            )
            return
        await self._write_assignment(topic, {p: ReplicaAssignment(tuple(target))})
        self.c.send_states([(topic.name, p)])
        self._stop_and_delete(topic, p, removed)
        await self._remove_from_legacy({(topic.name, p)})
        log.info(
            "partition reassignment completed",
            partition=f"{topic.name}-{p}",
            replicas=target,
            removed=removed,
        )
        self._finished((topic.name, p))

    async def _remove_replicas(
        self, topic: TopicState, p: int, keep: Sequence[int], removed: Sequence[int]
    ) -> None:
        """Replicas leave the partition at once (out of the ISR, leadership moved, deleted)."""
        await self._shrink(topic, p, list(keep), list(removed))
        self.c.send_states([(topic.name, p)])
        self._stop_and_delete(topic, p, removed)

    async def _shrink(self, topic: TopicState, p: int, keep: list[int], removed: list[int]) -> bool:
        """A new leader epoch where the leader is one of ``keep`` (the current one if it is,
        else the first live in-sync one of ``keep``) and the ISR holds no removed replica.
        False when no replica of ``keep`` can lead."""
        if topic.states.get(p) is None:
            return True  # never had a leader: nothing to move

        def plan(parts: Sequence[Part]) -> list[Transition]:
            out: list[Transition] = []
            for t, q in parts:
                st = t.states.get(q)
                if st is None:
                    continue
                live = self.c.ctx.live_for(t.name, q)
                if st.leader in keep and st.leader in live:
                    leader = st.leader
                else:
                    leader = next((r for r in keep if r in st.isr and r in live), NO_LEADER)
                if leader == NO_LEADER:
                    continue
                isr = [r for r in st.isr if r not in removed] or list(st.isr)
                out.append(Transition(t.name, q, leader, tuple(isr), False))
            return out

        if not plan([(topic, p)]):
            return False
        return bool(await self.c.elect([(topic, p)], plan=plan))

    def _plan_same_leader(self, parts: Sequence[Part]) -> list[Transition]:
        """A new leader epoch with the same leader and ISR (Kafka's
        updateLeaderEpochAndSendRequest); nothing for a partition without a live leader."""
        out: list[Transition] = []
        for topic, p in parts:
            st = topic.states.get(p)
            if st is not None and st.leader in self.c.ctx.live_for(topic.name, p):
                out.append(Transition(topic.name, p, st.leader, tuple(st.isr), False))
        return out

    def _stop_and_delete(self, topic: TopicState, p: int, removed: Iterable[int]) -> None:
        """StopReplicas(delete) to the nodes of removed replicas; a node that is down (or does
        not answer) gets it again when it registers again during this term."""
        st = topic.states.get(p)
        epoch = st.leader_epoch if st is not None else 0
        tp = (topic.name, p)
        for broker_id in removed:
            self._undeleted.setdefault(broker_id, set()).add(tp)
            link = self.c.links.get(broker_id)
            if link is None:
                log.warning(
                    "removed replica's node is not live; deleting it when the node returns",
                    partition=f"{topic.name}-{p}",
                    broker=broker_id,
                )
                continue

            def acked(f: asyncio.Future[OrderResult], broker_id: int = broker_id) -> None:
                if not f.cancelled() and f.exception() is None and f.result().ok:
                    self._undeleted.get(broker_id, set()).discard(tp)

            link.stop_replicas([(topic.name, p, epoch)], delete=True).add_done_callback(acked)

    # ---- ZooKeeper ------------------------------------------------------------------------
    async def _write_assignment(
        self, topic: TopicState, changes: dict[int, ReplicaAssignment]
    ) -> None:
        """The topic znode with ``changes`` (then the context): RS, AR and RR per partition."""
        assignment = dict(topic.assignment)
        adding, removing = dict(topic.adding), dict(topic.removing)
        for p, a in changes.items():
            assignment[p] = list(a.replicas)
            adding[p], removing[p] = list(a.adding), list(a.removing)
        adding = {p: r for p, r in adding.items() if r}
        removing = {p: r for p, r in removing.items() if r}
        data = layout.topic_assignment_json(assignment, topic.topic_id, adding, removing)
        await self.c.guard.commit([SetData(layout.topic_path(topic.name), data)])
        topic.assignment, topic.adding, topic.removing = assignment, adding, removing
        self.c.ctx.topic_changed(topic.name)

    async def _remove_from_legacy(self, done: set[TopicPartition]) -> None:
        """Drop partitions from ``/admin/reassign_partitions``; delete it once empty."""
        got = await self.c.zk.get_or_none(layout.REASSIGN_PARTITIONS)
        if got is None or not done:
            return
        try:
            moves = layout.parse_reassign_partitions(got[0])
        except ValueError:
            return  # on_legacy_change removes it
        left = {tp: r for tp, r in moves.items() if tp not in done}
        if len(left) == len(moves):
            return
        version = got[1].version
        if left:
            op: Op = SetData(
                layout.REASSIGN_PARTITIONS, layout.reassign_partitions_json(left), version
            )
        else:
            op = Delete(layout.REASSIGN_PARTITIONS, version)
        await self._commit_ignoring_gone([op])

    async def _commit_ignoring_gone(self, ops: list[Op]) -> None:
        try:
            await self.c.guard.commit(ops)
        except ZkOpError as exc:
            if not isinstance(exc.cause, NoNodeError):
                raise

    # ---- helpers --------------------------------------------------------------------------
    @staticmethod
    def _of(topic: TopicState, p: int) -> ReplicaAssignment:
        return ReplicaAssignment(
            tuple(topic.assignment[p]),
            tuple(topic.adding.get(p, ())),
            tuple(topic.removing.get(p, ())),
        )

    def _assignment(self, tp: TopicPartition) -> ReplicaAssignment | None:
        topic = self.c.ctx.topics.get(tp[0])
        if topic is None or tp[1] not in topic.assignment:
            return None
        return self._of(topic, tp[1])

    def _busy(self, tp: TopicPartition) -> bool:
        a = self._assignment(tp)
        return a is not None and a.is_being_reassigned

    async def _list(
        self, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        out: dict[TopicPartition, ReplicaAssignment] = {}
        if partitions is None:
            wanted = [
                (t.name, p)
                for t in self.c.eligible_topics()
                for p in sorted(set(t.adding) | set(t.removing))
            ]
        else:
            wanted = list(dict.fromkeys(partitions))
        for tp in wanted:
            a = self._assignment(tp)
            if a is not None and a.is_being_reassigned:
                out[tp] = a
        return out

    def _finished(self, tp: TopicPartition) -> None:
        self._ongoing.discard(tp)
        self._resolve(tp, True)

    def _resolve(self, tp: TopicPartition, value: bool) -> None:
        for fut in self._waiters.pop(tp, []):
            if not fut.done():
                fut.set_result(value)
