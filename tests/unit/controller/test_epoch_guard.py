"""Election and epoch-guarded writes against a real ZooKeeper."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kazoo.exceptions import NodeExistsError

from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.controller.elector import Elector
from services.controller.zkstore import (
    ControllerMovedError,
    Create,
    EpochGuard,
    SetData,
    ZkOpError,
    multi,
    subtree,
)


@pytest.fixture
async def zk(zk_connect: str) -> AsyncIterator[AsyncZk]:
    client = AsyncZk(zk_connect, 4000)
    await client.start()
    await client.ensure_layout()
    yield client
    await client.stop()


async def test_election_bumps_epoch_atomically(zk_connect: str, zk: AsyncZk) -> None:
    other = AsyncZk(zk_connect, 4000)
    await other.start()
    try:
        first, second = Elector(zk, 1), Elector(other, 2)
        assert await first.try_elect() == (1, 1)  # /controller_epoch created as 0, then set to 1
        assert await second.try_elect() is None  # /controller exists
        data, stat = await zk.get(layout.CONTROLLER_EPOCH)
        assert data == b"1" and stat.version == 1
        body = layout.loads((await zk.get(layout.CONTROLLER))[0])
        assert body["version"] == 1 and body["brokerid"] == 1 and body["timestamp"].isdigit()
        assert await second.delete_if_ours() is False  # not its node
        assert await first.holder() == (1, zk.session_id)
        assert await first.delete_if_ours() is True
        assert await second.try_elect() == (2, 2)
        assert (await zk.get(layout.CONTROLLER_EPOCH))[0] == b"2"
    finally:
        await other.stop()


async def test_deposed_controller_writes_fail(zk: AsyncZk) -> None:
    epoch, version = await Elector(zk, 1).try_elect()  # type: ignore[misc]
    guard = EpochGuard(zk, epoch, version)
    await guard.commit([Create("/brokers/topics/a", b"x")])
    # another controller wins the next election: the epoch znode version moves on
    await zk.delete(layout.CONTROLLER)
    assert await Elector(zk, 2).try_elect() == (2, 2)
    with pytest.raises(ControllerMovedError):
        await guard.commit([SetData("/brokers/topics/a", b"stale"), Create("/brokers/topics/b")])
    assert (await zk.get("/brokers/topics/a"))[0] == b"x"
    assert await zk.exists("/brokers/topics/b") is None


async def test_failing_op_rolls_back_the_multi_and_is_named(zk: AsyncZk) -> None:
    await zk.create("/brokers/topics/c", b"1")
    with pytest.raises(ZkOpError) as info:
        await multi(zk, [Create("/brokers/topics/d"), Create("/brokers/topics/c")])
    assert info.value.op.path == "/brokers/topics/c"
    assert isinstance(info.value.cause, NodeExistsError)
    assert await zk.exists("/brokers/topics/d") is None


async def test_sequential_create_and_subtree(zk: AsyncZk) -> None:
    results = await multi(zk, [Create(layout.config_change_prefix(), b"{}", sequence=True)])
    assert results[0] == "/config/changes/config_change_0000000000"
    await zk.create("/brokers/topics/e/partitions/0/state", b"{}", makepath=True)
    assert await subtree(zk, "/brokers/topics/e") == [
        "/brokers/topics/e/partitions/0/state",
        "/brokers/topics/e/partitions/0",
        "/brokers/topics/e/partitions",
        "/brokers/topics/e",
    ]
