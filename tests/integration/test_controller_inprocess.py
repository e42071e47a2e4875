"""The controller app run inside the test process (real ZooKeeper, real gRPC, fake storage):
behaviours that need ZooKeeper surgery — ISR changes written by leaders, session expiry,
unclean election, disabled deletion."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry, Gauge

from services.common.errors import ErrorCode
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.common.rpc.kafkapy.v1 import storage_pb2
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.controller.app import ControllerApp
from services.controller.links import BrokerLinks, Outcome
from services.controller.metrics import ControllerMetrics
from services.controller.settings import ControllerSettings

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness, whatever the import mode
from test_controller_harness import FakeStorage, controller_stub, wait_for  # noqa: E402  # isort: skip

pytestmark = pytest.mark.integration

AppFactory = Callable[..., Any]


@pytest.fixture
async def zk(zk_connect: str) -> AsyncIterator[AsyncZk]:
    client = AsyncZk(zk_connect, 4000)
    await client.start()
    await client.ensure_layout()
    yield client
    await client.stop()


@pytest.fixture
async def make_app(zk_connect: str) -> AsyncIterator[AppFactory]:
    apps: list[ControllerApp] = []

    async def factory(**overrides: Any) -> ControllerApp:
        settings = ControllerSettings.load(
            [],
            env={},
            controller_id=overrides.pop("controller_id", 1),
            zookeeper_connect=zk_connect,
            zookeeper_session_timeout_ms=2000,
            **overrides,
        )
        app = ControllerApp(settings, ControllerMetrics(CollectorRegistry()))
        await app.start()
        apps.append(app)
        await wait_for(
            lambda: app.active is not None and app.active.running,
            10,
            what="the controller to become active",
        )
        return app

    yield factory
    for app in apps:
        await app.stop()


@pytest.fixture
async def nodes(zk_connect: str) -> AsyncIterator[list[FakeStorage]]:
    started: list[FakeStorage] = []
    yield started
    for n in started:
        await n.stop()


async def start_node(zk_connect: str, nodes: list[FakeStorage], broker_id: int) -> FakeStorage:
    node = await FakeStorage(broker_id, zk_connect).start()
    nodes.append(node)
    await wait_for(lambda: node.max_controller_epoch > 0, what=f"broker {broker_id} to be seen")
    return node


async def create(zk: AsyncZk, spec: pb.TopicSpec) -> pb.TopicResult:
    stub, channel = await controller_stub(zk)
    try:
        resp = await stub.CreateTopics(pb.CreateTopicsRequest(topics=[spec], timeout_ms=5000))
    finally:
        await channel.close()
    return resp.topics[0]


def assigned(name: str, *replicas: list[int]) -> pb.TopicSpec:
    return pb.TopicSpec(
        name=name,
        num_partitions=-1,
        replication_factor=-1,
        assignments=[
            pb.ReplicaAssignment(partition=p, broker_ids=r) for p, r in enumerate(replicas)
        ],
    )


async def state(zk: AsyncZk, topic: str, p: int) -> dict[str, Any]:
    return layout.loads((await zk.get(layout.partition_state_path(topic, p)))[0])  # type: ignore[no-any-return]


async def test_isr_changed_by_the_leader_is_picked_up(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    app = await make_app()
    for i in (1, 2, 3):
        await start_node(zk_connect, nodes, i)
    assert (await create(zk, assigned("isr", [1, 2, 3]))).error_code == 0
    path = layout.partition_state_path("isr", 0)
    # the leader shrinks the ISR itself (conditional on the version it knows), and notifies
    await zk.set(path, layout.PartitionStateZk(1, 0, [1, 3], app.active.epoch).to_json(), 0)  # type: ignore[union-attr]
    await zk.create(
        f"{layout.ISR_CHANGE_NOTIFICATION}/isr_change_",
        layout.dumps({"version": 1, "partitions": [{"topic": "isr", "partition": 0}]}),
        sequence=True,
    )
    await wait_for(
        lambda: _no_children(zk, layout.ISR_CHANGE_NOTIFICATION),
        what="the notification to be consumed",
    )
    assert app.active.ctx.topics["isr"].states[0].isr == [1, 3]  # type: ignore[union-attr]

    # a leader write without notification: the controller's next write hits BadVersion,
    # re-reads and still applies the election on top of the newer state
    await zk.set(path, layout.PartitionStateZk(1, 0, [1], app.active.epoch).to_json(), 1)  # type: ignore[union-attr]
    await nodes[0].deregister()
    await wait_for(lambda: _leader(zk, "isr", 0, -1), what="isr-0 offline (no live ISR member)")
    assert await state(zk, "isr", 0) == {
        "controller_epoch": app.active.epoch,
        "leader": -1,  # type: ignore[union-attr]
        "version": 1,
        "leader_epoch": 1,
        "isr": [1],
    }


async def test_unclean_election_per_topic(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    await make_app()
    b1 = await start_node(zk_connect, nodes, 1)
    await start_node(zk_connect, nodes, 2)
    for name, unclean in (("clean", "false"), ("dirty", "true")):
        spec = assigned(name, [1, 2])
        spec.configs["unclean.leader.election.enable"] = unclean
        assert (await create(zk, spec)).error_code == 0
        path = layout.partition_state_path(name, 0)
        await zk.set(path, layout.PartitionStateZk(1, 0, [1], 1).to_json(), 0)  # 2 fell behind
    await b1.deregister()
    await wait_for(lambda: _leader(zk, "dirty", 0, 2), what="unclean election of broker 2")
    await wait_for(lambda: _leader(zk, "clean", 0, -1), what="clean topic offline")
    assert (await state(zk, "dirty", 0))["isr"] == [2]
    assert (await state(zk, "clean", 0))["isr"] == [1]


async def test_deletion_disabled(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    await make_app(delete_topic_enable=False)
    await start_node(zk_connect, nodes, 1)
    assert (await create(zk, assigned("kept", [1]))).error_code == 0
    stub, channel = await controller_stub(zk)
    try:
        resp = await stub.DeleteTopics(pb.DeleteTopicsRequest(names=["kept"], timeout_ms=1000))
    finally:
        await channel.close()
    assert resp.topics[0].error_code == ErrorCode.TOPIC_DELETION_DISABLED
    # a marker written by hand is removed, as Kafka does when deletion is disabled
    await zk.create(layout.delete_topic_path("kept"))
    await wait_for(lambda: _no_children(zk, layout.DELETE_TOPICS), what="the marker removed")
    assert await zk.exists(layout.topic_path("kept")) is not None


async def test_session_expiry_resigns_then_reelects(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    app = await make_app()
    node = await start_node(zk_connect, nodes, 1)
    first = app.active
    assert first is not None and first.epoch == 1
    # expire the controller's session the classic way: a second client with the same session
    session_id, password = app.zk.client.client_id
    hosts, _, chroot = zk_connect.partition("/")
    clone = KazooClient(hosts=hosts + "/" + chroot, client_id=(session_id, password), timeout=2)
    clone.start(5)
    clone.stop()
    clone.close()
    await wait_for(lambda: app.active is not first, 10, what="resignation on session loss")
    await wait_for(
        lambda: app.active is not None and app.active.running and app.registered,
        10,
        what="re-registration and re-election",
    )
    assert app.active.epoch == 2  # type: ignore[union-attr]
    assert await zk.exists(layout.controller_endpoint_path(1)) is not None
    await wait_for(lambda: node.max_controller_epoch == 2, what="the node to get the new epoch")


async def _no_children(zk: AsyncZk, path: str) -> bool:
    return not await zk.get_children(path)


async def _leader(zk: AsyncZk, topic: str, p: int, leader: int) -> bool:
    got = await zk.get_or_none(layout.partition_state_path(topic, p))
    return got is not None and layout.loads(got[0])["leader"] == leader


async def _isr_changed(zk: AsyncZk, topic: str, p: int, isr: list[int]) -> None:
    """What a leader does when a follower caught up: widen the ISR, then notify."""
    path = layout.partition_state_path(topic, p)
    data, stat = await zk.get(path)
    st = layout.loads(data)
    new = layout.PartitionStateZk(st["leader"], st["leader_epoch"], isr, st["controller_epoch"])
    await zk.set(path, new.to_json(), stat.version)
    await zk.create(
        f"{layout.ISR_CHANGE_NOTIFICATION}/isr_change_",
        layout.dumps({"version": 1, "partitions": [{"topic": topic, "partition": p}]}),
        sequence=True,
    )


async def test_leadership_goes_back_to_the_preferred_replica_once_it_is_in_sync(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    app = await make_app(leader_imbalance_check_interval_seconds=1)
    for i in (1, 2, 3):
        await start_node(zk_connect, nodes, i)
    assert (await create(zk, assigned("bal", [1, 2, 3], [2, 3, 1], [3, 1, 2]))).error_code == 0
    await nodes[0].deregister()
    await wait_for(lambda: _leader(zk, "bal", 0, 2), what="failover of bal-0 to broker 2")
    await nodes[0].register()
    await wait_for(lambda: nodes[0].latest("bal", 0) is not None, what="broker 1 told again")
    # back, but not in sync yet: broker 1 must not lead (two checks pass meanwhile)
    await asyncio.sleep(2.5)
    assert (await state(zk, "bal", 0))["leader"] == 2
    assert _gauge(app.metrics.preferred_imbalance) == 1

    balanced = [await state(zk, "bal", p) for p in (1, 2)]
    await _isr_changed(zk, "bal", 0, [2, 3, 1])
    await wait_for(lambda: _leader(zk, "bal", 0, 1), what="preferred replica 1 leading bal-0")
    st = await state(zk, "bal", 0)
    assert (st["leader_epoch"], st["isr"]) == (2, [2, 3, 1])  # failover, then this election
    # the order follows the state's write: wait for it rather than race it
    await wait_for(
        lambda: (o := nodes[0].latest("bal", 0)) is not None and o.leader_epoch >= 2,
        what="broker 1 told of the election",
    )
    order = nodes[0].latest("bal", 0)
    assert order is not None and (order.leader, order.leader_epoch) == (1, 2)
    assert [await state(zk, "bal", p) for p in (1, 2)] == balanced  # left alone
    assert [balanced[0]["leader"], balanced[1]["leader"]] == [2, 3]
    await wait_for(
        lambda: _gauge(app.metrics.preferred_imbalance) == 0, what="the imbalance gauge at 0"
    )


async def test_no_rebalance_when_auto_leader_rebalance_is_off(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    await make_app(leader_imbalance_check_interval_seconds=1, auto_leader_rebalance_enable=False)
    for i in (1, 2):
        await start_node(zk_connect, nodes, i)
    assert (await create(zk, assigned("stay", [1, 2]))).error_code == 0
    await nodes[0].deregister()
    await wait_for(lambda: _leader(zk, "stay", 0, 2), what="failover of stay-0 to broker 2")
    await nodes[0].register()
    await _isr_changed(zk, "stay", 0, [2, 1])
    await asyncio.sleep(2.5)
    assert (await state(zk, "stay", 0))["leader"] == 2


def _gauge(gauge: Gauge) -> float:
    return gauge.collect()[0].samples[0].value


async def elect(zk: AsyncZk, election_type: int, *parts: tuple[str, int]) -> dict[Any, int]:
    stub, channel = await controller_stub(zk)
    try:
        resp = await stub.ElectLeaders(
            pb.ElectLeadersRequest(
                election_type=election_type,
                all_partitions=not parts,
                partitions=[pb.PartitionRef(topic=t, partition=p) for t, p in parts],
                timeout_ms=5000,
            )
        )
    finally:
        await channel.close()
    assert resp.error_code == 0, resp
    return {(r.topic, r.partition): r.error_code for r in resp.partitions}


async def test_elect_leaders_preferred_and_unclean_on_request(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    await make_app(auto_leader_rebalance_enable=False)
    for i in (1, 2, 3):
        await start_node(zk_connect, nodes, i)
    assert (await create(zk, assigned("el", [1, 2, 3], [2, 3, 1]))).error_code == 0
    assert (await create(zk, assigned("gone", [3, 1]))).error_code == 0
    await nodes[0].deregister()
    await wait_for(lambda: _leader(zk, "el", 0, 2), what="failover of el-0 to broker 2")
    await nodes[0].register()
    await wait_for(lambda: nodes[0].latest("el", 0) is not None, what="broker 1 told again")

    # broker 1 is back but not in the ISR: it may not lead yet
    assert await elect(zk, 0, ("el", 0), ("el", 1), ("el", 9), ("nope", 0)) == {
        ("el", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ("el", 1): ErrorCode.ELECTION_NOT_NEEDED,
        ("el", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    await _isr_changed(zk, "el", 0, [2, 3, 1])
    await wait_for(lambda: _no_children(zk, layout.ISR_CHANGE_NOTIFICATION), what="notice read")
    # all partitions: only what was elected (or failed) is answered
    assert await elect(zk, 0) == {("el", 0): ErrorCode.NONE}
    st = await state(zk, "el", 0)
    assert (st["leader"], st["isr"]) == (1, [2, 3, 1])
    order = nodes[0].latest("el", 0)
    assert order is not None and order.leader == 1
    assert await elect(zk, 0, ("el", 0)) == {("el", 0): ErrorCode.ELECTION_NOT_NEEDED}

    # unclean: gone-0's ISR is just broker 3, which dies; broker 1 may lead only on request
    path = layout.partition_state_path("gone", 0)
    data, stat = await zk.get(path)
    cur = layout.loads(data)
    shrunk = layout.PartitionStateZk(3, cur["leader_epoch"], [3], cur["controller_epoch"])
    await zk.set(path, shrunk.to_json(), stat.version)
    await zk.create(
        f"{layout.ISR_CHANGE_NOTIFICATION}/isr_change_",
        layout.dumps({"version": 1, "partitions": [{"topic": "gone", "partition": 0}]}),
        sequence=True,
    )
    await wait_for(lambda: _no_children(zk, layout.ISR_CHANGE_NOTIFICATION), what="notice read")
    await nodes[2].deregister()
    await wait_for(lambda: _leader(zk, "gone", 0, -1), what="gone-0 offline")
    assert await elect(zk, 0, ("gone", 0)) == {
        ("gone", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    }
    assert await elect(zk, 1, ("el", 1), ("gone", 0)) == {
        ("el", 1): ErrorCode.ELECTION_NOT_NEEDED,
        ("gone", 0): ErrorCode.NONE,
    }
    st = await state(zk, "gone", 0)
    assert (st["leader"], st["isr"]) == (1, [1])


async def test_an_assignment_naming_a_broker_registered_a_moment_ago_is_accepted(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    """A storage node registers, and a CreateTopics / CreatePartitions naming it arrives before
    the controller's broker watch event ran (held back here; CI met the race): the controller
    reads the registrations then, as ZooKeeper-mode Kafka validates against /brokers/ids, and
    does not refuse the broker as unknown."""
    app = await make_app()
    assert app.active is not None
    controller = app.active
    await start_node(zk_connect, nodes, 1)
    real_notify = controller.notify

    def hold_back_brokers(kind: str, arg: str | None = None) -> None:
        if kind != "brokers":
            real_notify(kind, arg)

    controller.notify = hold_back_brokers  # type: ignore[method-assign]
    nodes.append(await FakeStorage(2, zk_connect).start())
    nodes.append(await FakeStorage(3, zk_connect).start())
    assert set(controller.ctx.brokers) == {1}  # the watch's event has not run
    result = await create(zk, assigned("fresh", [2, 3], [3, 1]))
    assert result.error_code == 0, result.error_message
    assert set(controller.ctx.brokers) == {1, 2, 3}
    assert (await state(zk, "fresh", 0))["leader"] == 2

    nodes.append(await FakeStorage(4, zk_connect).start())
    stub, channel = await controller_stub(zk)
    try:
        resp = await stub.CreatePartitions(
            pb.CreatePartitionsRequest(
                topics=[
                    pb.PartitionCountSpec(
                        name="fresh", count=3, assignments=[pb.ReplicaAssignment(broker_ids=[4, 1])]
                    )
                ],
                timeout_ms=5000,
            )
        )
    finally:
        await channel.close()
    assert resp.topics[0].error_code == 0, resp.topics[0].error_message
    assert 4 in controller.ctx.brokers


async def test_a_new_controller_serves_creates_before_its_states_load_but_acts_on_none_of_them(
    zk_connect: str,
    zk: AsyncZk,
    make_app: AppFactory,
    nodes: list[FakeStorage],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Failover with ZooKeeper answering the new controller's read of the partition states late
    (held here): CreateTopics is served meanwhile, but a broker dying meanwhile changes none of
    the partitions not loaded yet, and no order about them goes out, until the load is in; the
    election then starts from the states ZooKeeper holds (leader epoch + 1, the ISR it had)."""
    first = await make_app(controller_id=1)
    await start_node(zk_connect, nodes, 1)
    b2 = await start_node(zk_connect, nodes, 2)
    assert (await create(zk, assigned("old", [1, 2], [2, 1]))).error_code == 0
    led_by_2 = layout.partition_state_path("old", 1)
    _data, stat = await zk.get(led_by_2)
    await zk.set(led_by_2, layout.PartitionStateZk(2, 7, [2, 1], 1).to_json(), stat.version)

    held, release = _hold_state_load(monkeypatch, led_by_2)
    await first.stop()
    second = await make_app(controller_id=2)
    controller = second.active
    assert controller is not None and controller.epoch == 2
    await asyncio.wait_for(held.wait(), 10)

    fresh = await asyncio.wait_for(create(zk, assigned("fresh", [1])), 10)
    assert fresh.error_code == 0, fresh.error_message
    assert (await state(zk, "fresh", 0))["leader"] == 1
    await b2.deregister()
    await asyncio.sleep(1.0)  # the broker change is queued behind the load
    assert not controller.failover_done
    assert await state(zk, "old", 1) == {
        "controller_epoch": 1,
        "leader": 2,
        "version": 1,
        "leader_epoch": 7,
        "isr": [2, 1],
    }
    assert not [s for e, s in nodes[0].states("old") if e == 2], "ordered before the load"

    release.set()
    await wait_for(lambda: _leader(zk, "old", 1, 1), 10, what="old-1 elected from its state")
    assert await state(zk, "old", 1) == {
        "controller_epoch": 2,
        "leader": 1,
        "version": 1,
        "leader_epoch": 8,
        "isr": [1],
    }
    assert controller.failover_done


