"""Group coordinator settings (Kafka broker property names where Kafka has one)."""

from __future__ import annotations

from services.common.listeners import ListenerSettings
from services.common.settings import ServiceSettings, kafka_prop
from services.common.zone import RackDiscoverySettings


class GroupCoordinatorSettings(ServiceSettings, ListenerSettings, RackDiscoverySettings):
    LISTENER_SCHEMES = ("GRPC",)
    node_id: int = kafka_prop(
        ..., "node.id", "this group coordinator's id (required; -1: generated, from 1001)", ge=-1
    )
    listeners: str = kafka_prop(
        "GRPC://127.0.0.1:0",
        "listeners",
        "gRPC bind address, host:port or GRPC://host:port (port 0 = any)",
    )
    advertised_listeners: str | None = kafka_prop(
        None, "advertised.listeners", "address registered in ZooKeeper (default: the bound one)"
    )
    broker_rack: str | None = kafka_prop(None, "broker.rack", "zone of this coordinator")
    zookeeper_session_timeout_ms: int = kafka_prop(
        6000,
        "zookeeper.session.timeout.ms",
        "ZooKeeper session timeout (a dead coordinator's shards move after it)",
        gt=0,
    )
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
    request_timeout_ms: int = kafka_prop(
        30000, "request.timeout.ms", "bound of one storage call made while loading a shard", gt=0
    )
    shutdown_timeout_ms: int = kafka_prop(
        10000, "kafkapy.shutdown.timeout.ms", "how long in-flight requests may run after SIGTERM"
    )
