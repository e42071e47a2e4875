"""Controllers through a ZooKeeper stall whose sessions survive (issue 12 §1), in process: two
controller apps reach ZooKeeper through a proxy that can stall while keeping every session alive
(tests/zk_stall.py); storage nodes are fakes that record the controller's orders."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.common.zk.server import ZooKeeperProcess
from services.controller.app import ControllerApp
from services.controller.metrics import ControllerMetrics
from services.controller.settings import ControllerSettings
from tests.zk_stall import MULTI, ZkStallProxy

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness, whatever the import mode
from test_controller_harness import FakeStorage, wait_for  # noqa: E402  # isort: skip

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 3000


@pytest.fixture
def proxy(zk_server: ZooKeeperProcess) -> Iterator[ZkStallProxy]:
    p = ZkStallProxy(zk_server.connect).start()
    yield p
    p.stop()


@pytest.fixture
async def controllers(zk_connect: str, proxy: ZkStallProxy) -> AsyncIterator[list[ControllerApp]]:
    """Controllers 1 and 2 behind the proxy; 1 is active when the test starts."""
    chroot = zk_connect.partition("/")[2]
    apps: list[ControllerApp] = []
    for cid in (1, 2):
        settings = ControllerSettings.load(
            [],
            env={},
            controller_id=cid,
            zookeeper_connect=f"{proxy.address}/{chroot}",
            zookeeper_session_timeout_ms=SESSION_TIMEOUT_MS,
        )
        app = ControllerApp(settings, ControllerMetrics(CollectorRegistry()))
        await app.start()
        apps.append(app)
        if cid == 1:
            await wait_for(lambda: acting(apps), 10, what="controller 1 active")
    await wait_for(lambda: apps[1].registered, 10, what="the standby registered")
    yield apps
    for app in apps:
        await app.stop()


def acting(apps: list[ControllerApp]) -> ControllerApp | None:
    active = [a for a in apps if a.active is not None and a.active.running]
    return active[0] if len(active) == 1 else None


async def test_controller_resigned_in_a_stall_whose_session_survives_elects_again(
    controllers: list[ControllerApp], proxy: ZkStallProxy, zk: AsyncZk, zk_connect: str
) -> None:
    first = controllers[0]
    assert first.active is not None
    old_epoch = first.active.epoch
    sessions = [app.zk.session_id for app in controllers]
    node = await FakeStorage(1, zk_connect).start()  # straight to ZooKeeper
    try:
        await wait_for(lambda: node.max_controller_epoch == old_epoch, 10, what="first orders")
        proxy.stall()
        # past the session timeout the active controller stops acting...
        await wait_for(lambda: first.active is None, 15, what="resignation during the stall")
        # ...and /controller, held by a session the server keeps, stays
        assert await zk.exists(layout.CONTROLLER) is not None
        proxy.resume()
        resumed = time.monotonic()
        app = await wait_for(lambda: acting(controllers), 5, what="a controller acting again")
        took = time.monotonic() - resumed
        await wait_for(lambda: all(a.zk.connected for a in controllers), 10, what="reconnects")
        assert [a.zk.session_id for a in controllers] == sessions, "a session expired"
        assert app.active is not None and app.active.epoch == old_epoch + 1
        holder = await zk.get(layout.CONTROLLER)
        assert layout.loads(holder[0])["brokerid"] == app.id
        assert int((await zk.get(layout.CONTROLLER_EPOCH))[0]) == old_epoch + 1
        # the new term orders the storage node with its epoch
        await wait_for(lambda: node.max_controller_epoch == old_epoch + 1, 5, what="new orders")
        print(f"controller {app.id} acting {took:.2f}s after the stall ended")
    finally:
        await node.stop()


async def test_broker_that_bounced_while_the_controller_was_disconnected_gets_its_state(
    controllers: list[ControllerApp], proxy: ZkStallProxy, zk_connect: str
) -> None:
    """kazoo does not report a children list equal to the one before a disconnect: the storage
    node that re-registered meanwhile (same id, new session) must still get the full state."""
    first = controllers[0]
    assert first.active is not None
    term = first.active
    node = await FakeStorage(1, zk_connect).start()
    try:
        await wait_for(lambda: node.updates, 10, what="first orders")
        proxy.stall()
        await wait_for(lambda: not first.zk.connected, 10, what="the controller disconnected")
        await node.deregister()  # the node bounces while the controller cannot see it
        node.updates.clear()
        await node.register()
        assert first.active is term, "the stall was meant to be shorter than the timeout"
        proxy.resume()
        await wait_for(lambda: first.zk.connected, 10, what="reconnected")
        await wait_for(lambda: node.updates, 10, what="the full state sent to the bounced node")
        assert first.active is term  # the same term noticed it
    finally:
        await node.stop()


async def test_an_election_whose_reply_is_lost_ends_with_an_acting_controller(
    controllers: list[ControllerApp], proxy: ZkStallProxy, zk: AsyncZk
) -> None:
    """The election multi runs in ZooKeeper but its reply is lost (ConnectionLoss): /controller
    is then held by a session whose controller does not know it won. Once the same session is
    back it deletes its own node and elects again (found by the shared checker's chaos runs)."""
    proxy.stall_after(MULTI)
    await zk.delete(layout.CONTROLLER)  # the standby's election is the next multi
    await wait_for(lambda: proxy.stalled_at is not None, 10, what="the election's multi")
    holder = await zk.get(layout.CONTROLLER)
    assert layout.loads(holder[0])["brokerid"] == 2, "the standby's multi ran"
    await wait_for(lambda: not controllers[1].zk.connected, 10, what="connection loss")
    proxy.resume()
    # controller 1 still thinks it leads until it sees the stall's changes: wait for an acting
    # controller that also holds /controller with its own session
    deadline = time.monotonic() + 20
    while True:
        app = acting(controllers)
        data, stat = (
            await zk.get(layout.CONTROLLER)
            if await zk.exists(layout.CONTROLLER)
            else (
                None,
                None,
            )
        )
        if (
            app is not None
            and data is not None
            and layout.loads(data)["brokerid"] == app.id
            and stat.ephemeralOwner == app.zk.session_id
        ):
            break
        assert time.monotonic() < deadline, f"no acting holder of /controller ({data!r})"
        await asyncio.sleep(0.2)
