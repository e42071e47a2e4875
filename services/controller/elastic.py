"""Elastic storage in the active controller: rebalance onto new nodes, decommission, autoscaler.

A loop of this term (every ``kafkapy.rebalance.check.interval.ms``, sooner when woken) looks at
the cluster - assignments and reassignments in flight from the controller's context, disk use
from ``/kafka-py/storage-usage`` - and does at most one of:

1. **drain**: nodes being decommissioned (``state.draining``) still host replicas: plan with them
   excluded (services.controller.planner) and submit the next moves, at most
   ``kafkapy.rebalance.max.concurrent.moves`` running at once; once they host nothing (and so
   lead nothing) ask the provisioner to remove them (when the drain asked for it);
2. **rebalance**: a node joined (or the autoscaler added some): plan and submit moves until the
   plan is empty;
3. **autoscale** (``kafkapy.autoscaler.enable``), with nothing moving: one decision of
   services.controller.autoscale_policy; scale up = ask the provisioner for nodes (they join,
   which starts 2); scale down = drain the highest id (1), then remove it.

Moves go through the reassignment engine (``controller.reassigner``), the same entry point as
AlterPartitionReassignments, so a partition never loses its last in-sync replica: new replicas
join the ISR before old ones leave. What the loop is doing lives in ``/kafka-py/autoscaler``
(epoch-guarded writes), so the next active controller carries on where this one stopped; the
moves themselves are resumed by the reassignment engine from the topic znodes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2
from services.common.zk import elastic
from services.common.zk.elastic import AutoscalerState, StorageUsage
from services.controller.autoscale_policy import (
    HOLD,
    SCALE_DOWN,
    SCALE_UP,
    Decision,
    NodeLoad,
    Policy,
    decide,
    disk_percent,
)
from services.controller.core import ControllerCore, NotControllerError
from services.controller.elastic_metrics import ElasticMetrics
from services.controller.leader_balance import LeaderBalancer
from services.controller.planner import Node, Plan, PlanError, next_moves, plan
from services.controller.provisioners.base import (
    NodeProvisioner,
    ProvisionerError,
    top_ordinals,
)
from services.controller.rebalance_throttle import RebalanceThrottle
from services.controller.replica_counts import ReplicaCounts
from services.controller.zkstore import ControllerMovedError, Create, SetData

log = get_logger("controller.elastic")

TopicPartition = tuple[str, int]
FIRST_LOOK_S = 1.0


class Reassigning(Protocol):
    """What this module uses of the reassignment engine (services.controller.reassignment)."""

    async def submit(
        self,
        moves: Mapping[TopicPartition, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
    ) -> Mapping[TopicPartition, Exception | None]: ...

    async def list_ongoing(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> Mapping[TopicPartition, Any]: ...


class ElasticError(Exception):
    """A request was refused; the message is one readable line."""


@dataclass(slots=True)
class Snapshot:
    """The cluster as the planner sees it, read in one go from the controller's context."""

    current: dict[TopicPartition, list[int]]  # a moving partition's target, else its replicas
    hosting: set[int]  # nodes with any replica, moving ones included (origin and target)
    leaders: dict[int, int]  # node -> partitions it leads
    live: dict[int, str | None]  # live storage node -> zone
    in_flight: dict[TopicPartition, tuple[int, ...]]  # partition -> target replicas
    max_rf: int
    replicas: dict[int, int]  # node -> partitions with a replica there (``current``'s)
    complete: bool = True  # False: ``current`` and ``leaders`` left empty (nothing to plan)
    sizes: dict[TopicPartition, int] | None = None  # asked of the nodes when first planned

    def replicas_on(self, node: int) -> int:
        return self.replicas.get(node, 0)


