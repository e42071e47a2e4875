"""The group settings a shard applies (Kafka's GroupConfig and OffsetConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.internal_topics.consumer_offsets import (
    GROUP_VALUE_VERSION,
    group_value_version,
)
from services.group_coordinator.settings import GroupCoordinatorSettings

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member whose JoinGroup is still
# parked after this long is dropped (it retries if it is still alive).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(frozen=True, slots=True)
class GroupConfig:
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    offsets_retention_ms: int = 10080 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    group_metadata_value_version: int = GROUP_VALUE_VERSION

    @classmethod
    def from_settings(cls, settings: GroupCoordinatorSettings) -> GroupConfig:
        return cls(
            group_min_session_timeout_ms=settings.group_min_session_timeout_ms,
            group_max_session_timeout_ms=settings.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
            group_max_size=settings.group_max_size,
            offsets_retention_ms=settings.offsets_retention_minutes * 60 * 1000,
            offsets_retention_check_interval_ms=settings.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=settings.offset_metadata_max_bytes,
            group_metadata_value_version=group_value_version(
                settings.inter_broker_protocol_version
            ),
        )
