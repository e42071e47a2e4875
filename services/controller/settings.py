"""Controller settings (Kafka property names)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from pydantic import ValidationInfo, field_validator

from services.common.settings import ConfigError, ServiceSettings, kafka_prop

_ANY_HOSTS = ("", "0.0.0.0", "::")


@dataclass(frozen=True, slots=True)
class Listener:
    host: str
    port: int

    @property
    def bind_target(self) -> str:
        host = self.host or "0.0.0.0"
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"


def parse_listener(value: str, prop: str = "listeners") -> Listener:
    """``host:port`` or ``GRPC://host:port`` (exactly one; IPv6 hosts in brackets)."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if len(items) != 1:
        raise ConfigError(
            f"invalid setting {prop}: exactly one listener is supported, got {value!r}"
        )
    item = items[0]
    scheme, sep, rest = item.partition("://")
    if sep:
        if scheme.upper() != "GRPC":
            raise ConfigError(
                f"invalid setting {prop}: listener scheme must be GRPC, got {scheme!r}"
            )
        item = rest
    host, sep, port_s = item.rpartition(":")
    if not sep or not port_s.isdigit() or int(port_s) > 65535:
        raise ConfigError(f"invalid setting {prop}: expected host:port, got {value!r}")
    return Listener(host.strip("[]"), int(port_s))


class ControllerSettings(ServiceSettings):
    controller_id: int = kafka_prop(..., "controller.id", "this controller's id (required)")
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
        6000, "zookeeper.session.timeout.ms", "ZooKeeper session timeout"
    )
    num_partitions: int = kafka_prop(1, "num.partitions", "partitions of a topic created with -1")
    default_replication_factor: int = kafka_prop(
        1, "default.replication.factor", "replication factor of a topic created with -1"
    )
    delete_topic_enable: bool = kafka_prop(True, "delete.topic.enable", "allow topic deletion")
    unclean_leader_election_enable: bool = kafka_prop(
        False,
        "unclean.leader.election.enable",
        "elect an out-of-sync replica when no ISR member is alive (topics may override)",
    )
    controller_socket_timeout_ms: int = kafka_prop(
        30000, "controller.socket.timeout.ms", "deadline of one order sent to a storage node"
    )

    @field_validator(
        "controller_id",
        "num_partitions",
        "default_replication_factor",
        "controller_socket_timeout_ms",
        "zookeeper_session_timeout_ms",
    )
    @classmethod
    def _check_int(cls, v: int, info: ValidationInfo) -> int:
        minimum = 0 if info.field_name == "controller_id" else 1
        if v < minimum:
            raise ValueError(f"must be >= {minimum}")
        return v

    @field_validator("listeners", "advertised_listeners")
    @classmethod
    def _check_listener(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None:
            try:
                parse_listener(v, str(info.field_name))
            except ConfigError as exc:
                raise ValueError(str(exc).split(": ", 1)[-1]) from None
        return v

    @property
    def listener(self) -> Listener:
        return parse_listener(self.listeners, "listeners")

    def advertised(self, bound_port: int) -> Listener:
        """The address to register: advertised.listeners, else the bound one."""
        adv = (
            parse_listener(self.advertised_listeners, "advertised.listeners")
            if self.advertised_listeners
            else self.listener
        )
        host = adv.host if adv.host not in _ANY_HOSTS else socket.getfqdn()
        return Listener(host, adv.port or bound_port)
