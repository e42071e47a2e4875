"""Gateway settings (Kafka broker property names where Kafka has one)."""

from __future__ import annotations

from pydantic import field_validator

from services.common.broker_config import parse_ip_overrides
from services.common.listeners import ListenerAddress, ListenerSettings
from services.common.listeners import parse_listener as _parse_listener
from services.common.settings import ServiceSettings, kafka_prop
from services.common.zone import RackDiscoverySettings

LISTENER_SCHEMES = ("PLAINTEXT",)


def parse_listener(value: str, prop: str = "listeners") -> ListenerAddress:
    return _parse_listener(value, prop, LISTENER_SCHEMES)


class GatewaySettings(ServiceSettings, ListenerSettings, RackDiscoverySettings):
    LISTENER_SCHEMES = LISTENER_SCHEMES
    node_id: int = kafka_prop(
        ...,
        "node.id",
        "this gateway's node id, as clients see it (required; -1: generated, from 1001)",
        ge=-1,
    )
    listeners: str = kafka_prop(
        "PLAINTEXT://127.0.0.1:9092",
        "listeners",
        "Kafka listener, host:port or PLAINTEXT://host:port",
    )
    advertised_listeners: str | None = kafka_prop(
        None, "advertised.listeners", "address clients are told (default: the listener)"
    )
    broker_rack: str | None = kafka_prop(None, "broker.rack", "zone of this gateway")
    auto_create_topics_enable: bool = kafka_prop(
        True, "auto.create.topics.enable", "create unknown topics named in Metadata requests"
    )
    socket_request_max_bytes: int = kafka_prop(
        104857600,
        "socket.request.max.bytes",
        "largest request frame; bigger ones close the connection",
        gt=0,
    )
    message_max_bytes: int = kafka_prop(
        1048588,
        "message.max.bytes",
        "largest record batch (default of the topic's max.message.bytes)",
        gt=0,
    )
    connections_max_idle_ms: int = kafka_prop(
        600000, "connections.max.idle.ms", "idle connections are closed after this long", gt=0
    )
    max_connections: int = kafka_prop(
        2147483647,
        "max.connections",
        "client connections this gateway keeps open; more are closed right after accept",
        ge=0,
    )
    max_connections_per_ip: int = kafka_prop(
        2147483647,
        "max.connections.per.ip",
        "connections accepted from one IP address; more are closed right after accept",
        ge=0,
    )
    max_connections_per_ip_overrides: str = kafka_prop(
        "",
        "max.connections.per.ip.overrides",
        "per-IP or hostname limits overriding max.connections.per.ip ('host:count,...')",
    )
    request_timeout_ms: int = kafka_prop(
        30000, "request.timeout.ms", "bound of internal calls made for one client request", gt=0
    )
    producer_id_block_size: int = kafka_prop(
        1000,
        "kafkapy.producer.id.block.size",
        "producer ids claimed from ZooKeeper at a time",
        gt=0,
    )
    max_inflight_requests: int = kafka_prop(
        128,
        "kafkapy.connection.max.inflight.requests",
        "requests handled concurrently per connection before reading pauses",
        gt=0,
    )
    shutdown_timeout_ms: int = kafka_prop(
        15000,
        "kafkapy.shutdown.timeout.ms",
        "how long in-flight requests may run after SIGTERM",
        ge=0,
    )
    auto_create_wait_ms: int = kafka_prop(
        5000,
        "kafkapy.auto.create.wait.ms",
        "how long a Metadata request waits for the controller when auto-creating a topic",
        ge=0,
    )

    @field_validator("max_connections_per_ip_overrides")
    @classmethod
    def _ip_overrides(cls, v: str) -> str:
        parse_ip_overrides(v)  # ValueError: one readable line
        return v