async def test_a_full_state_goes_after_the_orders_queued_behind_it_and_is_built_when_sent(
    zk_connect: str, nodes: list[FakeStorage]
) -> None:
    """A new controller's full state (thousands of partitions) does not hold back the order of
    a topic created after it was issued, and it carries the state as it is when it goes; one
    that fails to build does not stop the link."""
    node = await FakeStorage(1, zk_connect).start()
    nodes.append(node)
    links = BrokerLinks(controller_id=9, controller_epoch=3, rpc_timeout_s=5.0)
    link = links.add(1, f"127.0.0.1:{node.port}")
    leader_epoch = [1]

    def order(topic: str, epoch: int) -> storage_pb2.PartitionState:
        return storage_pb2.PartitionState(
            topic=topic, partition=0, leader=1, leader_epoch=epoch, isr=[1], replicas=[1]
        )

    try:
        full = link.update_partitions_when_idle(lambda: [order("old", leader_epoch[0])])
        created = link.update_partitions([order("new", 0)])
        leader_epoch[0] = 2  # an election after the full state was issued
        assert (await created).ok and (await full).ok
        assert [[p.topic for p in u.partitions] for u in node.updates] == [["new"], ["old"]]
        assert node.updates[1].partitions[0].leader_epoch == 2

        def broken() -> list[storage_pb2.PartitionState]:
            raise KeyError("old")

        # a full state that cannot be built is dropped; the link goes on with the next order
        assert (await link.update_partitions_when_idle(broken)).outcome is Outcome.DROPPED
        assert (await link.update_partitions([order("new", 1)])).ok
        assert len(node.updates) == 3
    finally:
        await links.close_all()


