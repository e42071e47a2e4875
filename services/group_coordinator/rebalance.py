"""Generations and sessions of a shard's groups (Kafka's GroupCoordinator rebalance paths):
delayed joins, completing a generation, pending syncs, member sessions and the group's
metadata record. Everything runs on the event loop through the shard's ``ShardTasks``."""

from __future__ import annotations

from collections.abc import Callable

from services.common.coordinator.shard_store import ShardStore, store_error
from services.common.errors import ErrorCode
from services.common.internal_topics.consumer_offsets import (
    group_metadata_key,
    group_metadata_value,
)
from services.common.logging import get_logger
from services.common.shard_tasks import ShardTasks
from services.group_coordinator.config import GroupConfig
from services.group_coordinator.group import Group, GroupState, JoinResult, Member, SyncResult

log = get_logger("group_coordinator.groups")

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


class Rebalancer:
    def __init__(
        self,
        partition: int,
        groups: dict[str, Group],
        store: ShardStore,
        config: GroupConfig,
        tasks: ShardTasks,
        clock: Callable[[], int],
    ) -> None:
        self.groups = groups
        self.store = store
        self.config = config
        self.tasks = tasks
        self.clock = clock
        self._topic = f"__consumer_offsets-{partition}"

    def cancel_timers(self, group: Group) -> None:
        for timer in (group.join_timer, group.sync_timer):
            if timer is not None:
                timer.cancel()
        group.join_timer = group.sync_timer = None

    def live(self, group: Group) -> bool:
        """``group`` is still the shard's group of that id (not resigned, deleted, replaced)."""
        return not self.tasks.resigned and self.groups.get(group.group_id) is group

    def join_result(self, group: Group, member_id: str, leader_members: bool) -> JoinResult:
        return JoinResult(
            error=ErrorCode.NONE,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.current_member_metadata() if leader_members else [],
        )

    def maybe_prepare(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self.prepare(group, reason)

    def prepare(self, group: Group, reason: str) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            self.reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self.cancel_timers(group)
        if group.is_(S.EMPTY):
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.join_is_initial = True
            group.join_timer = self.tasks.call_later(
                delay, self._on_initial_join_timer, group, delay, remaining
            )
        else:
            group.join_is_initial = False
            group.join_timer = self.tasks.call_later(
                group.rebalance_timeout_ms, self._on_join_timer, group
            )
        group.transition_to(S.PREPARING_REBALANCE, self.clock())
        log.info(
            f"Preparing to rebalance group {group.group_id} in state {group.state} with old "
            f"generation {group.generation_id} ({self._topic}) (reason: {reason})",
            group=group.group_id,
        )
        self.check_join(group)

    def check_join(self, group: Group) -> None:
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
            group.join_timer = self.tasks.call_later(
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
            group.join_timer = self.tasks.call_later(
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
            self.tasks.spawn(self._store_empty_group(group))
            return
        log.info(
            f"Stabilized group {group.group_id} generation {group.generation_id} "
            f"({self._topic}) with {group.size} members",
            group=group.group_id,
        )
        for member in list(group.members.values()):
            result = self.join_result(group, member.member_id, group.is_leader(member.member_id))
            group.invoke_join(member, result)
            self.schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group.sync_timer = self.tasks.call_later(
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
        self.prepare(group, f"Removing {pending} on pending sync request expiration")

    def remove_pending_sync(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members and group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self.propagate_assignment(group, error)

    def propagate_assignment(self, group: Group, error: ErrorCode) -> None:
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
        if self.tasks.resigned:
            return ErrorCode.NOT_COORDINATOR
        record = (
            group_metadata_key(group.group_id),
            group_metadata_value(
                group.metadata_record(assignment), self.config.group_metadata_value_version
            ),
        )
        try:
            await self.store.append([record])
        except Exception as exc:
            return store_error(exc, _STORE_GROUP_ERRORS)
        return ErrorCode.NONE

    def schedule_heartbeat(
        self, group: Group, member: Member, timeout_ms: int | None = None
    ) -> None:
        """Restart the member's session (or, for a new member, its join deadline)."""
        member.cancel_heartbeat()
        member.heartbeat_timer = self.tasks.call_later(
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
        self.remove_member_and_update_group(
            group, member, f"removing member {member.member_id} on heartbeat expiration"
        )

    def expire_pending_member(self, group: Group, member_id: str) -> None:
        if not self.live(group) or member_id not in group.pending_members:
            return
        log.info(
            f"Pending member {member_id} in group {group.group_id} has been removed after "
            "session timeout expiration.",
            group=group.group_id,
        )
        self.remove_pending_member(group, member_id)

    def remove_pending_member(self, group: Group, member_id: str) -> None:
        timer = group.pending_members.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        if group.is_(S.PREPARING_REBALANCE):
            self.check_join(group)

    def remove_member(self, group: Group, member_id: str) -> None:
        group.remove(member_id)
        if group.is_(S.PREPARING_REBALANCE):
            self.check_join(group)

    def remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        # a new member may time out with its JoinGroup parked: it retries with no member id
        group.invoke_join(member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, ""))
        group.remove(member.member_id)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self.maybe_prepare(group, reason)
        elif group.is_(S.PREPARING_REBALANCE):
            self.check_join(group)
