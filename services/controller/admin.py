"""The Controller gRPC API's operations on the active controller.

Each request is validated and written in one controller event (so it sees a consistent context);
waiting for storage nodes to acknowledge happens outside the event loop, bounded by the request's
timeout. Error codes and messages follow Kafka (ZkAdminManager / AdminZkClient).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError

from services.common import broker_config
from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.common.topic_config import deprecation_warnings, validate_overrides
from services.common.zk import layout
from services.controller.active import AckMap, ActiveController
from services.controller.assignment import BrokerMeta, assign_replicas
from services.controller.config_changes import purge_expired_config_changes
from services.controller.elect_leaders import LeaderElections
from services.controller.elections import initial_leader_isr
from services.controller.model import ControllerContext, TopicState, Transition
from services.controller.validation import (
    ConfigOp,
    apply_config_ops,
    check_collisions,
    new_partitions_assignment,
    validate_create_assignment,
    validate_topic_name,
)
from services.controller.zkstore import Create, Op, SetData, ZkOpError

log = get_logger("controller.admin")

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
_RESOURCE_NAMES = {
    0: "UNKNOWN",
    1: "ANY",
    2: "TOPIC",
    3: "GROUP",
    4: "BROKER",
    8: "BROKER_LOGGER",
    16: "CLIENT_METRICS",
}


@dataclass(slots=True)
class _Pending:
    """A topic result whose success still waits for storage acknowledgements."""

    result: pb.TopicResult
    acks: list[asyncio.Future[Any]] = field(default_factory=list)


def _error(name: str, exc: KafkaError) -> pb.TopicResult:
    return pb.TopicResult(name=name, error_code=int(exc.code), error_message=exc.message)


def _code(name: str, code: ErrorCode, message: str = "") -> pb.TopicResult:
    return pb.TopicResult(name=name, error_code=int(code), error_message=message)


def _warn_deprecated(topic: str, names: Iterable[str]) -> None:
    """Deprecated configs are accepted (as Kafka 3.x does) with a warning in the log."""
    for warning in deprecation_warnings(names):
        log.warning("deprecated topic config", topic=topic, warning=warning)


def _duplicates(names: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    dupes: set[str] = set()
    for n in names:
        (dupes if n in seen else seen).add(n)
    return dupes


async def _each_topic(
    specs: Sequence[Any],
    one: Callable[[Any], Awaitable[_Pending]],
    duplicate_message: str,
    refused_event: str,
) -> list[_Pending]:
    """``one(spec)`` for each spec, in order; a name given twice is refused (INVALID_REQUEST)
    and a KafkaError becomes that spec's result."""
    dupes = _duplicates(s.name for s in specs)
    out: list[_Pending] = []
    for spec in specs:
        if spec.name in dupes:
            out.append(_Pending(_code(spec.name, ErrorCode.INVALID_REQUEST, duplicate_message)))
            continue
        try:
            out.append(await one(spec))
        except KafkaError as exc:
            log.info(refused_event, topic=spec.name, error=exc.code.name, reason=exc.message)
            out.append(_Pending(_error(spec.name, exc)))
    return out


async def _await_acks(pending: Sequence[_Pending], timeout_ms: int) -> list[pb.TopicResult]:
    """Success once every storage node answered; REQUEST_TIMED_OUT otherwise (Kafka answers
    REQUEST_TIMED_OUT at once for timeout <= 0; the change itself stays)."""
    waiting = [f for p in pending for f in p.acks]
    if waiting and timeout_ms > 0:
        await asyncio.wait(waiting, timeout=timeout_ms / 1000)
    out = []
    for p in pending:
        if p.result.error_code == ErrorCode.NONE and (
            timeout_ms <= 0 or not all(f.done() for f in p.acks)
        ):
            p.result.error_code = ErrorCode.REQUEST_TIMED_OUT
            p.result.error_message = ""
        out.append(p.result)
    return out