async def test_a_failover_with_isr_changes_pending_serves_creates_first_then_applies_them_all(
    zk_connect: str,
    zk: AsyncZk,
    make_app: AppFactory,
    nodes: list[FakeStorage],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Leaders change ISRs (and leave their notices) while a new controller still loads the
    partition states (held here), as after storage restarts: the ISR-change event waits for
    the load, but a CreateTopics queued after it is served first; once the load is in, every
    notice is consumed and each changed ISR is in the context and in the orders that follow."""
    first = await make_app(controller_id=1)
    for i in (1, 2, 3):
        await start_node(zk_connect, nodes, i)
    assert (await create(zk, assigned("isrs", [1, 2, 3], [2, 3, 1], [3, 1, 2]))).error_code == 0

    held, release = _hold_state_load(monkeypatch, layout.partition_state_path("isrs", 0))
    await first.stop()
    second = await make_app(controller_id=2)
    controller = second.active
    assert controller is not None and controller.epoch == 2
    await asyncio.wait_for(held.wait(), 10)

    # the leaders' changes meanwhile, one notice each: two shrinks, then one back in
    changed = {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    for p, isr in changed.items():
        await _isr_changed(zk, "isrs", p, isr)
    await _isr_changed(zk, "isrs", 0, [1, 2, 3])
    changed[0] = [1, 2, 3]
    await wait_for(
        lambda: "isr_change" in controller._pending_keys, what="the ISR-change event queued"
    )

    fresh = await asyncio.wait_for(create(zk, assigned("fresh", [1])), 10)
    assert fresh.error_code == 0, fresh.error_message
    assert not controller.failover_done
    assert len(await zk.get_children(layout.ISR_CHANGE_NOTIFICATION)) == 4, "consumed early"
    assert not controller.ctx.topics["isrs"].states, "acted on states not loaded yet"
    assert not [s for e, s in nodes[0].states("isrs") if e == 2], "ordered before the load"

    release.set()
    await wait_for(
        lambda: _no_children(zk, layout.ISR_CHANGE_NOTIFICATION),
        10,
        what="every notice consumed",
    )
    assert controller.failover_done
    states = controller.ctx.topics["isrs"].states
    assert {p: states[p].isr for p in changed} == changed
    for p, isr in changed.items():
        assert (await state(zk, "isrs", p))["isr"] == isr
        for node in nodes:  # the new controller's orders carry the changed ISRs
            latest = node.latest("isrs", p)
            assert latest is not None and list(latest.isr) == isr, (node.broker_id, p)
    ordered = [p.topic for u in nodes[0].updates if u.controller_epoch == 2 for p in u.partitions]
    assert ordered[0] == "fresh" and "isrs" in ordered, ordered


def _hold_state_load(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the first bulk read naming ``path`` (a new controller's state load): ``held`` is set
    when it is reached, and it goes on once ``release`` is set; later reads pass."""
    held = asyncio.Event()
    release = asyncio.Event()
    real_get_many = AsyncZk.get_many

    async def slow_state_load(self: AsyncZk, paths: Any) -> Any:
        if path in paths and not held.is_set():
            held.set()
            await release.wait()
        return await real_get_many(self, paths)

    monkeypatch.setattr(AsyncZk, "get_many", slow_state_load)
    return held, release
