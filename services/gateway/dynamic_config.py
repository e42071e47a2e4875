"""The dynamic broker configs a gateway applies: connection limits and ``message.max.bytes``.

Values come from the layers of ``services.common.broker_config`` for this gateway's node id:
``/config/brokers/<id>``, ``/config/brokers/<default>``, the gateway's own settings, the
default. ``apply`` is called at start and whenever ZooKeeper changes; hostnames in
``max.connections.per.ip.overrides`` are resolved then (Kafka resolves them when the config is
applied too).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from typing import Any

from services.common.broker_config import (
    DEFAULT_ENTITY,
    DYNAMIC_BROKER_CONFIGS,
    GATEWAY,
    is_ip_literal,
    parse_ip_overrides,
    typed_layer,
)
from services.common.broker_config_store import BrokerConfigStore
from services.common.logging import get_logger
from services.common.topic_config import format_value
from services.gateway.connection_quotas import ConnectionQuotas
from services.gateway.settings import GatewaySettings

log = get_logger("gateway.config")

# Dynamic broker config -> GatewaySettings field holding its static value.
GATEWAY_FIELDS = {
    "message.max.bytes": "message_max_bytes",
    "max.connections": "max_connections",
    "max.connections.per.ip": "max_connections_per_ip",
    "max.connections.per.ip.overrides": "max_connections_per_ip_overrides",
}


def static_configs(settings: GatewaySettings) -> dict[str, str]:
    """The gateway's explicitly set broker configs (STATIC_BROKER_CONFIG), as strings."""
    explicit = settings.model_fields_set
    return {
        name: format_value(getattr(settings, field))
        for name, field in GATEWAY_FIELDS.items()
        if field in explicit
    }


class GatewayBrokerConfig:
    """This gateway's effective values of the dynamic broker configs it applies."""

    def __init__(
        self, settings: GatewaySettings, store: BrokerConfigStore, quotas: ConnectionQuotas
    ) -> None:
        self.settings = settings
        self.store = store
        self.quotas = quotas
        self.message_max_bytes: int = settings.message_max_bytes
        self._applying: asyncio.Future[None] | None = None
        self._lock = asyncio.Lock()  # one apply at a time, each reading the latest values

    def effective(self) -> dict[str, Any]:
        node = str(self.settings.node_id)
        per_broker, default = self.store.layers(self.settings.node_id)
        out = {name: getattr(self.settings, field) for name, field in GATEWAY_FIELDS.items()}
        for entity, layer in ((DEFAULT_ENTITY, default), (node, per_broker)):
            typed = typed_layer(entity, layer)
            out.update(
                {k: v for k, v in typed.items() if GATEWAY in DYNAMIC_BROKER_CONFIGS[k].services}
            )
        return out

    def on_change(self, entity: str) -> None:
        """BrokerConfigStore listener: re-apply when this gateway's layers changed."""
        if entity in (DEFAULT_ENTITY, str(self.settings.node_id)):
            self._applying = asyncio.ensure_future(self.apply())

    async def settled(self) -> None:
        """Until the apply of the latest change of this gateway's layers has finished: a store
        change is applied in a task of its own (host names are resolved first), so a gateway
        that waited for an altered config to reach its store waits for this too before it
        answers the alter (read-your-writes: the client's next request meets the new value)."""
        applying = self._applying
        if applying is not None and not applying.done():
            await asyncio.shield(applying)

    async def apply(self) -> None:
        async with self._lock:
            try:
                await self._apply()
            except Exception:  # noqa: BLE001 - the previous limits stay in force
                log.exception("broker config not applied")

    async def _apply(self) -> None:
        values = self.effective()
        try:
            raw = parse_ip_overrides(values["max.connections.per.ip.overrides"])
        except ValueError as exc:
            log.warning("invalid max.connections.per.ip.overrides ignored", error=str(exc))
            raw = {}
        overrides = await resolve_hosts(raw)
        self.message_max_bytes = int(values["message.max.bytes"])
        self.quotas.configure(
            int(values["max.connections"]), int(values["max.connections.per.ip"]), overrides
        )
        log.info(
            "broker config applied",
            max_connections=values["max.connections"],
            max_connections_per_ip=values["max.connections.per.ip"],
            max_connections_per_ip_overrides=overrides,
            message_max_bytes=self.message_max_bytes,
        )


async def resolve_hosts(limits: Mapping[str, int]) -> dict[str, int]:
    """``host -> limit`` with every host turned into its addresses (IP literals as they are);
    a host that does not resolve is logged and skipped."""
    loop = asyncio.get_running_loop()
    out: dict[str, int] = {}
    for host, limit in limits.items():
        if is_ip_literal(host):
            out[host] = limit
            continue
        try:
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            log.warning(
                "cannot resolve host of max.connections.per.ip.overrides", host=host, error=str(exc)
            )
            continue
        for info in infos:
            out[str(info[4][0])] = limit
    return out
