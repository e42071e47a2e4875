"""The groups of one ``__consumer_offsets`` shard: Kafka's classic group protocol
(GroupCoordinator in Kafka 3.x) for membership and rebalances.

Everything runs on the event loop. State changes are synchronous; the only awaits are the
store's appends, and what they persist is applied to memory only after they succeed (appends
run as tasks, so a caller that goes away cannot leave a write half-applied). Delayed joins,
pending syncs and sessions are ``loop.call_later`` timers, all cancelled by ``resign``.
Committed offsets live in ``offsets.ShardOffsets``, which shares this shard's groups.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from services.common.errors import ErrorCode
from services.common.logging import get_logger
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
from services.group_coordinator.model import OffsetAndMetadata, ShardSnapshot
from services.group_coordinator.offsets import ShardOffsets, store_error
from services.group_coordinator.offsets_topic import group_metadata_key, group_metadata_value

log = get_logger("group_coordinator.groups")

_T = TypeVar("_T")
S = GroupState

# storeGroup's mapping of append errors (GroupMetadataManager.storeGroup).
_STORE_GROUP_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


class ShardStore(Protocol):
    async def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Persist key/value records (value None = tombstone) with acks=all; raises
        ``KafkaError`` (NOT_COORDINATOR once fenced)."""
        ...


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    require_known_member_id: bool  # JoinGroup v4+ for dynamic members (KIP-394)
    support_skip_assignment: bool = False  # JoinGroup v9+
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...] = ()


