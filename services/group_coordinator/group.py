"""One consumer group's in-memory state, as Kafka's GroupMetadata / MemberMetadata keep it.

Pure state: no I/O and no timers (``groups.GroupShard`` drives it). Join and sync waiters are
futures parked on the member; ``invoke_join`` / ``invoke_sync`` answer them exactly once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from services.common.errors import ErrorCode
from services.common.internal_topics.consumer_offsets import (
    GroupMetadata,
    MemberMetadata,
    OffsetAndMetadata,
)
from services.group_coordinator.consumer_protocol import PROTOCOL_TYPE, subscribed_topics

TopicPartition = tuple[str, int]
Protocols = list[tuple[str, bytes]]

NO_GENERATION = -1

_T = TypeVar("_T")


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(GroupState),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    # (member id, group instance id, metadata of the chosen protocol): for the leader only
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    is_new: bool = False
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    heartbeat_timer: asyncio.TimerHandle | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """This member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def cancel_heartbeat(self) -> None:
        if self.heartbeat_timer is not None:
            self.heartbeat_timer.cancel()
            self.heartbeat_timer = None


def _resolve(future: asyncio.Future[_T] | None, result: _T) -> None:
    if future is not None and not future.done():
        future.set_result(result)


class Group:
    def __init__(self, group_id: str, state: GroupState, now_ms: int) -> None:
        self.group_id = group_id
        self.state = state
        self.current_state_timestamp: int | None = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}  # join order
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_members: dict[str, asyncio.TimerHandle | None] = {}  # KIP-394
        self.pending_sync_members: set[str] = set()
        self.supported_protocols: Counter[str] = Counter()
        self.num_awaiting_join = 0
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None
        # the rebalance's delayed join / pending sync timers (Kafka's purgatories)
        self.join_timer: asyncio.TimerHandle | None = None
        self.join_is_initial = False
        self.sync_timer: asyncio.TimerHandle | None = None
        # committed offsets; the partitions of each commit being written (a list per commit,
        # not a count per partition: a commit adds and removes itself at once); sequence of the
        # last write applied per partition (a later write never loses to an earlier one)
        self.offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        self.pending_commits: list[Collection[TopicPartition]] = []
        self.offset_seq: dict[TopicPartition, int] = {}

    # ---- state -----------------------------------------------------------------------------
    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"group {self.group_id} cannot move from {self.state} to {state}")
        self.state = state
        self.current_state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # ---- members ---------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.members)

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def static_member_id(self, instance_id: str | None) -> str | None:
        return self.static_members.get(instance_id) if instance_id is not None else None

    @property
    def num_static(self) -> int:
        return len(self.static_members)

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def generate_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"

    def add(self, member: Member, join_future: asyncio.Future[JoinResult] | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.supported_protocols.update(name for name, _ in member.protocols)
        if join_future is not None:
            member.join_future = join_future
            self.num_awaiting_join += 1
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(name for name, _ in member.protocols)
            self.supported_protocols += Counter()  # drop zero counts
            if member.awaiting_join:
                self.num_awaiting_join -= 1
            if (
                member.group_instance_id is not None
                and self.static_members.get(member.group_instance_id) == member_id
            ):
                del self.static_members[member.group_instance_id]
            member.cancel_heartbeat()
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self, member: Member, protocols: Protocols, join_future: asyncio.Future[JoinResult] | None
    ) -> None:
        """New protocols and join waiter (None: the caller answers the current one); a waiter
        replaced by a newer JoinGroup of the same member is told to rejoin."""
        self.supported_protocols.subtract(name for name, _ in member.protocols)
        self.supported_protocols += Counter()
        member.protocols = protocols
        self.supported_protocols.update(name for name, _ in protocols)
        old = member.join_future
        if join_future is not None and old is None:
            self.num_awaiting_join += 1
        elif join_future is None and old is not None:
            self.num_awaiting_join -= 1
        member.join_future = join_future
        if old is not None and join_future is not None and old is not join_future:
            _resolve(old, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give the member of ``instance_id`` a new member id; its old requests are fenced."""
        member = self.members.pop(old_id)
        self.invoke_join(member, JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        self.invoke_sync(member, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)
        return member

    def invoke_join(self, member: Member, result: JoinResult) -> bool:
        """Answer the member's parked JoinGroup, if any."""
        future = member.join_future
        if future is None:
            return False
        member.join_future = None
        self.num_awaiting_join -= 1
        _resolve(future, result)
        return True

    def invoke_sync(self, member: Member, result: SyncResult) -> bool:
        future = member.sync_future
        if future is None:
            return False
        member.sync_future = None
        _resolve(future, result)
        return True

    def has_all_members_joined(self) -> bool:
        return self.size == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def elect_joined_leader(self) -> bool:
        """Kafka's maybeElectNewJoinedLeader: the leader must be a member that rejoined."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # ---- protocols -------------------------------------------------------------------------
    def supports_protocols(self, protocol_type: str, protocols: Protocols) -> bool:
        names = {name for name, _ in protocols}
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols[name] == self.size for name in names
        )

    def select_protocol(self) -> str:
        """The protocol most members prefer among those every member supports."""
        candidates = {p for p, n in self.supported_protocols.items() if n == self.size}
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda p: votes[p])  # ties: the first voted for (join order)

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        return [
            (m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        ]

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, when every subscription parses (consumer groups)."""
        if self.protocol_type != PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            subscribed = subscribed_topics(member.metadata(self.protocol_name))
            if subscribed is None:
                return None
            topics |= subscribed
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # ---- offsets ---------------------------------------------------------------------------
    def has_offsets(self) -> bool:
        return bool(self.offsets) or any(self.pending_commits)

    def pending_partitions(self) -> set[TopicPartition]:
        """The partitions of the commits being written."""
        return {tp for partitions in self.pending_commits for tp in partitions}

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        """Kafka's removeExpiredOffsets rules (KIP-211); commits being written never expire."""
        if self.protocol_type is not None and self.is_(GroupState.EMPTY):
            base = self.current_state_timestamp
            skip: set[str] = set()
        elif (
            self.protocol_type == PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.is_(GroupState.STABLE)
        ):
            base, skip = None, self.subscribed_topics
        elif self.protocol_type is None:
            base, skip = None, set()
        else:
            return []
        expired: list[TopicPartition] = []
        pending = self.pending_partitions()
        for tp, offset in self.offsets.items():
            if tp[0] in skip or tp in pending:
                continue
            if offset.expire_timestamp >= 0:
                if now_ms >= offset.expire_timestamp:
                    expired.append(tp)
            elif now_ms - (base if base is not None else offset.commit_timestamp) >= retention_ms:
                expired.append(tp)
        return expired

    # ---- persistence -----------------------------------------------------------------------
    def metadata_record(self, assignment: dict[str, bytes]) -> GroupMetadata:
        """GroupMetadataValue of the current generation with ``assignment`` per member."""
        return GroupMetadata(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=(
                self.current_state_timestamp if self.current_state_timestamp is not None else -1
            ),
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.metadata(self.protocol_name),
                    assignment=assignment.get(m.member_id, b""),
                )
                for m in self.members.values()
            ),
        )

    @classmethod
    def from_record(cls, group_id: str, record: GroupMetadata, now_ms: int) -> Group:
        """A group as loaded from its GroupMetadataValue: Stable with members, else Empty."""
        usable = bool(record.members) and record.protocol is not None
        group = cls(group_id, GroupState.STABLE if usable else GroupState.EMPTY, now_ms)
        group.current_state_timestamp = (
            record.current_state_timestamp if record.current_state_timestamp >= 0 else None
        )
        group.generation_id = record.generation
        group.protocol_type = record.protocol_type or None
        group.protocol_name = record.protocol if usable else None
        if usable:
            for m in record.members:
                member = Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocol_type=record.protocol_type,
                    protocols=[(record.protocol or "", m.subscription)],
                    assignment=m.assignment,
                )
                group.add(member, None)
            group.leader_id = (
                record.leader if record.leader in group.members else next(iter(group.members))
            )
        group.subscribed_topics = group.compute_subscribed_topics()
        return group
