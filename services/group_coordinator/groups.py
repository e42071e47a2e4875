"""The groups of one ``__consumer_offsets`` shard: Kafka's classic group protocol
(GroupCoordinator in Kafka 3.x) for membership and rebalances.

Everything runs on the event loop. State changes are synchronous; the only awaits are the
store's appends, and what they persist is applied to memory only after they succeed (appends
run as tasks, so a caller that goes away cannot leave a write half-applied). Delayed joins,
pending syncs and sessions are ``loop.call_later`` timers, all cancelled by ``resign``.
Committed offsets live in ``offsets.ShardOffsets`` and generations/sessions in
``rebalance.Rebalancer``; both share this shard's groups, store and tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from services.common.coordinator.shard_store import TransactionalShardStore
from services.common.errors import ErrorCode
from services.common.internal_topics.consumer_offsets import OffsetAndMetadata
from services.common.logging import get_logger
from services.common.shard_tasks import ShardTasks, now_ms
from services.group_coordinator.config import GroupConfig
from services.group_coordinator.group import (
    Group,
    GroupState,
    JoinResult,
    Member,
    Protocols,
    SyncResult,
    TopicPartition,
)
from services.group_coordinator.offsets import ShardOffsets
from services.group_coordinator.rebalance import Rebalancer
from services.group_coordinator.replay import ShardSnapshot
from services.group_coordinator.requests import (
    DEAD_GROUP,
    GroupSummary,
    JoinRequest,
    LeavingMember,
    MemberSummary,
)

log = get_logger("group_coordinator.groups")

S = GroupState


class GroupShard:
    def __init__(
        self,
        partition: int,
        store: TransactionalShardStore,
        config: GroupConfig,
        *,
        coordinator_id: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.partition = partition
        self.store = store
        self.config = config
        self.coordinator_id = coordinator_id
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self.tasks = ShardTasks(partition, "group")
        self.rebalance = Rebalancer(partition, self.groups, store, config, self.tasks, clock)
        self.offsets = ShardOffsets(self.groups, store, config, self.tasks, clock)

    @property
    def resigned(self) -> bool:
        return self.tasks.resigned

    def live(self, group: Group) -> bool:
        """``group`` is still the shard's group of that id (not resigned, deleted, replaced)."""
        return self.rebalance.live(group)

    # ---- lifecycle ---------------------------------------------------------------------------
    def load(self, snapshot: ShardSnapshot) -> None:
        """Restore what the shard's log holds; members of Stable groups get fresh sessions."""
        now = self.clock()
        for group_id, record in snapshot.groups.items():
            self.groups[group_id] = Group.from_record(group_id, record, now)
        for group_id, offsets in snapshot.offsets.items():
            group = self.groups.get(group_id)
            if group is None:
                group = self.groups[group_id] = Group(group_id, S.EMPTY, now)
            group.offsets.update(offsets)
        for producer_id, by_group in snapshot.pending_txn.items():
            for group_id in by_group:
                if group_id not in self.groups:
                    self.groups[group_id] = Group(group_id, S.EMPTY, now)
            self.offsets.pending_txn[producer_id] = by_group
        for group in self.groups.values():
            for member in group.members.values():
                self.rebalance.schedule_heartbeat(group, member)
            if group.size > self.config.group_max_size:
                self.rebalance.prepare(
                    group,
                    f"Freshly-loaded group is over capacity ({self.config.group_max_size}). "
                    "Rebalancing in order to give a chance for consumers to commit offsets",
                )
        self.offsets.start_expiry()

    def resign(self) -> None:
        """The shard moved away: answer every parked request NOT_COORDINATOR, stop all timers,
        write nothing more."""
        if self.tasks.resigned:
            return
        self.tasks.resigned = True
        self.offsets.stop_expiry()
        for group in self.groups.values():
            log.info(
                f"Unloading group metadata for {group.group_id} "
                f"with generation {group.generation_id}",
                group=group.group_id,
            )
            group.state = S.DEAD
            self.rebalance.cancel_timers(group)
            for member in group.members.values():
                member.cancel_heartbeat()
                group.invoke_join(member, JoinResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                group.invoke_sync(member, SyncResult(ErrorCode.NOT_COORDINATOR))
            for timer in group.pending_members.values():
                if timer is not None:
                    timer.cancel()
        self.groups.clear()

    def group_states(self) -> list[str]:
        return [g.state.value for g in self.groups.values()]

    # ---- JoinGroup ---------------------------------------------------------------------------
    async def join_group(self, req: JoinRequest) -> JoinResult:
        if self.resigned:
            return JoinResult(ErrorCode.NOT_COORDINATOR, req.member_id)
        if not req.group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, req.member_id)
        if not (
            self.config.group_min_session_timeout_ms
            <= req.session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id)
        unknown = req.member_id == ""
        group = self.groups.get(req.group_id)
        if group is None:
            if not unknown:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)
            group = self.groups[req.group_id] = Group(req.group_id, S.EMPTY, self.clock())
        future: asyncio.Future[JoinResult] = self.tasks.loop.create_future()
        if not self._accept_joining_member(group, req.member_id):
            if group.has(req.member_id):
                self.rebalance.remove_member(group, req.member_id)
            future.set_result(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, ""))
        elif unknown:
            self._new_member_join(group, req, future)
        else:
            self._current_member_join(group, req, future)
        if group.is_(S.PREPARING_REBALANCE):
            self.rebalance.check_join(group)
        return await future

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.is_(S.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (
                member is not None and member.awaiting_join
            ) or group.num_awaiting_join < self.config.group_max_size
        return group.has(member_id) or group.size < self.config.group_max_size

    def _new_member_join(
        self, group: Group, req: JoinRequest, future: asyncio.Future[JoinResult]
    ) -> None:
        if group.is_(S.DEAD):
            future.set_result(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, ""))
            return
        if not group.supports_protocols(req.protocol_type, req.protocols):
            future.set_result(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, ""))
            return
        new_id = group.generate_member_id(req.client_id, req.group_instance_id)
        where = f"group {group.group_id} in {group.state} state"
        if req.group_instance_id is not None:
            old_id = group.static_member_id(req.group_instance_id)
            if old_id is not None:
                log.info(
                    f"Static member Some({req.group_instance_id}) of group {group.group_id} "
                    "with unknown member id rejoins, assigning new member "
                    f"id {new_id}, while old member id {old_id} will be removed.",
                    group=group.group_id,
                )
                self._update_static_member(group, old_id, new_id, req, future)
                return
            log.info(
                f"Static member with groupInstanceId={req.group_instance_id} and unknown member id "
                f"joins {where}. Created a new member id {new_id} for this member and add to the "
                "group.",
                group=group.group_id,
            )
            self._add_member_and_rebalance(group, new_id, req, future)
        elif req.require_known_member_id:
            log.info(
                f"Dynamic member with unknown member id joins {where}. Created a new member id "
                f"{new_id} and request the member to rejoin with this id.",
                group=group.group_id,
            )
            group.pending_members[new_id] = self.tasks.call_later(
                req.session_timeout_ms, self.rebalance.expire_pending_member, group, new_id
            )
            future.set_result(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id))
        else:
            log.info(
                f"Dynamic Member with unknown member id joins {where}. Created a new member id "
                f"{new_id} for this member and add to the group.",
                group=group.group_id,
            )
            self._add_member_and_rebalance(group, new_id, req, future)

    def _current_member_join(
        self, group: Group, req: JoinRequest, future: asyncio.Future[JoinResult]
    ) -> None:
        member_id = req.member_id
        if group.is_(S.DEAD):
            future.set_result(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(req.protocol_type, req.protocols):
            future.set_result(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if group.is_pending(member_id):
            if req.group_instance_id is not None:  # pending members are always dynamic
                future.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                return
            timer = group.pending_members.get(member_id)
            if timer is not None:
                timer.cancel()
            self._add_member_and_rebalance(group, member_id, req, future)
            return
        error = self.validate_member(group, member_id, req.group_instance_id, "join-group")
        if error is not None:
            future.set_result(JoinResult(error, member_id))
            return
        member = group.members[member_id]
        reason = f"client reason: {req.reason or 'not provided'}"
        if group.is_(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(
                group,
                member,
                req.protocols,
                f"Member {member_id} joining group during {group.state}; {reason}",
                future,
            )
        elif group.is_(S.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # the JoinGroup response was lost: answer this generation again
                future.set_result(
                    self.rebalance.join_result(group, member_id, group.is_leader(member_id))
                )
            else:
                self._update_member_and_rebalance(
                    group,
                    member,
                    req.protocols,
                    f"Updating metadata for member {member_id} during {group.state}; {reason}",
                    future,
                )
        elif group.is_(S.STABLE):
            if group.is_leader(member_id):
                # the leader rejoins to rebalance for changes only it sees (topic metadata)
                self._update_member_and_rebalance(
                    group,
                    member,
                    req.protocols,
                    f"Leader {member_id} re-joining group during {group.state}; {reason}",
                    future,
                )
            elif not member.matches(req.protocols):
                self._update_member_and_rebalance(
                    group,
                    member,
                    req.protocols,
                    f"Updating metadata for member {member_id} during {group.state}; {reason}",
                    future,
                )
            else:
                future.set_result(
                    self.rebalance.join_result(group, member_id, leader_members=False)
                )
        else:
            log.warning(
                f"Attempt to add rejoining member {member_id} of group {group.group_id} in "
                f"unexpected group state {group.state}",
                group=group.group_id,
            )
            future.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _add_member_and_rebalance(
        self, group: Group, member_id: str, req: JoinRequest, future: asyncio.Future[JoinResult]
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=list(req.protocols),
            is_new=True,
        )
        if group.is_(S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, future)
        # a new member's JoinGroup cannot wait forever (it has no session yet)
        self.rebalance.schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        instance = f"Some({req.group_instance_id})" if req.group_instance_id is not None else "None"
        self.rebalance.maybe_prepare(
            group,
            f"Adding new member {member_id} with group instance id {instance}; "
            f"client reason: {req.reason or 'not provided'}",
        )

    def _update_member_and_rebalance(
        self,
        group: Group,
        member: Member,
        protocols: Protocols,
        reason: str,
        future: asyncio.Future[JoinResult],
    ) -> None:
        group.update_member(member, list(protocols), future)
        self.rebalance.maybe_prepare(group, reason)

    def _update_static_member(
        self,
        group: Group,
        old_id: str,
        new_id: str,
        req: JoinRequest,
        future: asyncio.Future[JoinResult],
    ) -> None:
        instance_id = req.group_instance_id
        assert instance_id is not None
        current_leader = group.leader_id or ""
        member = group.replace_static_member(instance_id, old_id, new_id)
        self.rebalance.schedule_heartbeat(group, member)
        old_protocols = member.protocols
        group.update_member(member, list(req.protocols), future)
        reason = f"client reason: {req.reason or 'not provided'}"
        if group.is_(S.STABLE):
            if group.protocol_name == group.select_protocol():
                log.info(
                    "Static member which joins during Stable stage and doesn't affect "
                    "selectProtocol will not trigger rebalance.",
                    group=group.group_id,
                )
                self.tasks.spawn(
                    self._store_static_member(
                        group, member, old_id, old_protocols, current_leader, req
                    )
                )
            else:
                self.rebalance.maybe_prepare(
                    group,
                    f"Group's selectedProtocol will change because static member {new_id} with "
                    f"instance id Some({instance_id}) joined with change of protocol; {reason}",
                )
        elif group.is_(S.COMPLETING_REBALANCE):
            # the leader may already assign the old member id: rebalance again
            self.rebalance.prepare(
                group,
                f"Updating metadata for static member {new_id} with instance id "
                f"Some({instance_id}); {reason}",
            )

    async def _store_static_member(
        self,
        group: Group,
        member: Member,
        old_id: str,
        old_protocols: Protocols,
        current_leader: str,
        req: JoinRequest,
    ) -> None:
        generation = group.generation_id
        assignment = {m.member_id: m.assignment for m in group.members.values()}
        error = await self.rebalance.persist_group(group, assignment)
        if not self.rebalance.live(group):
            return
        new_id = member.member_id
        if error is not ErrorCode.NONE:
            log.warning(
                f"Failed to persist metadata for group {group.group_id}: {error.name}",
                group=group.group_id,
            )
            future = member.join_future
            if group.is_(S.STABLE) and generation == group.generation_id and group.has(new_id):
                group.update_member(member, old_protocols, None)
                assert req.group_instance_id is not None
                group.replace_static_member(req.group_instance_id, new_id, old_id)
                self.rebalance.schedule_heartbeat(group, member)
                if future is not None and not future.done():
                    future.set_result(
                        JoinResult(
                            error,
                            "",
                            group.generation_id,
                            group.protocol_type,
                            group.protocol_name,
                            current_leader,
                        )
                    )
            else:
                group.invoke_join(member, JoinResult(error, ""))
            return
        is_leader = group.is_leader(new_id)
        if req.support_skip_assignment:
            result = self.rebalance.join_result(group, new_id, leader_members=is_leader)
            result.skip_assignment = is_leader
        else:
            # before v9 the old leader id is returned, so the rejoined member does not assign
            result = self.rebalance.join_result(group, new_id, leader_members=False)
            result.leader_id = current_leader
        group.invoke_join(member, result)

    # ---- SyncGroup ---------------------------------------------------------------------------
    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        if self.resigned:
            return SyncResult(ErrorCode.NOT_COORDINATOR)
        if not group_id:
            return SyncResult(ErrorCode.INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_(S.DEAD):
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = self.validate_member(group, member_id, group_instance_id, "sync-group")
        if error is None:
            if generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            elif (protocol_type is not None and group.protocol_type != protocol_type) or (
                protocol_name is not None and group.protocol_name != protocol_name
            ):
                error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            return SyncResult(error)
        if group.is_(S.EMPTY):
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_(S.PREPARING_REBALANCE):
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        member = group.members[member_id]
        if group.is_(S.STABLE):
            self.rebalance.remove_pending_sync(group, member_id)
            self.rebalance.schedule_heartbeat(group, member)
            return SyncResult(
                ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment
            )
        # CompletingRebalance: wait for the leader's assignment
        future: asyncio.Future[SyncResult] = self.tasks.loop.create_future()
        if member.sync_future is not None:
            group.invoke_sync(member, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_future = future
        self.rebalance.remove_pending_sync(group, member_id)
        if group.is_leader(member_id):
            log.info(
                f"Assignment received from leader for group {group.group_id} for generation "
                f"{group.generation_id}. The group has {group.size} members, "
                f"{group.num_static} of which are static.",
                group=group.group_id,
                leader=member_id,
            )
            missing = [m for m in group.members if m not in assignments]
            if missing:
                log.warning(
                    f"Setting empty assignments for members {missing} of {group.group_id} "
                    f"for generation {group.generation_id}",
                    group=group.group_id,
                )
            assignment = {m: assignments.get(m, b"") for m in group.members}
            self.tasks.spawn(
                self._store_assignment(group, group.generation_id, member_id, assignment)
            )
        return await future

    async def _store_assignment(
        self, group: Group, generation: int, leader_id: str, assignment: dict[str, bytes]
    ) -> None:
        error = await self.rebalance.persist_group(group, assignment)
        # a member may have (re)joined meanwhile: only this generation's completion applies
        if (
            not self.rebalance.live(group)
            or not group.is_(S.COMPLETING_REBALANCE)
            or generation != group.generation_id
        ):
            return
        if error is not ErrorCode.NONE:
            self.rebalance.reset_and_propagate_assignment_error(group, error)
            self.rebalance.maybe_prepare(
                group, f"Error when storing group assignment during SyncGroup (member: {leader_id})"
            )
            return
        for member_id, member in group.members.items():
            member.assignment = assignment.get(member_id, b"")
        self.rebalance.propagate_assignment(group, ErrorCode.NONE)
        group.transition_to(S.STABLE, self.clock())

    # ---- Heartbeat ---------------------------------------------------------------------------
    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        if self.resigned:
            return ErrorCode.NOT_COORDINATOR
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(S.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self.validate_member(group, member_id, group_instance_id, "heartbeat")
        if error is not None:
            return error
        member = group.members[member_id]
        if group.is_(S.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(S.COMPLETING_REBALANCE):
            self.rebalance.schedule_heartbeat(group, member)
            return ErrorCode.NONE
        if group.is_(S.PREPARING_REBALANCE):
            self.rebalance.schedule_heartbeat(group, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        self.rebalance.schedule_heartbeat(group, member)
        return ErrorCode.NONE

    def validate_member(
        self, group: Group, member_id: str, group_instance_id: str | None, operation: str
    ) -> ErrorCode | None:
        """Kafka's validateCurrentMember: the instance maps to ``member_id``, which exists."""
        if group_instance_id is not None:
            current = group.static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info(
                    f"Request memberId={member_id} for static member with groupInstanceId="
                    f"{group_instance_id} is fenced by current memberId={current} during "
                    f"operation {operation}",
                    group=group.group_id,
                )
                return ErrorCode.FENCED_INSTANCE_ID
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    # ---- LeaveGroup --------------------------------------------------------------------------
    def leave_group(
        self, group_id: str, leaving: list[LeavingMember]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """The group-level error and one error per leaving member."""
        if self.resigned:
            return ErrorCode.NOT_COORDINATOR, []
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID for _ in leaving]
        if group.is_(S.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        return ErrorCode.NONE, [self._leave_one(group, m) for m in leaving]

    def _leave_one(self, group: Group, leaving: LeavingMember) -> ErrorCode:
        reason = leaving.reason or "no reason provided"
        member_id = leaving.member_id
        if member_id == "":
            # administrative removal of a static member by its instance id
            current = group.static_member_id(leaving.group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._remove_leaving_member(group, current, reason)
            return ErrorCode.NONE
        if group.is_pending(member_id):
            self.rebalance.remove_pending_member(group, member_id)
            log.info(
                f"Pending member with memberId={member_id} has left group {group.group_id} "
                f"through explicit `LeaveGroup` request; client reason: {reason}",
                group=group.group_id,
            )
            return ErrorCode.NONE
        error = self.validate_member(group, member_id, leaving.group_instance_id, "leave-group")
        if error is not None:
            return error
        self._remove_leaving_member(group, member_id, reason)
        return ErrorCode.NONE

    def _remove_leaving_member(self, group: Group, member_id: str, reason: str) -> None:
        member = group.members[member_id]
        self.rebalance.remove_member_and_update_group(
            group, member, f"removing member {member_id} on LeaveGroup; client reason: {reason}"
        )
        log.info(
            f"Member {member_id} has left group {group.group_id} through explicit `LeaveGroup`; "
            f"client reason: {reason}",
            group=group.group_id,
        )

    # ---- DescribeGroups / ListGroups / DeleteGroups ------------------------------------------
    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        if self.resigned:
            return ErrorCode.NOT_COORDINATOR, GroupSummary("", "", "")
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, DEAD_GROUP
        stable = group.is_(S.STABLE)
        members = tuple(
            MemberSummary(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        protocol = (group.protocol_name or "") if stable else ""
        return ErrorCode.NONE, GroupSummary(
            group.state.value, group.protocol_type or "", protocol, members
        )

    def list_groups(self, states: set[str]) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of the groups in ``states`` (all if empty; any
        case)."""
        wanted = {s.lower() for s in states}
        return [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not wanted or g.state.value.lower() in wanted
        ]

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        return await self.offsets.delete_groups(group_ids)

    # ---- offsets (see offsets.ShardOffsets) --------------------------------------------------
    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool
    ) -> list[tuple[TopicPartition, OffsetAndMetadata | None, ErrorCode]]:
        return self.offsets.fetch_offsets(group_id, partitions, require_stable)

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        return await self.offsets.delete_offsets(group_id, partitions)

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        if self.resigned:
            return {tp: ErrorCode.NOT_COORDINATOR for tp in offsets}
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return {tp: ErrorCode.ILLEGAL_GENERATION for tp in offsets}
            # not using Kafka for group management: a "simple" commit creates the group
            group = self.groups[group_id] = Group(group_id, S.EMPTY, self.clock())
        error = self._validate_offset_commit(group, member_id, group_instance_id, generation_id)
        if error is None and group.is_(S.COMPLETING_REBALANCE):
            # the member knows this generation but has no assignment yet
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not None:
            return {tp: error for tp in offsets}
        if group.state in (S.STABLE, S.PREPARING_REBALANCE):
            # commits also keep the session alive (the rebalance shows in heartbeats)
            self.rebalance.schedule_heartbeat(group, group.members[member_id])
        return await self.offsets.store_offsets(group, offsets)

    async def txn_offset_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's handleTxnCommitOffsets: a group is created if needed; KIP-447 fencing
        applies when the request names a member or generation (v3), as for OffsetCommit."""
        if self.resigned:
            return {tp: ErrorCode.NOT_COORDINATOR for tp in offsets}
        if not group_id:
            return {tp: ErrorCode.INVALID_GROUP_ID for tp in offsets}
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, S.EMPTY, self.clock())
        error: ErrorCode | None = None
        if group.is_(S.DEAD):
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif generation_id >= 0 or member_id != "" or group_instance_id is not None:
            error = self.validate_member(group, member_id, group_instance_id, "txn-offset-commit")
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
        if error is not None:
            return {tp: error for tp in offsets}
        return await self.offsets.store_txn_offsets(group, producer_id, producer_epoch, offsets)

    def complete_txn(self, producer_id: int, commit: bool) -> int:
        """The producer's transaction marker is in this shard's partition."""
        return 0 if self.resigned else self.offsets.complete_txn(producer_id, commit)

    def _validate_offset_commit(
        self, group: Group, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode | None:
        if group.is_(S.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id != "" or group_instance_id is not None:
            error = self.validate_member(group, member_id, group_instance_id, "offset-commit")
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            return error
        if not group.is_(S.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID  # only members commit to a group with members
        return None
