"""Gateway settings (Kafka broker property names where Kafka has one)."""

from __future__ import annotations

from pydantic import field_validator

from services.common.listeners import ListenerAddress, ListenerSettings
from services.common.listeners import parse_listener as _parse_listener
from services.common.settings import ServiceSettings, kafka_prop

LISTENER_SCHEMES = ("PLAINTEXT",)


def parse_listener(value: str, prop: str = "listeners") -> ListenerAddress:
    return _parse_listener(value, prop, LISTENER_SCHEMES)


class GatewaySettings(ServiceSettings, ListenerSettings):
    LISTENER_SCHEMES = LISTENER_SCHEMES
    node_id: int = kafka_prop(
        ..., "node.id", "this gateway's node id, as clients see it (required)"
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
    )
    message_max_bytes: int = kafka_prop(
        1048588,
        "message.max.bytes",
        "largest record batch (default of the topic's max.message.bytes)",
    )
    connections_max_idle_ms: int = kafka_prop(
        600000, "connections.max.idle.ms", "idle connections are closed after this long"
    )
    request_timeout_ms: int = kafka_prop(
        30000, "request.timeout.ms", "bound of internal calls made for one client request"
    )
    producer_id_block_size: int = kafka_prop(
        1000, "kafkapy.producer.id.block.size", "producer ids claimed from ZooKeeper at a time"
    )
    max_inflight_requests: int = kafka_prop(
        128,
        "kafkapy.connection.max.inflight.requests",
        "requests handled concurrently per connection before reading pauses",
    )
    shutdown_timeout_ms: int = kafka_prop(
        15000, "kafkapy.shutdown.timeout.ms", "how long in-flight requests may run after SIGTERM"
    )
    auto_create_wait_ms: int = kafka_prop(
        5000,
        "kafkapy.auto.create.wait.ms",
        "how long a Metadata request waits for the controller when auto-creating a topic",
    )

    @field_validator("node_id")
    @classmethod
    def _node_id(cls, v: int) -> int:
        if v < 0:
            raise ValueError("must be >= 0")
        return v

    @field_validator(
        "socket_request_max_bytes",
        "message_max_bytes",
        "connections_max_idle_ms",
        "request_timeout_ms",
        "producer_id_block_size",
        "max_inflight_requests",
    )
    @classmethod
    def _positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("must be > 0")
        return v

    @field_validator("shutdown_timeout_ms", "auto_create_wait_ms")
    @classmethod
    def _non_negative(cls, v: int) -> int:
        if v < 0:
            raise ValueError("must be >= 0")
        return v
