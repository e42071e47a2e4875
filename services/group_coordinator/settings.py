"""Group coordinator settings (Kafka broker property names where Kafka has one)."""

from __future__ import annotations

from pydantic import field_validator

from services.common.coordinator.settings import CoordinatorSettings
from services.common.internal_topics.consumer_offsets import group_value_version
from services.common.settings import kafka_prop


class GroupCoordinatorSettings(CoordinatorSettings):
    group_min_session_timeout_ms: int = kafka_prop(
        6000, "group.min.session.timeout.ms", "smallest session timeout a member may ask for", ge=0
    )
    group_max_session_timeout_ms: int = kafka_prop(
        1800000,
        "group.max.session.timeout.ms",
        "largest session timeout a member may ask for",
        gt=0,
    )
    group_initial_rebalance_delay_ms: int = kafka_prop(
        3000,
        "group.initial.rebalance.delay.ms",
        "how long a new group waits for more members before its first rebalance",
        ge=0,
    )
    group_max_size: int = kafka_prop(2**31 - 1, "group.max.size", "members a group may have", gt=0)
    offsets_retention_minutes: int = kafka_prop(
        10080, "offsets.retention.minutes", "how long offsets of an empty group are kept", gt=0
    )
    offsets_retention_check_interval_ms: int = kafka_prop(
        600000, "offsets.retention.check.interval.ms", "how often expired offsets are removed", gt=0
    )
    offset_metadata_max_bytes: int = kafka_prop(
        4096, "offset.metadata.max.bytes", "largest metadata string of a committed offset", gt=0
    )
    offsets_commit_timeout_ms: int = kafka_prop(
        5000,
        "offsets.commit.timeout.ms",
        "how long a commit waits for every in-sync replica of the offsets partition",
        gt=0,
    )
    offsets_load_buffer_size: int = kafka_prop(
        5242880, "offsets.load.buffer.size", "bytes read per fetch when loading a shard", gt=0
    )
    inter_broker_protocol_version: str = kafka_prop(
        "3.7",
        "inter.broker.protocol.version",
        "decides the GroupMetadataValue version written to __consumer_offsets as in Kafka "
        "(below 2.1: v1, which Burrow 1.2.1 reads)",
    )

    @field_validator("inter_broker_protocol_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        group_value_version(value)  # ValueError for a malformed version
        return value

    consumer_lag_refresh_interval_ms: int = kafka_prop(
        10000,
        "consumer.lag.refresh.interval.ms",
        "how often the high watermarks behind the consumer lag metrics are refreshed "
        "(one batched ListOffsets per storage leader)",
        gt=0,
    )
