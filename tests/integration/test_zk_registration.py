"""Registration against a real ZooKeeper whose connection stalls (issue 12 §2): it retries
through connection loss until it is done; deregistration and session close stay bounded while
ZooKeeper does not answer; a process waiting to register stops at once on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from services.common.zk import layout
from services.common.zk.client import STOP_TIMEOUT_S, AsyncZk
from services.common.zk.registration import DEREGISTER_TIMEOUT_S, EphemeralRegistrar
from services.common.zk.server import ZooKeeperProcess
from tests.zk_stall import ZkStallProxy

sys.path.insert(0, str(Path(__file__).resolve().parent))  # whatever the import mode
from test_storage_node import BROKER_ID, NodeProcess  # noqa: E402  # isort: skip

pytestmark = pytest.mark.integration

PATH = "/kafka-py/gateways/7"
# Kafka's default, so a shutdown that waited for kazoo's own timeouts would take this long.
LONG_SESSION_MS = 18000


@pytest.fixture
def proxy(zk_server: ZooKeeperProcess) -> Iterator[ZkStallProxy]:
    p = ZkStallProxy(zk_server.connect).start()
    yield p
    p.stop()


def _via(proxy: ZkStallProxy, zk_connect: str) -> str:
    return f"{proxy.address}/{zk_connect.partition('/')[2]}"


@pytest.fixture
async def direct(zk_connect: str) -> AsyncIterator[AsyncZk]:
    zk = AsyncZk(zk_connect, 4000)
    await zk.start()
    await zk.ensure_layout()
    yield zk
    await zk.stop()


async def _hold_then_die(zk_server: ZooKeeperProcess, zk_connect: str) -> AsyncZk:
    """An older process's registration: created, then its connection is cut without closing
    the session (as by kill -9), so ZooKeeper expires it after its timeout."""
    link = ZkStallProxy(zk_server.connect).start()
    holder = AsyncZk(_via(link, zk_connect), 2000)
    await holder.start()
    await holder.create(PATH, b"old", ephemeral=True)
    link.stop()  # the connection is gone; the session ends by expiry only
    return holder


async def test_register_retries_through_a_zookeeper_stall_while_waiting_for_the_old_node(
    zk_server: ZooKeeperProcess, zk_connect: str, proxy: ZkStallProxy, direct: AsyncZk
) -> None:
    holder = await _hold_then_die(zk_server, zk_connect)
    old_session = holder.session_id
    zk = AsyncZk(_via(proxy, zk_connect), 2000)
    await zk.start()
    registrar = EphemeralRegistrar(zk, PATH, lambda: b"new", 2000, "gateway node.id 7")
    try:
        registering = asyncio.ensure_future(registrar.register())
        await asyncio.sleep(0.3)
        assert not registering.done()  # waiting for the old node to expire
        proxy.stall()  # ZooKeeper stops answering while it waits: requests die with it
        await asyncio.sleep(4.0)  # past this session's timeout
        assert not registering.done(), registering
        proxy.resume()
        await asyncio.wait_for(registering, 20)  # raised ConnectionLoss before issue 12
        data, stat = await direct.get(PATH)
        assert data == b"new" and registrar.registered
        assert stat.ephemeralOwner == zk.session_id != old_session
    finally:
        await registrar.deregister()
        await zk.stop()
        await holder.stop(0.5)


async def test_deregister_and_close_are_bounded_while_zookeeper_does_not_answer(
    zk_connect: str, proxy: ZkStallProxy, direct: AsyncZk
) -> None:
    zk = AsyncZk(_via(proxy, zk_connect), LONG_SESSION_MS)
    await zk.start()
    registrar = EphemeralRegistrar(zk, PATH, lambda: b"x", LONG_SESSION_MS, "gateway node.id 7")
    await registrar.register()
    proxy.stall()
    await asyncio.sleep(0.5)  # the connection still looks up: requests would wait for it
    started = time.monotonic()
    await registrar.deregister()
    closed = await zk.stop()
    took = time.monotonic() - started
    proxy.resume()
    assert not closed  # left to expire
    # bounded by our own limits, not by kazoo's session timeout of 18 s
    assert took < DEREGISTER_TIMEOUT_S + STOP_TIMEOUT_S + 2.0, took
    assert await direct.exists(PATH) is not None  # the session still holds it until it expires


async def test_sigterm_stops_a_storage_node_that_waits_to_register(
    zk_connect: str, direct: AsyncZk, tmp_path: Path
) -> None:
    """Its broker id is held by another live session: SIGTERM ends the wait (exit 0) instead of
    the node waiting the whole session timeout before giving up."""
    await direct.create(layout.broker_path(BROKER_ID), b"{}", ephemeral=True, makepath=True)
    node = NodeProcess(
        zk_connect,
        tmp_path / "log",
        tmp_path / "out.txt",
        "--zookeeper.session.timeout.ms",
        "18000",
    )
    try:
        deadline = time.monotonic() + 60
        while "waiting for it to expire" not in node.output():
            assert node.proc.poll() is None and time.monotonic() < deadline, node.output()
            await asyncio.sleep(0.1)
        stopped = time.monotonic()
        node.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(node.wait, 30)
        took = time.monotonic() - stopped
        assert code == 0, node.output()
        assert took < 10.0, f"{took:.1f}s"  # the wait alone lasts 20 s
        assert "storage node stopped" in node.output()
    finally:
        node.stop()