DEAD_GROUP = GroupSummary(S.DEAD.value, "", "")


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupShard:
    def __init__(
        self,
        partition: int,
        store: ShardStore,
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
        self.resigned = False
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.offsets = ShardOffsets(self)
        self._topic = f"__consumer_offsets-{partition}"

    # ---- lifecycle -------------------------------------------------------------------------
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
        for group in self.groups.values():
            for member in group.members.values():
                self.schedule_heartbeat(group, member)
            if group.size > self.config.group_max_size:
                self._prepare_rebalance(
                    group,
                    f"Freshly-loaded group is over capacity ({self.config.group_max_size}). "
                    "Rebalancing in order to give a chance for consumers to commit offsets",
                )
        self.offsets.start_expiry()

    def resign(self) -> None:
        """The shard moved away: answer every parked request NOT_COORDINATOR, stop all timers,
        write nothing more."""
        if self.resigned:
            return
        self.resigned = True
        self.offsets.stop_expiry()
        for group in self.groups.values():
            log.info(
                f"Unloading group metadata for {group.group_id} "
                f"with generation {group.generation_id}",
                group=group.group_id,
            )
            group.state = S.DEAD
            self._cancel_group_timers(group)
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

    # ---- tasks and timers ------------------------------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        """Run ``coro`` as a task kept alive until done (its failure is logged)."""
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("group_task_failed", partition=self.partition, error=repr(task.exception()))

    def call_later(
        self, delay_ms: int, callback: Callable[..., None], *args: Any
    ) -> asyncio.TimerHandle:
        return self._loop.call_later(max(delay_ms, 0) / 1000.0, self._guarded, callback, args)

    def _guarded(self, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        if self.resigned:
            return
        try:
            callback(*args)
        except Exception as exc:  # a timer must never kill the loop's callback
            log.exception("group_timer_failed", partition=self.partition, error=repr(exc))

    def _cancel_group_timers(self, group: Group) -> None:
        for timer in (group.join_timer, group.sync_timer):
            if timer is not None:
                timer.cancel()
        group.join_timer = group.sync_timer = None

    def live(self, group: Group) -> bool:
        """``group`` is still the shard's group of that id (not resigned, deleted, replaced)."""
        return not self.resigned and self.groups.get(group.group_id) is group

    # ---- JoinGroup -------------------------------------------------------------------------
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
        future: asyncio.Future[JoinResult] = self._loop.create_future()
        if not self._accept_joining_member(group, req.member_id):
            if group.has(req.member_id):
                self._remove_member(group, req.member_id)
            future.set_result(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, ""))
        elif unknown:
            self._new_member_join(group, req, future)
        else:
            self._current_member_join(group, req, future)
        if group.is_(S.PREPARING_REBALANCE):
            self._check_join(group)
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
            group.pending_members[new_id] = self.call_later(
                req.session_timeout_ms, self._expire_pending_member, group, new_id
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
                future.set_result(self._join_result(group, member_id, group.is_leader(member_id)))
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
                future.set_result(self._join_result(group, member_id, leader_members=False))
        else:
            log.warning(
                f"Attempt to add rejoining member {member_id} of group {group.group_id} in "
                f"unexpected group state {group.state}",
                group=group.group_id,
            )
            future.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _join_result(self, group: Group, member_id: str, leader_members: bool) -> JoinResult:
        return JoinResult(
            error=ErrorCode.NONE,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.current_member_metadata() if leader_members else [],
        )

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
        self.schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        instance = f"Some({req.group_instance_id})" if req.group_instance_id is not None else "None"
        self._maybe_prepare_rebalance(
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
        self._maybe_prepare_rebalance(group, reason)

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
        self.schedule_heartbeat(group, member)
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
                self.spawn(
                    self._store_static_member(
                        group, member, old_id, old_protocols, current_leader, req
                    )
                )
            else:
                self._maybe_prepare_rebalance(
                    group,
                    f"Group's selectedProtocol will change because static member {new_id} with "
                    f"instance id Some({instance_id}) joined with change of protocol; {reason}",
                )
        elif group.is_(S.COMPLETING_REBALANCE):
            # the leader may already assign the old member id: rebalance again
            self._prepare_rebalance(
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
        error = await self.persist_group(group, assignment)
        if not self.live(group):
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
                self.schedule_heartbeat(group, member)
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
            result = self._join_result(group, new_id, leader_members=is_leader)
            result.skip_assignment = is_leader
        else:
            # before v9 the old leader id is returned, so the rejoined member does not assign
            result = self._join_result(group, new_id, leader_members=False)
            result.leader_id = current_leader
        group.invoke_join(member, result)

    # ---- rebalance -------------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._cancel_group_timers(group)
        if group.is_(S.EMPTY):
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.join_is_initial = True
            group.join_timer = self.call_later(
                delay, self._on_initial_join_timer, group, delay, remaining
            )
        else:
            group.join_is_initial = False
            group.join_timer = self.call_later(
                group.rebalance_timeout_ms, self._on_join_timer, group
            )
        group.transition_to(S.PREPARING_REBALANCE, self.clock())
        log.info(
            f"Preparing to rebalance group {group.group_id} in state {group.state} with old "
            f"generation {group.generation_id} ({self._topic}) (reason: {reason})",
            group=group.group_id,
        )
        self._check_join(group)

    def _check_join(self, group: Group) -> None:
        """Complete a (non-initial) delayed join once every member has rejoined."""
        if (
            group.join_timer is not None
            and not group.join_is_initial
            and group.has_all_members_joined()
        ):
            group.join_timer.cancel()
            group.join_timer = None
            self._complete_join(group)

    def _on_initial_join_timer(self, group: Group, delay: int, remaining: int) -> None:
        if not self.live(group) or not group.is_(S.PREPARING_REBALANCE):
            return
        group.join_timer = None
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            next_delay = min(self.config.group_initial_rebalance_delay_ms, remaining)
            group.join_timer = self.call_later(
                next_delay,
                self._on_initial_join_timer,
                group,
                next_delay,
                max(remaining - delay, 0),
            )
        else:
            self._complete_join(group)

    def _on_join_timer(self, group: Group) -> None:
        if self.live(group) and group.is_(S.PREPARING_REBALANCE):
            group.join_timer = None
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """Kafka's onCompleteJoin: drop dynamic members that did not rejoin, start the next
        generation and answer every parked JoinGroup."""
        gone = [m for m in group.not_yet_rejoined() if not m.is_static]
        if gone:
            log.info(
                f"Group {group.group_id} removed dynamic members who haven't joined: "
                f"{sorted(m.member_id for m in gone)}",
                group=group.group_id,
            )
            for member in gone:
                group.remove(member.member_id)
        if group.is_(S.DEAD):
            return
        if not group.elect_joined_leader() and group.members:
            log.error(
                f"Group {group.group_id} could not complete rebalance because no members rejoined",
                group=group.group_id,
            )
            group.join_is_initial = False
            group.join_timer = self.call_later(
                group.rebalance_timeout_ms, self._on_join_timer, group
            )
            return
        group.init_next_generation(self.clock())
        if group.is_(S.EMPTY):
            log.info(
                f"Group {group.group_id} with generation {group.generation_id} is now empty "
                f"({self._topic})",
                group=group.group_id,
            )
            self.spawn(self._store_empty_group(group))
            return
        log.info(
            f"Stabilized group {group.group_id} generation {group.generation_id} "
            f"({self._topic}) with {group.size} members",
            group=group.group_id,
        )
        for member in list(group.members.values()):
            result = self._join_result(group, member.member_id, group.is_leader(member.member_id))
            group.invoke_join(member, result)
            self.schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group.sync_timer = self.call_later(
            group.rebalance_timeout_ms, self._on_pending_sync_timer, group, group.generation_id
        )

    async def _store_empty_group(self, group: Group) -> None:
        error = await self.persist_group(group, {})
        if error is not ErrorCode.NONE:
            # the previous generation stays in the log; it has no live members, so it is safe
            log.warning(
                f"Failed to write empty metadata for group {group.group_id}: {error.name}",
                group=group.group_id,
            )

    def _on_pending_sync_timer(self, group: Group, generation: int) -> None:
        if not self.live(group) or generation != group.generation_id:
            return
        group.sync_timer = None
        if group.state not in (S.COMPLETING_REBALANCE, S.STABLE) or not group.pending_sync_members:
            return
        pending = sorted(group.pending_sync_members)
        log.info(
            f"Group {group.group_id} removed members who haven't sent their sync request: "
            f"{pending}",
            group=group.group_id,
        )
        for member_id in pending:
            group.remove(member_id)
        self._prepare_rebalance(group, f"Removing {pending} on pending sync request expiration")

    def _remove_pending_sync(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members and group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        ok = error is ErrorCode.NONE
        for member in list(group.members.values()):
            result = SyncResult(
                error,
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
                member.assignment if ok else b"",
            )
            if group.invoke_sync(member, result):
                # sessions were on hold while members waited: start them again
                self.schedule_heartbeat(group, member)

    async def persist_group(self, group: Group, assignment: dict[str, bytes]) -> ErrorCode:
        """Append the group's GroupMetadata record; NONE or the error to answer."""
        if self.resigned:
            return ErrorCode.NOT_COORDINATOR
        record = (
            group_metadata_key(group.group_id),
            group_metadata_value(group.metadata_record(assignment)),
        )
        try:
            await self.store.append([record])
        except Exception as exc:
            return store_error(exc, _STORE_GROUP_ERRORS)
        return ErrorCode.NONE

    # ---- SyncGroup -------------------------------------------------------------------------
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
            self._remove_pending_sync(group, member_id)
            self.schedule_heartbeat(group, member)
            return SyncResult(
                ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment
            )
        # CompletingRebalance: wait for the leader's assignment
        future: asyncio.Future[SyncResult] = self._loop.create_future()
        if member.sync_future is not None:
            group.invoke_sync(member, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_future = future
        self._remove_pending_sync(group, member_id)
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
            self.spawn(self._store_assignment(group, group.generation_id, member_id, assignment))
        return await future

    async def _store_assignment(
        self, group: Group, generation: int, leader_id: str, assignment: dict[str, bytes]
    ) -> None:
        error = await self.persist_group(group, assignment)
        # a member may have (re)joined meanwhile: only this generation's completion applies
        if (
            not self.live(group)
            or not group.is_(S.COMPLETING_REBALANCE)
            or generation != group.generation_id
        ):
            return
        if error is not ErrorCode.NONE:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(
                group, f"Error when storing group assignment during SyncGroup (member: {leader_id})"
            )
            return
        for member_id, member in group.members.items():
            member.assignment = assignment.get(member_id, b"")
        self._propagate_assignment(group, ErrorCode.NONE)
        group.transition_to(S.STABLE, self.clock())

    # ---- Heartbeat and sessions ------------------------------------------------------------
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
            self.schedule_heartbeat(group, member)
            return ErrorCode.NONE
        if group.is_(S.PREPARING_REBALANCE):
            self.schedule_heartbeat(group, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        self.schedule_heartbeat(group, member)
        return ErrorCode.NONE

    def schedule_heartbeat(
        self, group: Group, member: Member, timeout_ms: int | None = None
    ) -> None:
        """Restart the member's session (or, for a new member, its join deadline)."""
        member.cancel_heartbeat()
        member.heartbeat_timer = self.call_later(
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            self._on_heartbeat_expired,
            group,
            member,
        )

    def _on_heartbeat_expired(self, group: Group, member: Member) -> None:
        member.heartbeat_timer = None
        if not self.live(group) or group.members.get(member.member_id) is not member:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # parked in a rebalance: its session restarts when it is answered
        log.info(
            f"Member {member.member_id} in group {group.group_id} has failed, removing it "
            "from the group",
            group=group.group_id,
        )
        self._remove_member_and_update_group(
            group, member, f"removing member {member.member_id} on heartbeat expiration"
        )

    def _expire_pending_member(self, group: Group, member_id: str) -> None:
        if not self.live(group) or member_id not in group.pending_members:
            return
        log.info(
            f"Pending member {member_id} in group {group.group_id} has been removed after "
            "session timeout expiration.",
            group=group.group_id,
        )
        self._remove_pending_member(group, member_id)

    def _remove_pending_member(self, group: Group, member_id: str) -> None:
        timer = group.pending_members.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        if group.is_(S.PREPARING_REBALANCE):
            self._check_join(group)

    def _remove_member(self, group: Group, member_id: str) -> None:
        group.remove(member_id)
        if group.is_(S.PREPARING_REBALANCE):
            self._check_join(group)

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        # a new member may time out with its JoinGroup parked: it retries with no member id
        group.invoke_join(member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, ""))
        group.remove(member.member_id)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(S.PREPARING_REBALANCE):
            self._check_join(group)

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

    # ---- LeaveGroup ------------------------------------------------------------------------
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
            self._remove_pending_member(group, member_id)
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
        self._remove_member_and_update_group(
            group, member, f"removing member {member_id} on LeaveGroup; client reason: {reason}"
        )
        log.info(
            f"Member {member_id} has left group {group.group_id} through explicit `LeaveGroup`; "
            f"client reason: {reason}",
            group=group.group_id,
        )

    # ---- DescribeGroups / ListGroups / DeleteGroups ----------------------------------------
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

    # ---- offsets (see offsets.ShardOffsets) ------------------------------------------------
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
            self.schedule_heartbeat(group, group.members[member_id])
        return await self.offsets.store_offsets(group, offsets)

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
