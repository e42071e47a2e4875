"""Controller settings (Kafka property names)."""

from __future__ import annotations

from services.common.listeners import ListenerAddress, ListenerSettings
from services.common.listeners import parse_listener as _parse_listener
from services.common.settings import ServiceSettings, kafka_prop
from services.controller.elastic_settings import ElasticSettings

LISTENER_SCHEMES = ("GRPC",)
Listener = ListenerAddress


def parse_listener(value: str, prop: str = "listeners") -> ListenerAddress:
    return _parse_listener(value, prop, LISTENER_SCHEMES)


class ControllerSettings(ServiceSettings, ListenerSettings, ElasticSettings):
    LISTENER_SCHEMES = LISTENER_SCHEMES
    controller_id: int = kafka_prop(
        ..., "controller.id", "this controller's id (required; -1: generated, from 1001)", ge=-1
    )
    listeners: str = kafka_prop(
        "GRPC://127.0.0.1:0",
        "listeners",
        "gRPC bind address, host:port or GRPC://host:port (port 0 = any)",
    )
    advertised_listeners: str | None = kafka_prop(
        None, "advertised.listeners", "address registered in ZooKeeper (default: the bound one)"
    )
    # Kafka's ZooKeeper-era default (6 s) rather than the broker's 18 s: failover waits for the
    # dead controller's session to expire.
    zookeeper_session_timeout_ms: int = kafka_prop(
        6000, "zookeeper.session.timeout.ms", "ZooKeeper session timeout", ge=1
    )
    num_partitions: int = kafka_prop(
        1, "num.partitions", "partitions of a topic created with -1", ge=1
    )
    default_replication_factor: int = kafka_prop(
        1, "default.replication.factor", "replication factor of a topic created with -1", ge=1
    )
    delete_topic_enable: bool = kafka_prop(True, "delete.topic.enable", "allow topic deletion")
    unclean_leader_election_enable: bool = kafka_prop(
        False,
        "unclean.leader.election.enable",
        "elect an out-of-sync replica when no ISR member is alive (topics may override)",
    )
    offsets_topic_num_partitions: int = kafka_prop(
        50,
        "offsets.topic.num.partitions",
        "partitions of __consumer_offsets (do not change after deployment)",
        ge=1,
    )
    offsets_topic_replication_factor: int = kafka_prop(
        3,
        "offsets.topic.replication.factor",
        "replication factor of __consumer_offsets",
        ge=1,
        le=32767,
    )
    offsets_topic_segment_bytes: int = kafka_prop(
        104857600, "offsets.topic.segment.bytes", "segment size of __consumer_offsets", ge=1
    )
    transaction_state_log_num_partitions: int = kafka_prop(
        50,
        "transaction.state.log.num.partitions",
        "partitions of __transaction_state (do not change after deployment)",
        ge=1,
    )
    transaction_state_log_replication_factor: int = kafka_prop(
        3,
        "transaction.state.log.replication.factor",
        "replication factor of __transaction_state",
        ge=1,
        le=32767,
    )
    transaction_state_log_min_isr: int = kafka_prop(
        2, "transaction.state.log.min.isr", "min.insync.replicas of __transaction_state", ge=1
    )
    transaction_state_log_segment_bytes: int = kafka_prop(
        104857600,
        "transaction.state.log.segment.bytes",
        "segment size of __transaction_state",
        ge=1,
    )
    auto_leader_rebalance_enable: bool = kafka_prop(
        True,
        "auto.leader.rebalance.enable",
        "move leadership back to preferred replicas when a storage node leads too few of them",
    )
    leader_imbalance_check_interval_seconds: int = kafka_prop(
        300,
        "leader.imbalance.check.interval.seconds",
        "how often the leader balance is checked",
        ge=1,
    )
    leader_imbalance_per_broker_percentage: int = kafka_prop(
        10,
        "leader.imbalance.per.broker.percentage",
        "share of a node's preferred partitions led elsewhere above which they are moved back",
        ge=0,
        le=100,
    )
    controller_socket_timeout_ms: int = kafka_prop(
        30000, "controller.socket.timeout.ms", "deadline of one order sent to a storage node", ge=1
    )
