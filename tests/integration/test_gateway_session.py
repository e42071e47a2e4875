"""An in-process gateway survives a ZooKeeper session expiry: it registers again and its
metadata cache keeps following ZooKeeper."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.client import KazooClient

from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.gateway.app import Gateway
from services.gateway.settings import GatewaySettings

pytestmark = pytest.mark.integration


async def _expire(gateway: Gateway) -> None:
    """Expire the gateway's session the classic way: open and close a clone of it."""
    session_id, password = gateway.zk.client.client_id
    hosts = gateway.zk.connect_string

    def clone() -> None:
        other = KazooClient(hosts=hosts, client_id=(session_id, password))
        other.start(10)
        other.stop()
        other.close()

    await asyncio.to_thread(clone)


async def test_reregisters_after_session_expiry(zk_connect: str) -> None:
    settings = GatewaySettings.load(
        [
            "--node.id",
            "4",
            "--listeners",
            "127.0.0.1:0",
            "--zookeeper.connect",
            zk_connect,
            "--zookeeper.session.timeout.ms",
            "4000",
            "--admin.port",
            "0",
        ],
        env={},
    )
    gateway = Gateway(settings)
    writer = AsyncZk(zk_connect)
    await gateway.start()
    await writer.start()
    try:
        path = layout.gateway_path(4)
        _, stat = await writer.get(path)
        old_owner = stat.ephemeralOwner
        assert gateway.ready()
        await _expire(gateway)

        async def registered_again() -> None:
            while True:
                found = await writer.get_or_none(path)
                if found is not None and found[1].ephemeralOwner != old_owner:
                    return
                await asyncio.sleep(0.05)

        await asyncio.wait_for(registered_again(), 20)
        # the watches survived the new session
        await writer.create(layout.topic_path("after"), layout.topic_assignment_json({0: [1]}))
        await writer.create(
            layout.partition_state_path("after", 0),
            layout.PartitionStateZk(1, 0, [1], 1).to_json(),
            makepath=True,
        )
        assert await gateway.cache.wait_for(lambda: gateway.cache.topic("after") is not None, 10)
        assert gateway.ready()
    finally:
        await gateway.stop()
        await writer.stop()
