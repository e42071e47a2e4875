"""What the group API hands a shard and what it answers (besides ``group``'s Join/SyncResult)."""

from __future__ import annotations

from dataclasses import dataclass

from services.group_coordinator.group import GroupState, Protocols


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


DEAD_GROUP = GroupSummary(GroupState.DEAD.value, "", "")
