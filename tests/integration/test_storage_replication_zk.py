"""The ZooKeeper side of replication against a real ZooKeeper: the leader's conditional ISR write,
the notification the controller consumes, and leader addresses kept fresh by a watch."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable

import pytest

from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.storage.replication import endpoints
from services.storage.replication.endpoints import BrokerAddresses
from services.storage.replication.isr import IsrVersionConflict, ZkIsrStore

pytestmark = pytest.mark.integration


@pytest.fixture
async def zk(zk_connect: str) -> AsyncIterator[AsyncZk]:
    client = AsyncZk(zk_connect)
    await client.start()
    await client.ensure_layout()
    yield client
    await client.stop()


async def test_isr_write_is_conditional_and_keeps_the_other_fields(zk: AsyncZk) -> None:
    path = layout.partition_state_path("t", 3)
    await zk.create(path, layout.PartitionStateZk(1, 4, [1], 7).to_json(), makepath=True)
    store = ZkIsrStore(zk)
    got = await store.read("t", 3)
    assert got is not None and got[1] == 0
    version = await store.write("t", 3, layout.PartitionStateZk(1, 4, [1, 2], 7), 0)
    assert version == 1
    data, stat = await zk.get(path)
    assert stat.version == 1
    # exactly Kafka's layout, what the controller and the gateways parse
    assert json.loads(data) == {
        "controller_epoch": 7,
        "leader": 1,
        "version": 1,
        "leader_epoch": 4,
        "isr": [1, 2],
    }
    with pytest.raises(IsrVersionConflict):
        await store.write("t", 3, layout.PartitionStateZk(1, 4, [1], 7), 0)
    with pytest.raises(IsrVersionConflict):
        await store.write("gone", 0, layout.PartitionStateZk(1, 4, [1], 7), 0)
    assert await store.read("gone", 0) is None


async def test_isr_change_notification_layout(zk: AsyncZk) -> None:
    store = ZkIsrStore(zk)
    await store.notify([("a", 0), ("b", 2)])
    await store.notify([("a", 1)])
    children = sorted(await zk.get_children(layout.ISR_CHANGE_NOTIFICATION))
    assert children == ["isr_change_0000000000", "isr_change_0000000001"]
    data, _ = await zk.get(f"{layout.ISR_CHANGE_NOTIFICATION}/{children[0]}")
    assert json.loads(data) == {
        "version": 1,
        "partitions": [{"topic": "a", "partition": 0}, {"topic": "b", "partition": 2}],
    }


async def test_broker_addresses_follow_registrations(zk: AsyncZk) -> None:
    changed: list[int] = []
    addresses = BrokerAddresses(zk, on_change=changed.append)
    assert await addresses.get(5) is None  # not registered (yet)
    await zk.create(
        layout.broker_path(5),
        layout.BrokerRegistration(5, "127.0.0.1", 4321).to_json(),
        ephemeral=True,
    )
    deadline = time.monotonic() + 5
    # (a lookup may answer from its own read before the watch reports the change)
    while await addresses.get(5) != "127.0.0.1:4321" or not changed:
        assert time.monotonic() < deadline, "address not refreshed"
        await asyncio.sleep(0.02)
    assert changed == [5]
    await zk.set(layout.broker_path(5), layout.BrokerRegistration(5, "127.0.0.1", 9999).to_json())
    while await addresses.get(5) != "127.0.0.1:9999":
        assert time.monotonic() < deadline, "address not refreshed"
        await asyncio.sleep(0.02)
    await zk.delete(layout.broker_path(5))
    while await addresses.get(5) is not None:
        assert time.monotonic() < deadline, "deregistration not seen"
        await asyncio.sleep(0.02)
    assert changed == [5, 5, 5]


async def test_leader_address_lookup_does_not_wait_for_its_watch_registration(
    zk: AsyncZk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the e2e reassignment test: a restarted follower started its fetcher for leader 3
    and stopped it 3 ms later (its partitions moved), cancelling the first lookup of 3's address
    before the watch registration ran on its thread; the next fetcher's lookups then waited on a
    registration that never came (TimeoutError every ADDRESS_LOOKUP_TIMEOUT_S), and the 15
    partitions it followed from 3 stayed out of the ISR until the test gave up. Lookups also
    waited on a held registration: kazoo's DataWatch reads with retries without limit, sleeps
    growing to 60 s while ZooKeeper is unreachable or the session expired (held here)."""
    monkeypatch.setattr(endpoints, "ADDRESS_LOOKUP_TIMEOUT_S", 2.0)
    await zk.create(
        layout.broker_path(6),
        layout.BrokerRegistration(6, "127.0.0.1", 4321).to_json(),
        ephemeral=True,
    )
    held = threading.Event()
    real_watch = zk.watch_data

    def held_watch(path: str, callback: Callable[..., None]) -> None:
        held.wait(30)
        real_watch(path, callback)

    monkeypatch.setattr(zk, "watch_data", held_watch)
    changed: list[int] = []
    addresses = BrokerAddresses(zk, on_change=changed.append)
    try:
        first = asyncio.ensure_future(addresses.get(6))
        await asyncio.sleep(0)
        first.cancel()  # its fetcher stopped mid-lookup
        # the next lookup is answered (before: TimeoutError, ADDRESS_LOOKUP_TIMEOUT_S each)
        assert await asyncio.wait_for(addresses.get(6), 1.5) == "127.0.0.1:4321"
        await zk.set(layout.broker_path(6), layout.BrokerRegistration(6, "127.0.0.1", 9).to_json())
        assert await asyncio.wait_for(addresses.get(6), 1.5) == "127.0.0.1:9"
    finally:
        held.set()
    # once registered, the watch keeps the address fresh and reports its changes
    deadline = time.monotonic() + 5
    port = 10
    while not changed:
        assert time.monotonic() < deadline, "no change reported"
        port += 1
        await zk.set(
            layout.broker_path(6), layout.BrokerRegistration(6, "127.0.0.1", port).to_json()
        )
        await asyncio.sleep(0.05)
    assert changed == [6]
    while await addresses.get(6) != f"127.0.0.1:{port}":
        assert time.monotonic() < deadline, "address not refreshed"
        await asyncio.sleep(0.02)
