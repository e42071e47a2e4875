"""A gateway applies a dynamic broker config change in a task of its own (host names of
max.connections.per.ip.overrides are resolved first); ``settled`` waits for it, so the gateway
that answers an alter has the new values in force (read-your-writes)."""

from __future__ import annotations

import asyncio
import json

from services.common.broker_config import DEFAULT_ENTITY
from services.common.broker_config_store import BrokerConfigStore
from services.gateway.connection_quotas import ConnectionQuotas
from services.gateway.dynamic_config import GatewayBrokerConfig
from services.gateway.settings import GatewaySettings


def _znode(config: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": config}).encode()


def test_settled_waits_until_a_default_change_is_in_force() -> None:
    async def scenario() -> None:
        settings = GatewaySettings.load(["--node.id", "1"], env={})
        store = BrokerConfigStore()
        applier = GatewayBrokerConfig(settings, store, ConnectionQuotas())
        store.on_change(applier.on_change)
        await applier.apply()
        default = applier.message_max_bytes
        # a host name to resolve: the apply awaits getaddrinfo before setting the values
        store.apply(
            DEFAULT_ENTITY,
            _znode(
                {"message.max.bytes": "2000", "max.connections.per.ip.overrides": "localhost:5"}
            ),
        )
        assert applier.message_max_bytes == default  # not yet: the apply runs in its task
        await applier.settled()
        assert applier.message_max_bytes == 2000
        store.apply(DEFAULT_ENTITY, None)  # the default deleted: the setting again
        await applier.settled()
        assert applier.message_max_bytes == default
        await applier.settled()  # nothing pending: returns at once

    asyncio.run(scenario())