class AdminOps:
    def __init__(self, controller: ActiveController) -> None:
        self.c = controller

    @property
    def ctx(self) -> ControllerContext:
        return self.c.ctx

    def _live_brokers(self) -> list[BrokerMeta]:
        return [BrokerMeta(i, b.registration.rack) for i, b in sorted(self.ctx.brokers.items())]

    def _acks(self, acks: AckMap) -> list[asyncio.Future[Any]]:
        return list(acks.values())

    # ---- CreateTopics ---------------------------------------------------------------------
    async def create_topics(self, req: pb.CreateTopicsRequest) -> pb.CreateTopicsResponse:
        async with self.c.request():
            # early: a new topic needs no partition state of a failover still loading them
            pending: list[_Pending] = await self.c.call(
                "CreateTopics",
                lambda: self._create_topics(list(req.topics), req.validate_only),
                early=True,
            )
            if req.validate_only:
                return pb.CreateTopicsResponse(topics=[p.result for p in pending])
            return pb.CreateTopicsResponse(topics=await _await_acks(pending, req.timeout_ms))

    async def _create_topics(
        self, specs: list[pb.TopicSpec], validate_only: bool
    ) -> list[_Pending]:
        return await _each_topic(
            specs,
            lambda spec: self._create_topic(spec, validate_only),
            "Found multiple entries for this topic.",
            "topic creation refused",
        )

    def _resolve_assignment(self, spec: pb.TopicSpec) -> tuple[dict[int, list[int]], bool]:
        if spec.assignments:
            if spec.num_partitions not in (-1, 0) or spec.replication_factor not in (-1, 0):
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments "
                    "were set. Both cannot be used at the same time.",
                )
            return {a.partition: list(a.broker_ids) for a in spec.assignments}, True
        settings = self.c.settings
        n = settings.num_partitions if spec.num_partitions == -1 else spec.num_partitions
        rf = (
            settings.default_replication_factor
            if spec.replication_factor == -1
            else spec.replication_factor
        )
        return assign_replicas(n, rf, self._live_brokers()), False

    async def _see_brokers_named(self, replica_lists: Iterable[Sequence[int]]) -> None:
        """Catch up with ZooKeeper's broker registrations before refusing an explicit assignment
        for naming an unknown broker: one that registered a moment ago may not have reached this
        controller's watch yet (KRaft's controller knows a broker as soon as it registered, and
        ZooKeeper-mode Kafka validates against /brokers/ids itself)."""
        named = {b for replicas in replica_lists for b in replicas}
        if not named <= set(self.ctx.brokers):
            await self.c.refresh_brokers()

    async def _create_topic(self, spec: pb.TopicSpec, validate_only: bool) -> _Pending:
        name = spec.name
        if name in self.ctx.topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        assignment, explicit = self._resolve_assignment(spec)
        validate_topic_name(name)
        check_collisions(name, self.ctx.topics)
        if explicit:
            await self._see_brokers_named(assignment.values())
            validate_create_assignment(assignment, set(self.ctx.brokers))
        configs = dict(spec.configs)
        validate_overrides(configs)
        _warn_deprecated(name, configs)
        rf = len(assignment[0])
        result = pb.TopicResult(name=name, num_partitions=len(assignment), replication_factor=rf)
        if validate_only:
            return _Pending(result)

        topic_id = layout.new_topic_id()
        topic = TopicState(name, layout.topic_id_to_str(topic_id), assignment, configs)
        config_path = layout.topic_config_path(name)
        config_exists = await self.c.zk.exists(config_path) is not None
        ops: list[Op] = [
            (SetData if config_exists else Create)(config_path, layout.topic_config_json(configs)),
            Create(
                layout.topic_path(name), layout.topic_assignment_json(assignment, topic.topic_id)
            ),
            Create(layout.partitions_path(name)),
        ]
        transitions: list[Transition] = []
        for p, replicas in sorted(assignment.items()):
            ops.append(Create(layout.partition_path(name, p)))
            li = initial_leader_isr(replicas, self.ctx.brokers)
            if li is not None:
                transitions.append(Transition(name, p, li.leader, li.isr, True))
        self.ctx.topics[name] = topic
        self.ctx.topic_changed(name)
        try:
            await self.c.write_transitions(transitions, extra_ops=ops)
        except ZkOpError as exc:
            del self.ctx.topics[name]
            self.ctx.topic_changed(name)
            if exc.op.path == layout.topic_path(name):
                raise KafkaError(
                    ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
                ) from None
            raise
        except BaseException:
            del self.ctx.topics[name]
            self.ctx.topic_changed(name)
            raise
        self.c.watch_topic(name)
        log.info(
            "created topic",
            topic=name,
            topic_id=topic.topic_id,
            partitions=len(assignment),
            replication_factor=rf,
            assignment=assignment,
            config=configs,
        )
        acks = self.c.send_states([(name, p) for p in sorted(assignment)], is_new=True)
        await self._place_shards_of(name)
        result.topic_id = topic_id
        return _Pending(result, self._acks(acks))

    async def _place_shards_of(self, name: str) -> None:
        """``__consumer_offsets`` or ``__transaction_state`` appeared or grew: place its shards
        now (the ZooKeeper watch finds the change already in the context)."""
        if name in layout.SHARDED_TOPICS:
            await self.c.place_shards()

    # ---- leader elections -----------------------------------------------------------------
    async def elect_leaders(self, req: pb.ElectLeadersRequest) -> pb.ElectLeadersResponse:
        return await LeaderElections(self.c, self.c.balancer.plan).elect_leaders(req)

    # ---- partition reassignment (KIP-455) -------------------------------------------------
    async def alter_partition_reassignments(
        self, req: pb.AlterPartitionReassignmentsRequest
    ) -> pb.AlterPartitionReassignmentsResponse:
        moves = {
            (t.topic, t.partition): None if t.cancel else list(t.replicas) for t in req.partitions
        }
        errors = await self.c.reassigner.submit(
            moves, allow_replication_factor_change=req.allow_replication_factor_change
        )
        return pb.AlterPartitionReassignmentsResponse(
            partitions=[
                pb.ReassignmentResult(
                    topic=t,
                    partition=p,
                    error_code=int(e.code) if e else 0,
                    error_message=e.message if e else "",
                )
                for (t, p), e in errors.items()
            ]
        )

    async def list_partition_reassignments(
        self, req: pb.ListPartitionReassignmentsRequest
    ) -> pb.ListPartitionReassignmentsResponse:
        wanted = None if req.all_partitions else [(r.topic, r.partition) for r in req.partitions]
        ongoing = await self.c.reassigner.list_ongoing(wanted)
        return pb.ListPartitionReassignmentsResponse(
            reassignments=[
                pb.OngoingReassignment(
                    topic=t,
                    partition=p,
                    replicas=a.replicas,
                    adding_replicas=a.adding,
                    removing_replicas=a.removing,
                )
                for (t, p), a in sorted(ongoing.items())
            ]
        )

    # ---- internal topics ------------------------------------------------------------------
    async def create_internal_topic(
        self, req: pb.CreateInternalTopicRequest
    ) -> pb.CreateInternalTopicResponse:
        """``__consumer_offsets`` with the offsets.topic.* settings, ``__transaction_state`` with
        the transaction.state.log.* ones (Kafka creates them on the first FindCoordinator).
        Already there, or being created: NONE."""
        if req.name not in layout.SHARDED_TOPICS:
            return pb.CreateInternalTopicResponse(
                error_code=int(ErrorCode.INVALID_REQUEST),
                error_message=f"{req.name} is not an internal topic this controller creates",
            )
        pending: _Pending = await self.c.call(
            "CreateInternalTopic", lambda: self._create_internal_topic(req.name)
        )
        code = pending.result.error_code
        return pb.CreateInternalTopicResponse(
            error_code=code, error_message=pending.result.error_message if code else ""
        )

    async def _create_internal_topic(self, name: str) -> _Pending:
        if name in self.ctx.topics:
            return _Pending(pb.TopicResult(name=name))
        settings = self.c.settings
        configs = {"cleanup.policy": "compact", "compression.type": "producer"}
        if name == layout.CONSUMER_OFFSETS_TOPIC:
            partitions = settings.offsets_topic_num_partitions
            rf = settings.offsets_topic_replication_factor
            what, rf_prop = "the offsets topic", "offsets.topic.replication.factor"
            configs["segment.bytes"] = str(settings.offsets_topic_segment_bytes)
        else:
            partitions = settings.transaction_state_log_num_partitions
            rf = settings.transaction_state_log_replication_factor
            what, rf_prop = (
                "the transactional state topic",
                "transaction.state.log.replication.factor",
            )
            configs["segment.bytes"] = str(settings.transaction_state_log_segment_bytes)
            configs["min.insync.replicas"] = str(settings.transaction_state_log_min_isr)
        alive = len(self.ctx.brokers)
        if alive < rf:
            return _Pending(
                _code(
                    name,
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"Number of alive brokers '{alive}' does not meet the required replication "
                    f"factor '{rf}' for {what} (configured via '{rf_prop}'). This error can be "
                    "ignored if the cluster is starting up and not all brokers are up yet.",
                )
            )
        spec = pb.TopicSpec(
            name=name, num_partitions=partitions, replication_factor=rf, configs=configs
        )
        try:
            return await self._create_topic(spec, validate_only=False)
        except KafkaError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return _Pending(pb.TopicResult(name=name))
            return _Pending(_error(name, exc))

    # ---- CreatePartitions -----------------------------------------------------------------
    async def create_partitions(
        self, req: pb.CreatePartitionsRequest
    ) -> pb.CreatePartitionsResponse:
        pending: list[_Pending] = await self.c.call(
            "CreatePartitions", lambda: self._create_partitions(list(req.topics), req.validate_only)
        )
        if req.validate_only:
            return pb.CreatePartitionsResponse(topics=[p.result for p in pending])
        return pb.CreatePartitionsResponse(topics=await _await_acks(pending, req.timeout_ms))

    async def _create_partitions(
        self, specs: list[pb.PartitionCountSpec], validate_only: bool
    ) -> list[_Pending]:
        return await _each_topic(
            specs,
            lambda spec: self._add_partitions(spec, validate_only),
            "Duplicate topic in request.",
            "partition creation refused",
        )

    async def _add_partitions(self, spec: pb.PartitionCountSpec, validate_only: bool) -> _Pending:
        name = spec.name
        topic = self.ctx.topics.get(name)
        if topic is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        if name in self.ctx.topics_to_delete:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
        old, new = len(topic.assignment), spec.count
        if new < old:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {old} partitions, which is higher than the requested {new}.",
            )
        if new == old:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {old} partitions.")
        if topic.adding or topic.removing:  # Kafka: ReassignmentInProgressException
            raise KafkaError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS, "A partition reassignment is in progress."
            )
        if spec.assignments:
            await self._see_brokers_named(a.broker_ids for a in spec.assignments)
        brokers = self._live_brokers()
        first = topic.assignment[0]
        if spec.assignments:
            added = new_partitions_assignment(
                [list(a.broker_ids) for a in spec.assignments],
                old,
                new,
                len(first),
                {b.id for b in brokers},
            )
        else:
            # AdminZkClient.createNewPartitionsAssignment: continue from partition 0's leader.
            start = next((i for i, b in enumerate(brokers) if b.id >= first[0]), 0)
            added = assign_replicas(
                new - old, len(first), brokers, start_index=start, start_partition_id=old
            )
        result = pb.TopicResult(
            name=name,
            num_partitions=new,
            replication_factor=len(first),
            topic_id=topic.topic_id_bytes,
        )
        if validate_only:
            return _Pending(result)
        combined = {**topic.assignment, **added}
        ops: list[Op] = [
            SetData(layout.topic_path(name), layout.topic_assignment_json(combined, topic.topic_id))
        ]
        if await self.c.zk.exists(layout.partitions_path(name)) is None:
            ops.append(Create(layout.partitions_path(name)))
        transitions: list[Transition] = []
        for p, replicas in sorted(added.items()):
            ops.append(Create(layout.partition_path(name, p)))
            li = initial_leader_isr(replicas, self.ctx.brokers)
            if li is not None:
                transitions.append(Transition(name, p, li.leader, li.isr, True))
        previous = topic.assignment
        topic.assignment = combined
        self.ctx.topic_changed(name)
        try:
            await self.c.write_transitions(transitions, extra_ops=ops)
        except BaseException:
            topic.assignment = previous
            self.ctx.topic_changed(name)
            raise
        log.info("created partitions", topic=name, partitions=old, count=new, assignment=added)
        acks = self.c.send_states([(name, p) for p in sorted(added)], is_new=True)
        await self._place_shards_of(name)
        return _Pending(result, self._acks(acks))

    # ---- DeleteTopics ---------------------------------------------------------------------
    async def delete_topics(self, req: pb.DeleteTopicsRequest) -> pb.DeleteTopicsResponse:
        started = time.monotonic()
        pending: list[_Pending] = await self.c.call(
            "DeleteTopics", lambda: self._delete_topics(list(dict.fromkeys(req.names)))
        )
        remaining = req.timeout_ms - int((time.monotonic() - started) * 1000)
        timeout = remaining if req.timeout_ms > 0 else 0
        return pb.DeleteTopicsResponse(topics=await _await_deletions(pending, timeout))

    async def _delete_topics(self, names: list[str]) -> list[_Pending]:
        out: list[_Pending] = []
        marked = False
        for name in names:
            if not self.c.settings.delete_topic_enable:
                out.append(_Pending(_code(name, ErrorCode.TOPIC_DELETION_DISABLED)))
                continue
            topic = self.ctx.topics.get(name)
            if topic is None:
                out.append(_Pending(_code(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
                continue
            try:
                await self.c.zk.create(layout.delete_topic_path(name))
            except NodeExistsError:
                pass  # already marked for deletion: wait for the same deletion
            marked = True
            log.info("topic deletion requested", topic=name)
            out.append(
                _Pending(
                    pb.TopicResult(name=name, topic_id=topic.topic_id_bytes),
                    [self.c.deleter.waiter(name)],
                )
            )
        if marked:
            await self.c.deleter.on_delete_topics_change()
        return out

    # ---- AlterConfigs ---------------------------------------------------------------------
    async def alter_configs(self, req: pb.AlterConfigsRequest) -> pb.AlterConfigsResponse:
        results: list[pb.ConfigResourceResult] = await self.c.call(
            "AlterConfigs", lambda: self._alter_configs(list(req.resources), req.validate_only)
        )
        return pb.AlterConfigsResponse(resources=results)

    async def _alter_configs(
        self, resources: list[pb.ConfigResourceChange], validate_only: bool
    ) -> list[pb.ConfigResourceResult]:
        out = []
        for res in resources:
            result = pb.ConfigResourceResult(resource_type=res.resource_type, name=res.name)
            try:
                await self._alter_config(res, validate_only)
            except KafkaError as exc:
                log.info(
                    "config change refused",
                    resource_type=res.resource_type,
                    name=res.name,
                    error=exc.code.name,
                    reason=exc.message,
                )
                result.error_code = int(exc.code)
                result.error_message = exc.message
            out.append(result)
        return out

    async def _alter_config(self, res: pb.ConfigResourceChange, validate_only: bool) -> None:
        if res.resource_type == RESOURCE_BROKER:
            await self._alter_broker_config(res, validate_only)
            return
        if res.resource_type != RESOURCE_TOPIC:
            kind = _RESOURCE_NAMES.get(res.resource_type, str(res.resource_type))
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "AlterConfigs is only supported for topics and brokers, but resource "
                f"type is {kind}",
            )
        name = res.name
        topic = self.ctx.topics.get(name)
        if topic is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
        new = apply_config_ops(
            topic.config, [ConfigOp(o.key, o.value, o.op) for o in res.ops], res.incremental
        )
        _warn_deprecated(name, [o.key for o in res.ops if o.key in new])
        if validate_only:
            return
        path = layout.topic_config_path(name)
        exists = await self.c.zk.exists(path) is not None
        await self.c.guard.commit(
            [
                (SetData if exists else Create)(path, layout.topic_config_json(new)),
                Create(
                    layout.config_change_prefix(),
                    layout.config_change_json(f"topics/{name}"),
                    sequence=True,
                ),
            ]
        )
        self.c.spawn(purge_expired_config_changes(self.c.zk), "purge-config-changes")
        topic.config = new
        log.info("updated topic config", topic=name, config=new)
        # Same leader epoch: storage treats it as a config refresh.
        self.c.send_states([(name, p) for p in sorted(topic.assignment) if p in topic.states])

    async def _alter_broker_config(self, res: pb.ConfigResourceChange, validate_only: bool) -> None:
        """Dynamic broker configs (KIP-226) of one broker id or of the cluster default ("");
        written as Kafka's AdminZkClient.changeBrokerConfig writes them. Storage nodes and
        gateways watch the znodes and apply what concerns them."""
        name = res.name
        if name and not name.isdigit():
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
            )
        entity = broker_config.entity_name(name)
        path = layout.broker_config_path(entity)
        got = await self.c.zk.get_or_none(path)
        new = apply_config_ops(
            layout.parse_topic_config(got[0] if got else None),
            [ConfigOp(o.key, o.value, o.op) for o in res.ops],
            res.incremental,
            lambda configs: broker_config.validate_broker_configs(name, configs),
            broker_config.list_default,
        )
        if validate_only:
            return
        await self.c.guard.commit(
            [
                (SetData if got else Create)(path, layout.topic_config_json(new)),
                Create(
                    layout.config_change_prefix(),
                    layout.config_change_json(f"brokers/{entity}"),
                    sequence=True,
                ),
            ]
        )
        self.c.spawn(purge_expired_config_changes(self.c.zk), "purge-config-changes")
        log.info("updated dynamic broker config", entity=entity, config=new)


async def _await_deletions(pending: Sequence[_Pending], timeout_ms: int) -> list[pb.TopicResult]:
    waiting = [f for p in pending for f in p.acks]
    if waiting and timeout_ms > 0:
        await asyncio.wait(waiting, timeout=timeout_ms / 1000)
    out = []
    for p in pending:
        if p.result.error_code == ErrorCode.NONE and not all(
            f.done() and f.result() for f in p.acks
        ):
            p.result.error_code = ErrorCode.REQUEST_TIMED_OUT
        out.append(p.result)
    return out
