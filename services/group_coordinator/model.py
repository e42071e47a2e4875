"""What a group coordinator shard persists in ``__consumer_offsets``: committed offsets and
group metadata, as Kafka's GroupMetadataManager keeps them (field names follow Kafka's
OffsetCommitValue / GroupMetadataValue schemas)."""

from __future__ import annotations

from dataclasses import dataclass, field

NO_EXPIRE_TIMESTAMP = -1
NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset (the next offset to consume) of one group and partition."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int = NO_EXPIRE_TIMESTAMP  # only OffsetCommitValue v1 carries one


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member as GroupMetadataValue stores it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the metadata of the selected protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """A group's persisted state (written after each completed rebalance and when it empties)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = field(default_factory=tuple)


@dataclass(slots=True)
class ShardSnapshot:
    """A shard's state as replayed from its ``__consumer_offsets`` partition (newest record per
    key wins; tombstones remove)."""

    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = field(default_factory=dict)
