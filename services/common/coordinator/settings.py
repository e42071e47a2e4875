"""Settings every coordinator process has (Kafka broker property names where Kafka has one)."""

from __future__ import annotations

from services.common.listeners import ListenerSettings
from services.common.settings import ServiceSettings, kafka_prop
from services.common.zone import RackDiscoverySettings


class CoordinatorSettings(ServiceSettings, ListenerSettings, RackDiscoverySettings):
    LISTENER_SCHEMES = ("GRPC",)
    node_id: int = kafka_prop(
        ..., "node.id", "this coordinator's id (required; -1: generated, from 1001)", ge=-1
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
    request_timeout_ms: int = kafka_prop(
        30000, "request.timeout.ms", "bound of one storage call made while loading a shard", gt=0
    )
    shutdown_timeout_ms: int = kafka_prop(
        10000, "kafkapy.shutdown.timeout.ms", "how long in-flight requests may run after SIGTERM"
    )
