"""One listener address per service: parsing ``listeners`` / ``advertised.listeners``.

Each service accepts ``host:port`` or ``SCHEME://host:port`` with its own scheme
(PLAINTEXT for the Kafka listener, GRPC for internal services); IPv6 hosts in brackets.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import ClassVar

from pydantic import BaseModel, ValidationInfo, field_validator

from services.common.settings import ConfigError

ANY_HOSTS = ("", "0.0.0.0", "::")


@dataclass(frozen=True, slots=True)
class ListenerAddress:
    host: str
    port: int

    @property
    def bind_target(self) -> str:
        host = self.host or "0.0.0.0"
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"


def parse_listener(value: str, prop: str, schemes: tuple[str, ...]) -> ListenerAddress:
    """Parse exactly one listener; errors are one readable line naming ``prop``."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if len(items) != 1:
        raise ConfigError(
            f"invalid setting {prop}: exactly one listener is supported, got {value!r}"
        )
    item = items[0]
    scheme, sep, rest = item.partition("://")
    if sep:
        if scheme.upper() not in schemes:
            raise ConfigError(
                f"invalid setting {prop}: listener scheme must be {' or '.join(schemes)}, got {scheme!r}"
            )
        item = rest
    host, sep, port_s = item.rpartition(":")
    if not sep:
        raise ConfigError(f"invalid setting {prop}: expected host:port, got {value!r}")
    try:
        port = int(port_s)
    except ValueError:
        raise ConfigError(f"invalid setting {prop}: bad port in {value!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"invalid setting {prop}: port {port} out of range")
    return ListenerAddress(host.strip("[]"), port)


class ListenerSettings(BaseModel):
    """Mixin for settings with ``listeners`` and ``advertised.listeners`` fields."""

    LISTENER_SCHEMES: ClassVar[tuple[str, ...]] = ("GRPC",)
    listeners: str
    advertised_listeners: str | None

    @field_validator("listeners", "advertised_listeners")
    @classmethod
    def _check_listener(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None:
            try:
                parse_listener(v, str(info.field_name), cls.LISTENER_SCHEMES)
            except ConfigError as exc:
                raise ValueError(str(exc).split(": ", 1)[-1]) from None
        return v

    @property
    def listener(self) -> ListenerAddress:
        return parse_listener(self.listeners, "listeners", self.LISTENER_SCHEMES)

    def advertised(self, bound_port: int) -> ListenerAddress:
        """The address to publish: advertised.listeners, else the bound one (port 0 -> bound)."""
        if self.advertised_listeners:
            adv = parse_listener(
                self.advertised_listeners, "advertised.listeners", self.LISTENER_SCHEMES
            )
        else:
            adv = self.listener
        host = adv.host if adv.host not in ANY_HOSTS else socket.getfqdn()
        return ListenerAddress(host, adv.port or bound_port)
