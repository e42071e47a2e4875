"""Controller failover with real processes: kill -9, SIGTERM, and a paused (SIGSTOP) controller
that comes back deposed and must not act.

Three controller processes are shared by the module; each test first restarts any controller a
previous test took down, and brings its own fake storage nodes.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from services.common.errors import ErrorCode
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.common.zk.server import ZooKeeperProcess

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness, whatever the import mode
from test_controller_harness import (  # noqa: E402  # isort: skip
    STARTUP_S,
    ControllerProc,
    FakeStorage,
    active_controller,
    controller_stub,
    stop_all,
    wait_for,
)

pytestmark = pytest.mark.integration


class Cluster:
    def __init__(self, zk: AsyncZk, procs: dict[int, ControllerProc], nodes: list[FakeStorage]):
        self.zk = zk
        self.procs = procs
        self.nodes = nodes

    async def active(self) -> tuple[int, int]:
        got = await active_controller(self.zk)
        assert got is not None
        return got

    async def create(self, name: str, partitions: int = 2, rf: int = 2) -> pb.TopicResult:
        stub, channel = await controller_stub(self.zk)
        try:
            resp = await stub.CreateTopics(
                pb.CreateTopicsRequest(
                    topics=[
                        pb.TopicSpec(name=name, num_partitions=partitions, replication_factor=rf)
                    ],
                    timeout_ms=5000,
                )
            )
        finally:
            await channel.close()
        return resp.topics[0]


@pytest.fixture(scope="module")
def controllers(
    zk_server: ZooKeeperProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[int, ControllerProc]]]:
    connect = f"{zk_server.connect}/controller-failover-{uuid.uuid4().hex[:8]}"
    log_dir: Path = tmp_path_factory.mktemp("failover")
    procs = {i: ControllerProc(i, connect, log_dir) for i in (1, 2, 3)}
    for p in procs.values():
        p.start()
    yield connect, procs
    stop_all(list(procs.values()))


_broker_ids = iter(range(100, 10_000, 10))


@pytest.fixture
async def cluster(controllers: tuple[str, dict[int, ControllerProc]]) -> AsyncIterator[Cluster]:
    connect, procs = controllers
    for p in procs.values():
        if not p.running:
            p.start()
    zk = AsyncZk(connect, 4000)
    await zk.start()
    base = next(_broker_ids)
    nodes = list(await asyncio.gather(*(FakeStorage(base + i, connect).start() for i in (1, 2))))
    try:
        await wait_for(lambda: active_controller(zk), STARTUP_S, what="an active controller")
        for i in procs:
            await wait_for(
                lambda i=i: zk.exists(layout.controller_endpoint_path(i)),
                15,
                what=f"controller {i} to register",
            )
        await wait_for(
            lambda: all(n.max_controller_epoch > 0 for n in nodes), what="storage nodes to be seen"
        )
        yield Cluster(zk, procs, nodes)
    finally:
        await asyncio.gather(*(n.stop() for n in nodes))
        await zk.stop()


async def test_kill9_of_active_controller_standby_takes_over(cluster: Cluster) -> None:
    zk = cluster.zk
    assert (await cluster.create("before")).error_code == 0
    old_id, old_epoch = await cluster.active()
    before = [await zk.get(f"/brokers/topics/before/partitions/{p}/state") for p in (0, 1)]

    killed_at = time.monotonic()
    cluster.procs[old_id].kill9()
    await wait_for(lambda: _holder_is_not(zk, old_id), 10, interval=0.01, what="a new controller")
    takeover = time.monotonic() - killed_at
    print(f"controller failover after kill -9: {takeover:.2f}s")
    assert takeover < 5.0
    new_id, new_epoch = await cluster.active()
    assert new_epoch == old_epoch + 1
    # at once: the new controller serves CreateTopics while it may still load partition states
    res = await cluster.create("after")
    assert res.error_code == 0
    state = layout.loads((await zk.get("/brokers/topics/after/partitions/0/state"))[0])
    assert state["controller_epoch"] == new_epoch
    assert int((await zk.get(layout.CONTROLLER_EPOCH))[0]) == new_epoch
    await wait_for(
        lambda: cluster.procs[new_id].logged("elected as active controller"),
        what="the election log line",
    )
    assert cluster.procs[new_id].logged("elected as active controller")[-1]["epoch"] == new_epoch

    # every storage node gets the full state from the new controller, with the new epoch
    for node in cluster.nodes:
        await wait_for(
            lambda node=node: any(
                u.controller_epoch == new_epoch
                and u.controller_id == new_id
                and "before" in {p.topic for p in u.partitions}
                for u in node.updates
            ),
            what=f"broker {node.broker_id} to get the new controller's state",
        )
    # the failover finished from the states it read: the led partitions were left as they were
    # (no election, no state written again)
    for p, (data, stat) in enumerate(before):
        now_data, now_stat = await zk.get(f"/brokers/topics/before/partitions/{p}/state")
        assert (now_data, now_stat.version) == (data, stat.version)


async def test_sigterm_resigns_and_exits_cleanly(cluster: Cluster) -> None:
    zk = cluster.zk
    old_id, old_epoch = await cluster.active()
    stopped_at = time.monotonic()
    assert cluster.procs[old_id].stop() == 0
    await wait_for(lambda: _holder_is_not(zk, old_id), 5, interval=0.01, what="a new controller")
    assert time.monotonic() - stopped_at < 3.0  # no session timeout to wait for
    assert cluster.procs[old_id].logged("resigned as controller")[-1]["reason"] == "shutdown"
    assert (await cluster.active())[1] == old_epoch + 1
    assert await zk.exists(layout.controller_endpoint_path(old_id)) is None


async def test_paused_controller_comes_back_deposed(cluster: Cluster) -> None:
    """SIGSTOP the active controller past its session timeout: a standby takes over; after
    SIGCONT the old one learns its session expired, resigns, and serves as a standby."""
    zk = cluster.zk
    old_id, old_epoch = await cluster.active()
    old = cluster.procs[old_id]
    resigned_before = len(old.logged("resigned as controller"))
    old.signal(signal.SIGSTOP)
    try:
        await wait_for(lambda: _holder_is_not(zk, old_id), 10, what="a standby to take over")
        new_id, new_epoch = await cluster.active()
        assert new_epoch == old_epoch + 1
        assert (await cluster.create("while-paused")).error_code == 0
    finally:
        old.signal(signal.SIGCONT)
    await wait_for(
        lambda: len(old.logged("resigned as controller")) > resigned_before,
        10,
        what="the paused controller to resign",
    )
    await wait_for(
        lambda: zk.exists(layout.controller_endpoint_path(old_id)),
        10,
        what="the deposed controller to register again",
    )
    stub, channel = await controller_stub(zk, old_id)
    try:
        resp = await stub.CreateTopics(
            pb.CreateTopicsRequest(
                topics=[pb.TopicSpec(name="to-the-old-one", num_partitions=1, replication_factor=1)]
            )
        )
    finally:
        await channel.close()
    assert resp.topics[0].error_code == ErrorCode.NOT_CONTROLLER
    assert await zk.exists(layout.topic_path("to-the-old-one")) is None
    for node in cluster.nodes:
        assert node.max_controller_epoch == new_epoch
    assert await cluster.active() == (new_id, new_epoch)


async def _holder_is_not(zk: AsyncZk, controller_id: int) -> bool:
    got = await zk.get_or_none(layout.CONTROLLER)
    return got is not None and layout.loads(got[0])["brokerid"] != controller_id