class ElasticStorage:
    def __init__(
        self,
        controller: ControllerCore,
        reassigner: Reassigning,
        provisioner: NodeProvisioner | None,
        metrics: ElasticMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.c = controller
        self.s = controller.settings
        self.reassigner = reassigner
        self.provisioner = provisioner
        self.metrics = metrics
        self.clock = clock
        self.state = AutoscalerState()
        self._state_version: int | None = None
        self.usage: dict[int, StorageUsage] = {}
        self.rates: dict[int, float] = {}  # node -> client bytes in per second
        self.submitted: dict[TopicPartition, int] = {}  # our moves in flight -> bytes to copy
        self.plan: Plan | None = None
        self.plan_error = ""
        self.decision: Decision | None = None
        self.snapshot: Snapshot | None = None
        self._ongoing: Mapping[TopicPartition, Any] = {}  # reassignments at the last look
        self.counts = ReplicaCounts(controller.ctx)  # replicas per node, kept from the changes
        self.evaluation: tuple[str, str, int] = ("", "", 0)  # the latest: action, reason, ms
        self.throttle = RebalanceThrottle(self.s.kafkapy_rebalance_throttle_bytes_per_sec)
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # one look at a time (the loop, decommission requests)

    @property
    def dry_run(self) -> bool:
        return self.s.kafkapy_autoscaler_dry_run

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ---- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Read what the previous controller was doing; run the loop for this term."""
        got = await self.c.zk.get_or_none(elastic.AUTOSCALER)
        self.state = AutoscalerState.from_json(got[0] if got else None)
        self._state_version = got[1].version if got else None
        if self.state.draining or self.state.rebalance_pending:
            log.info(
                "resuming elastic storage work",
                draining=self.state.draining,
                rebalance_pending=self.state.rebalance_pending,
            )
        self.metrics.enabled.set(1 if self.s.kafkapy_autoscaler_enable and not self.dry_run else 0)
        self.c.spawn(self.run(), "elastic-storage")

    async def run(self) -> None:
        await asyncio.sleep(FIRST_LOOK_S)
        interval = self.s.kafkapy_rebalance_check_interval_ms / 1000
        while self.c.running:
            try:
                async with self._lock:
                    await self.look()
            except (ControllerMovedError, NotControllerError):
                log.info("elastic storage stops: this controller's term ended")
                return
            except Exception:  # noqa: BLE001 - the loop must outlive one bad look
                log.exception("elastic storage look failed")
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), interval)
            except TimeoutError:
                pass

    def wake(self) -> None:
        self._wake.set()

    def on_brokers_added(self, ids: Collection[int]) -> None:
        """Storage nodes registered: those hosting no replica are new (a node coming back keeps
        its replicas and is left alone, as Kafka does); spread replicas onto them."""
        if not self.s.kafkapy_rebalance_enable or not ids:
            return
        hosting = {b for t in self.c.eligible_topics() for r in t.assignment.values() for b in r}
        ids = sorted(set(ids) - hosting)
        if not ids or not hosting:
            return  # nothing new, or nothing to spread yet
        log.info("storage nodes joined, rebalancing onto them", brokers=sorted(ids))
        self.c.spawn(self._want_rebalance(), "elastic-rebalance-request")

    async def _want_rebalance(self) -> None:
        async with self._lock:
            if not self.state.rebalance_pending:
                self.state.rebalance_pending = True
                await self._save()
        self.wake()

    # ---- one look -----------------------------------------------------------------------------
    async def look(self) -> None:
        ongoing = self._ongoing = await self.reassigner.list_ongoing()
        await self._read_usage()
        # every partition is visited only when moves may be planned: an idle cluster's look
        # costs the same at 100 and at 10,000 partitions, autoscaler on or off (issue 19; the
        # autoscaler's replicas per node are kept by services.controller.replica_counts)
        planning = bool(self.state.draining or self.state.rebalance_pending)
        snap = self._snapshot(ongoing, partitions=planning)
        self.snapshot = snap
        for tp in [tp for tp in self.submitted if tp not in snap.in_flight]:
            self.metrics.bytes_moved.inc(self.submitted.pop(tp))
        if self.state.draining:
            await self._drain(snap)
        elif self.state.rebalance_pending:
            await self._rebalance(snap)
        else:
            self.plan, self.plan_error = None, ""
        idle = not (snap.in_flight or self.state.draining or self.state.rebalance_pending)
        throttled = self.state.throttled_topics or self.state.throttled_brokers
        if (
            idle
            and throttled
            and await self.throttle.clear(self.state, {t.name for t in self.c.eligible_topics()})
        ):
            await self._save()
        if self.s.kafkapy_autoscaler_enable:
            await self._autoscale(snap)
        self._export(snap)

    def _snapshot(
        self, ongoing: Mapping[TopicPartition, Any], *, partitions: bool = True
    ) -> Snapshot:
        """The cluster now, read from every partition; without ``partitions`` the counts per
        node come from :attr:`counts` and ``current`` and ``leaders`` are left empty (nothing is
        planned from it)."""
        in_flight = {tp: tuple(a.target) for tp, a in ongoing.items()}
        live = {b: lb.registration.rack for b, lb in self.c.ctx.brokers.items()}
        counts = self.counts.refresh()
        if not partitions:
            hosting = set(counts.hosting)
            return Snapshot(
                {}, hosting, {}, live, in_flight, counts.max_rf, dict(counts.replicas), False
            )
        current: dict[TopicPartition, list[int]] = {}
        hosting = set()
        leaders: dict[int, int] = {}
        replicas_on: dict[int, int] = {}
        for topic in self.c.eligible_topics():
            for p, replicas in topic.assignment.items():
                tp = (topic.name, p)
                hosting.update(replicas)
                current[tp] = list(in_flight.get(tp, replicas))
                for b in current[tp]:
                    replicas_on[b] = replicas_on.get(b, 0) + 1
                st = topic.states.get(p)
                if st is not None and st.leader >= 0:
                    leaders[st.leader] = leaders.get(st.leader, 0) + 1
        max_rf = max((len(r) for r in current.values()), default=0)
        return Snapshot(current, hosting, leaders, live, in_flight, max_rf, replicas_on)

    async def _replica_sizes(self, snap: Snapshot) -> dict[TopicPartition, int]:
        """The bytes of each partition's largest copy, asked now of every live storage node
        (Storage.DescribeLogDirs); a node that does not answer is logged and skipped (the other
        copies of its partitions still count; a partition with none counts 0)."""

        async def ask(broker: int) -> storage_pb2.DescribeLogDirsResponse | None:
            link = self.c.links.get(broker)
            if link is None:
                return None
            try:
                return await link.describe_log_dirs()
            except grpc.aio.AioRpcError as exc:
                log.warning("replica sizes unavailable", broker=broker, code=exc.code().name)
                return None

        sizes: dict[TopicPartition, int] = {}
        for resp in await asyncio.gather(*(ask(b) for b in sorted(snap.live))):
            for d in resp.log_dirs if resp is not None else ():
                for r in d.replicas:
                    tp = (r.topic, r.partition)
                    if tp in snap.current and r.size > sizes.get(tp, -1):
                        sizes[tp] = r.size
        return sizes

    async def _read_usage(self) -> None:
        try:
            children = await self.c.zk.get_children(elastic.STORAGE_USAGE)
        except Exception:  # noqa: BLE001 - no node has reported yet
            children = []
        fresh: dict[int, StorageUsage] = {}
        for child in children:
            got = await self.c.zk.get_or_none(f"{elastic.STORAGE_USAGE}/{child}")
            u = StorageUsage.from_json(got[0]) if got else None
            if u is None:
                continue
            old = self.usage.get(u.broker)
            if old is not None and u.timestamp_ms > old.timestamp_ms and u.bytes_in >= old.bytes_in:
                self.rates[u.broker] = (
                    (u.bytes_in - old.bytes_in) * 1000 / (u.timestamp_ms - old.timestamp_ms)
                )
            fresh[u.broker] = u
        self.usage = fresh

    def _nodes(self, snap: Snapshot, excluded: Collection[int]) -> list[Node]:
        """Planner nodes: the live ones, plus excluded ones that are down but still host data."""
        nodes = [
            Node(b, zone, self.usage[b].capacity_bytes if b in self.usage else None)
            for b, zone in sorted(snap.live.items())
        ]
        nodes += [Node(b) for b in sorted(set(excluded) - set(snap.live))]
        return nodes

    async def _plan(self, snap: Snapshot, excluded: Collection[int] = ()) -> Plan:
        if snap.sizes is None:
            snap.sizes = await self._replica_sizes(snap)
        return plan(
            snap.current,
            self._nodes(snap, excluded),
            snap.sizes,
            excluded=excluded,
            disk_tolerance=self.s.kafkapy_rebalance_disk_tolerance_percent / 100,
            max_fill_ratio=self.s.kafkapy_rebalance_max_fill_percent / 100,
        )

    async def _submit(self, p: Plan, snap: Snapshot, why: str) -> None:
        batch = next_moves(p.moves, snap.in_flight, self.s.kafkapy_rebalance_max_concurrent_moves)
        if not batch or self.dry_run:
            return
        if self.throttle.active:
            await self.throttle.apply(batch, self.state)
            await self._save()
        errors = await self.reassigner.submit({m.tp: list(m.new) for m in batch})
        accepted = [m for m in batch if errors.get(m.tp) is None]
        for m in accepted:
            self.submitted[m.tp] = m.bytes_to_copy
        log.info(
            "moves submitted",
            why=why,
            moves=[f"{m.tp[0]}-{m.tp[1]}:{list(m.old)}->{list(m.new)}" for m in accepted],
            bytes_to_copy=sum(m.bytes_to_copy for m in accepted),
            pending=len(p.moves) - len(accepted),
        )
        for m in batch:
            if (err := errors.get(m.tp)) is not None:
                log.warning("move refused", partition=f"{m.tp[0]}-{m.tp[1]}", error=str(err))

    # ---- drain --------------------------------------------------------------------------------
    async def _drain(self, snap: Snapshot) -> None:
        ids = set(self.state.draining)
        still = sorted(ids & snap.hosting)
        if still:
            try:
                self.plan = await self._plan(snap, ids)
            except PlanError as exc:
                self.plan, self.plan_error = None, str(exc)
                self._note(HOLD, f"drain of {_ids(ids)} blocked: {exc}")
                return
            self.plan_error = ""
            await self._submit(self.plan, snap, f"drain {_ids(ids)}")
            return
        self.plan = None
        if snap.in_flight:
            return  # their targets avoid the drained nodes; let them finish first
        await self._elect_preferred()
        if not self.state.remove_after_drain or self.provisioner is None:
            if not ids & set(snap.live):
                log.info("drained nodes are gone", brokers=sorted(ids))
                self.state.draining = []
                await self._save()
            else:
                self._note(HOLD, f"{_ids(ids)} drained: hosts and leads nothing; stop it")
            return
        if self.dry_run:
            return
        try:
            await self.provisioner.remove(sorted(ids), snap.hosting)
        except ProvisionerError as exc:
            self._note(HOLD, f"removing drained {_ids(ids)} failed: {exc}")
            return
        log.info("drained storage nodes removed", brokers=sorted(ids))
        self.state.draining, self.state.remove_after_drain = [], False
        self.state.last_scale_ms = self.now_ms()
        self._note(SCALE_DOWN, f"removed drained {_ids(ids)}")
        self._record(SCALE_DOWN, f"removed drained {_ids(ids)}")
        await self._save()

    # ---- rebalance ----------------------------------------------------------------------------
    async def _rebalance(self, snap: Snapshot) -> None:
        try:
            self.plan = await self._plan(snap)
        except PlanError as exc:
            self.plan, self.plan_error = None, str(exc)
            log.warning("rebalance refused", reason=str(exc))
            self.state.rebalance_pending = False
            await self._save()
            return
        self.plan_error = ""
        if self.plan.moves:
            await self._submit(self.plan, snap, "rebalance")
        elif not snap.in_flight:
            await self._elect_preferred()
            log.info("rebalance complete", replicas=self.plan.replicas, leaders=self.plan.leaders)
            self.state.rebalance_pending = False
            await self._save()

    async def _elect_preferred(self) -> None:
        """Moves done: every partition whose preferred (first) replica is live and in sync gets
        it back as leader, so leadership follows the planned spread now rather than at the next
        auto leader rebalance (which waits for an imbalance above its threshold)."""
        if self.dry_run:
            return

        async def elect() -> int:
            parts = [
                (t, p)
                for t in self.c.eligible_topics()
                for p, st in t.states.items()
                if p in t.assignment and t.assignment[p] and st.leader != t.assignment[p][0]
            ]
            applied = await self.c.elect(parts, plan=LeaderBalancer(self.c).plan)
            self.c.send_states((tr.topic, tr.partition) for tr in applied)
            return len(applied)

        moved = await self.c.call("ElasticPreferredLeaders", elect)
        if moved:
            log.info("preferred replicas elected after the moves", partitions=moved)

    # ---- autoscaler ---------------------------------------------------------------------------
    def policy(self) -> Policy:
        s = self.s
        return Policy(
            disk_target_percent=s.kafkapy_autoscaler_disk_target_percent,
            hysteresis_percent=s.kafkapy_autoscaler_hysteresis_percent,
            bytes_in_per_node_max=s.kafkapy_autoscaler_bytes_in_per_node_max,
            partitions_per_node_max=s.kafkapy_autoscaler_partitions_per_node_max,
            min_nodes=s.kafkapy_autoscaler_min_nodes,
            max_nodes=s.kafkapy_autoscaler_max_nodes,
            cooldown_ms=s.kafkapy_autoscaler_cooldown_ms,
        )

    def _busy(self, snap: Snapshot) -> str:
        if self.state.draining:
            return f"draining {_ids(self.state.draining)}"
        if snap.in_flight:
            return f"{len(snap.in_flight)} partition moves in flight"
        if self.state.rebalance_pending and not self.dry_run:  # a dry run never moves
            return "rebalance in progress"
        missing = sorted(set(snap.live) - set(self.usage))
        if missing:
            return f"waiting for the disk use of {_ids(missing)}"
        return ""

    async def _autoscale(self, snap: Snapshot) -> None:
        loads = {
            b: NodeLoad(
                self.usage[b].used_bytes if b in self.usage else 0,
                self.usage[b].capacity_bytes if b in self.usage else 0,
                self.rates.get(b, 0.0),
                snap.replicas_on(b),
            )
            for b in snap.live
        }
        d = decide(
            loads,
            self.policy(),
            min_nodes_for_data=snap.max_rf,
            busy=self._busy(snap),
            last_scale_ms=self.state.last_scale_ms,
            now_ms=self.now_ms(),
        )
        if d.action == SCALE_DOWN:
            if not snap.complete:  # a plan needs every partition: read them now
                snap = self.snapshot = self._snapshot(self._ongoing)
            try:
                self.plan = await self._plan(snap, d.remove)
            except PlanError as exc:
                d = Decision(HOLD, d.nodes + 1, f"{d.reason}, but refused: {exc}", needed=d.needed)
        self.decision = d
        self._note(d.action, d.reason)
        if d.action == HOLD:
            return
        if self.dry_run:
            self.state.desired_nodes = d.nodes
            return
        if self.provisioner is None:
            self._note(HOLD, f"{d.reason}; no provisioner (kafkapy.autoscaler.provisioner=none)")
            return
        if d.action == SCALE_UP:
            try:
                await self.provisioner.scale_to(d.nodes, snap.hosting)
            except ProvisionerError as exc:
                self._note(HOLD, f"scaling up to {d.nodes} failed: {exc}")
                return
            self.state.desired_nodes = d.nodes
            self.state.last_scale_ms = self.now_ms()
            self.state.rebalance_pending = True
            self._record(SCALE_UP, d.reason)
        else:
            self.state.desired_nodes = d.nodes
            self.state.draining = sorted(d.remove)
            self.state.remove_after_drain = True
            self._record(SCALE_DOWN, f"draining {_ids(d.remove)} to remove it: {d.reason}")
            log.info("draining storage nodes to remove them", brokers=list(d.remove))
        await self._save()
        self.wake()

    # ---- decommission -------------------------------------------------------------------------
    async def decommission(self, ids: Collection[int], *, dry_run: bool = False) -> Plan:
        """Drain ``ids`` then remove them (when a provisioner is configured); refused with one
        readable line (ElasticError) when the remaining nodes cannot take their replicas."""
        wanted = set(ids)
        if not wanted:
            raise ElasticError("no broker to decommission")
        async with self._lock:
            snap = self._snapshot(await self.reassigner.list_ongoing())
            unknown = sorted(wanted - set(snap.live) - snap.hosting)
            if unknown:
                raise ElasticError(
                    f"broker {', '.join(map(str, unknown))} is neither a live storage node nor "
                    "hosting replicas"
                )
            if self.state.draining and not wanted <= set(self.state.draining):
                wanted |= set(self.state.draining)
            try:
                p = await self._plan(snap, wanted)
            except PlanError as exc:
                raise ElasticError(f"cannot decommission {_ids(wanted)}: {exc}") from None
            if self.provisioner is not None and self.provisioner.kind == "kubernetes":
                try:
                    top_ordinals(await self.provisioner.current(), wanted)
                except ProvisionerError as exc:
                    raise ElasticError(f"cannot decommission {_ids(wanted)}: {exc}") from None
            if dry_run:
                return p
            self.state.draining = sorted(wanted)
            self.state.remove_after_drain = self.provisioner is not None
            self._record("decommission", f"decommission of {_ids(wanted)} requested")
            await self._save()
            log.info(
                "decommission started",
                brokers=sorted(wanted),
                moves=len(p.moves),
                bytes_to_copy=p.bytes_to_copy,
                remove_after=self.state.remove_after_drain,
            )
        self.wake()
        return p

    # ---- state, status, metrics ---------------------------------------------------------------
    async def _save(self) -> None:
        data = self.state.to_json()
        if self._state_version is None:
            await self.c.zk.ensure_path(elastic.AUTOSCALER.rsplit("/", 1)[0])
            if await self.c.zk.exists(elastic.AUTOSCALER) is None:
                await self.c.guard.commit([Create(elastic.AUTOSCALER, data)])
                self._state_version = 0
                return
        results = await self.c.guard.commit([SetData(elastic.AUTOSCALER, data, -1)])
        self._state_version = results[-1].version if results else self._state_version

    def _note(self, action: str, reason: str) -> None:
        """An evaluation: metrics always, a log line when it changed (a cooldown's countdown
        aside). The status shows the latest one."""
        self.metrics.decisions.labels(decision=action, reason=_reason_kind(reason)).inc()
        prev_action, prev_reason, _ = self.evaluation
        if (action, reason) == (prev_action, prev_reason):
            return
        if action != prev_action or _strip_countdown(reason) != _strip_countdown(prev_reason):
            log.info(
                "autoscaler decision",
                decision=action,
                reason=reason,
                dry_run=self.dry_run,
                nodes=len(self.snapshot.live) if self.snapshot else None,
            )
        self.evaluation = (action, reason, self.now_ms())

    def _record(self, action: str, reason: str) -> None:
        """An action taken (nodes asked for, a drain started, nodes removed): persisted with
        the state, so the next controller's status still says what was done last and why."""
        self.state.last_decision, self.state.last_reason = action, reason
        self.state.last_decision_ms = self.now_ms()

    def _export(self, snap: Snapshot) -> None:
        m = self.metrics
        m.nodes.set(len(snap.live))
        m.desired_nodes.set(self.state.desired_nodes or len(snap.live))
        m.draining_nodes.set(len(self.state.draining))
        m.moves_in_flight.set(len(snap.in_flight))
        pending = [
            mv for mv in (self.plan.moves if self.plan else []) if mv.tp not in snap.in_flight
        ]
        m.moves_pending.set(len(pending))
        loads = {
            b: NodeLoad(u.used_bytes, u.capacity_bytes)
            for b, u in self.usage.items()
            if b in snap.live
        }
        m.disk_used_percent.set(disk_percent(loads))

    def status(self) -> dict[str, Any]:
        """What the status command shows: the context now, the moves of the last look."""
        snap = self._snapshot(self._ongoing) if self.snapshot is not None else None
        s = self.s
        nodes = []
        if snap is not None:
            for b in sorted(set(snap.live) | set(self.state.draining)):
                u = self.usage.get(b)
                nodes.append(
                    {
                        "id": b,
                        "zone": snap.live.get(b),
                        "live": b in snap.live,
                        "draining": b in self.state.draining,
                        "replicas": snap.replicas_on(b),
                        "leaders": snap.leaders.get(b, 0),
                        "used_bytes": u.used_bytes if u else None,
                        "capacity_bytes": u.capacity_bytes if u else None,
                        "used_percent": round(u.used_percent, 2) if u else None,
                        "bytes_in_per_sec": round(self.rates.get(b, 0.0), 1),
                    }
                )
        p = self.plan
        return {
            "controller": s.controller_id,
            "epoch": self.c.ctx.epoch,
            "autoscaler": {
                "enabled": s.kafkapy_autoscaler_enable,
                "dry_run": self.dry_run,
                "provisioner": self.provisioner.kind if self.provisioner else "none",
                "disk_target_percent": s.kafkapy_autoscaler_disk_target_percent,
                "hysteresis_percent": s.kafkapy_autoscaler_hysteresis_percent,
                "min_nodes": s.kafkapy_autoscaler_min_nodes,
                "max_nodes": s.kafkapy_autoscaler_max_nodes,
                "cooldown_ms": s.kafkapy_autoscaler_cooldown_ms,
                "cooldown_left_ms": max(
                    0, self.state.last_scale_ms + s.kafkapy_autoscaler_cooldown_ms - self.now_ms()
                )
                if self.state.last_scale_ms
                else 0,
            },
            "nodes": nodes,
            "target_nodes": self.state.desired_nodes
            or (len(snap.live) - len(self.state.draining) if snap else None),
            "draining": list(self.state.draining),
            "rebalance_pending": self.state.rebalance_pending,
            "moves_in_flight": [
                {"topic": t, "partition": p_, "target": list(r)}
                for (t, p_), r in sorted((snap.in_flight if snap else {}).items())
            ],
            "plan": ({**p.summary(), "next": [_move_json(m) for m in p.moves[:20]]} if p else None),
            "plan_error": self.plan_error or None,
            "last_decision": {
                "decision": self.state.last_decision or None,
                "reason": self.state.last_reason or None,
                "at_ms": self.state.last_decision_ms or None,
            },
            "evaluation": {
                "decision": self.evaluation[0] or None,
                "reason": self.evaluation[1] or None,
                "at_ms": self.evaluation[2] or None,
            },
        }

    def status_json(self) -> str:
        return json.dumps(self.status(), sort_keys=False)


def _move_json(m: Any) -> dict[str, Any]:
    return {
        "topic": m.tp[0],
        "partition": m.tp[1],
        "from": list(m.old),
        "to": list(m.new),
        "bytes_to_copy": m.bytes_to_copy,
    }


def _ids(ids: Iterable[int]) -> str:
    got = sorted(ids)
    return ("node " if len(got) == 1 else "nodes ") + ", ".join(map(str, got))


def _strip_countdown(reason: str) -> str:
    """A cooldown's reason without its changing "N s left"."""
    head, sep, _tail = reason.rpartition("; ")
    return head if sep and reason.endswith(" s left") else reason


def _reason_kind(reason: str) -> str:
    """A low-cardinality label for a decision's reason."""
    for prefix, kind in (
        ("cooldown", "cooldown"),
        ("at max.nodes", "max_nodes"),
        ("no signal", "no_signal"),
        ("waiting for the disk use", "waiting"),
        ("draining", "busy"),
        ("rebalance in progress", "busy"),
        ("decommission", "decommission"),
        ("removed drained", "removed"),
        ("drain of", "refused"),
        ("removing drained", "provisioner_error"),
        ("scaling up", "provisioner_error"),
        ("within the target", "within_target"),
    ):
        if reason.startswith(prefix):
            return kind
    if "refused" in reason:
        return "refused"
    if "moves in flight" in reason:
        return "busy"
    if "fewer than the" in reason:
        return "min_nodes"
    if "more than max.nodes" in reason:
        return "max_nodes"
    if reason.startswith("disk use") or "disk use" in reason:
        return "disk"
    if reason.startswith("bytes in"):
        return "bytes_in"
    if "replicas, over" in reason:
        return "partitions"
    return "other"
