"""Two real controller processes, a real ZooKeeper, fake storage nodes: topic lifecycle,
broker death and return, ZooKeeper layout exactly as Kafka writes it."""

from __future__ import annotations

import asyncio
import base64
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from services.common.errors import ErrorCode
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.common.zk.server import ZooKeeperProcess
from services.controller.assignment import BrokerMeta, assign_replicas

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


@pytest.fixture(scope="module")
def controllers(
    zk_server: ZooKeeperProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, list[ControllerProc]]]:
    connect = f"{zk_server.connect}/controller-topics-{uuid.uuid4().hex[:8]}"
    log_dir: Path = tmp_path_factory.mktemp("controllers")
    procs = [ControllerProc(i, connect, log_dir) for i in (1, 2)]
    for p in procs:
        p.start()
    yield connect, procs
    assert stop_all(procs) == [0, 0]


@pytest.fixture
async def zk(controllers: tuple[str, list[ControllerProc]]) -> AsyncIterator[AsyncZk]:
    client = AsyncZk(controllers[0], 4000)
    await client.start()
    await wait_for(lambda: active_controller(client), STARTUP_S, what="an active controller")
    for p in controllers[1]:
        await wait_for(
            lambda p=p: client.exists(layout.controller_endpoint_path(p.id)),
            15,
            what=f"controller {p.id} to register",
        )
    yield client
    await client.stop()


@pytest.fixture
async def storage(
    controllers: tuple[str, list[ControllerProc]],
) -> AsyncIterator[list[FakeStorage]]:
    """Started fake storage nodes; all stopped (deregistered) at the end of the test."""
    nodes: list[FakeStorage] = []
    yield nodes
    await asyncio.gather(*(n.stop() for n in nodes))


async def start_nodes(connect: str, nodes: list[FakeStorage], ids: list[int]) -> list[FakeStorage]:
    started = await asyncio.gather(*(FakeStorage(i, connect).start() for i in ids))
    nodes.extend(started)
    # the controller has seen them once they got their (possibly empty) full state
    await wait_for(
        lambda: all(n.max_controller_epoch > 0 for n in started),
        what="the controller to see the new storage nodes",
    )
    return list(started)


async def json_at(zk: AsyncZk, path: str) -> object:
    return layout.loads((await zk.get(path))[0])


async def create(
    zk: AsyncZk, *specs: pb.TopicSpec, validate_only: bool = False, timeout_ms: int = 5000
) -> list[pb.TopicResult]:
    stub, channel = await controller_stub(zk)
    try:
        resp = await stub.CreateTopics(
            pb.CreateTopicsRequest(
                topics=list(specs), timeout_ms=timeout_ms, validate_only=validate_only
            )
        )
    finally:
        await channel.close()
    return list(resp.topics)


def metric(port: int, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"metric {name} not found")


async def test_create_topic_zookeeper_layout_and_orders(
    controllers: tuple[str, list[ControllerProc]], zk: AsyncZk, storage: list[FakeStorage]
) -> None:
    connect, procs = controllers
    b1, b2 = await start_nodes(connect, storage, [1, 2])
    active_id, epoch = await active_controller(zk)  # type: ignore[misc]
    await wait_for(
        lambda: b1.max_controller_epoch == epoch and b2.max_controller_epoch == epoch,
        what="the new brokers to get the controller's full state",
    )

    [res] = await create(
        zk,
        pb.TopicSpec(
            name="orders",
            num_partitions=4,
            replication_factor=2,
            configs={"retention.ms": "3600000"},
        ),
    )
    assert (res.error_code, res.num_partitions, res.replication_factor) == (0, 4, 2)
    assert len(res.topic_id) == 16
    topic_id = base64.urlsafe_b64encode(res.topic_id).rstrip(b"=").decode()

    topic = await json_at(zk, "/brokers/topics/orders")
    assert topic == {
        "version": 3,
        "topic_id": topic_id,
        "adding_replicas": {},
        "removing_replicas": {},
        "partitions": topic["partitions"],
    }  # type: ignore[index]
    parts = {int(p): r for p, r in topic["partitions"].items()}  # type: ignore[index]
    assert sorted(parts) == [0, 1, 2, 3]
    assert all(sorted(r) == [1, 2] for r in parts.values())
    assert sorted(r[0] for r in parts.values()) == [1, 1, 2, 2]  # leaders balanced
    for p, replicas in parts.items():
        state = await json_at(zk, f"/brokers/topics/orders/partitions/{p}/state")
        assert state == {
            "controller_epoch": epoch,
            "leader": replicas[0],
            "version": 1,
            "leader_epoch": 0,
            "isr": replicas,
        }
    assert await json_at(zk, "/config/topics/orders") == {
        "version": 1,
        "config": {"retention.ms": "3600000"},
    }

    for node in (b1, b2):
        got = {p.partition: (e, p) for e, p in node.states("orders")}
        assert sorted(got) == [0, 1, 2, 3]
        for partition, (order_epoch, st) in got.items():
            assert order_epoch == epoch
            assert (st.leader, st.leader_epoch, list(st.isr), list(st.replicas)) == (
                parts[partition][0],
                0,
                parts[partition],
                parts[partition],
            )
            assert st.is_new and st.partition_epoch == 0 and st.topic_id == res.topic_id
            assert dict(st.config) == {"retention.ms": "3600000"}
        assert all(u.controller_id == active_id for u in node.updates)

    # the standby answers NOT_CONTROLLER
    standby = next(p.id for p in procs if p.id != active_id)
    stub, channel = await controller_stub(zk, standby)
    resp = await stub.CreateTopics(pb.CreateTopicsRequest(topics=[pb.TopicSpec(name="x")]))
    await channel.close()
    assert [(t.name, t.error_code) for t in resp.topics] == [("x", ErrorCode.NOT_CONTROLLER)]
    by_id = {p.id: p for p in procs}
    assert (
        metric(
            by_id[active_id].admin_port, "kafka_controller_kafkacontroller_activecontrollercount"
        )
        == 1
    )
    assert (
        metric(by_id[standby].admin_port, "kafka_controller_kafkacontroller_activecontrollercount")
        == 0
    )
    assert (
        metric(by_id[active_id].admin_port, "kafka_controller_kafkacontroller_globaltopiccount")
        >= 1
    )


async def test_create_topic_errors(
    controllers: tuple[str, list[ControllerProc]], zk: AsyncZk, storage: list[FakeStorage]
) -> None:
    await start_nodes(controllers[0], storage, [5, 6])
    [ok] = await create(zk, pb.TopicSpec(name="dup.topic", num_partitions=1, replication_factor=1))
    assert ok.error_code == 0
    results = await create(
        zk,
        pb.TopicSpec(name="dup.topic", num_partitions=1, replication_factor=1),
        pb.TopicSpec(name="dup_topic", num_partitions=1, replication_factor=1),
        pb.TopicSpec(name="bad name", num_partitions=1, replication_factor=1),
        pb.TopicSpec(name="too-many-replicas", num_partitions=1, replication_factor=3),
        pb.TopicSpec(name="no-partitions", num_partitions=0, replication_factor=1),
        pb.TopicSpec(
            name="bad-config",
            num_partitions=1,
            replication_factor=1,
            configs={"cleanup.policy": "shred"},
        ),
        pb.TopicSpec(
            name="unknown-broker",
            num_partitions=-1,
            replication_factor=-1,
            assignments=[pb.ReplicaAssignment(partition=0, broker_ids=[5, 99])],
        ),
        pb.TopicSpec(name="twice", num_partitions=1, replication_factor=1),
        pb.TopicSpec(name="twice", num_partitions=1, replication_factor=1),
    )
    got = [(r.name, ErrorCode(r.error_code), r.error_message) for r in results]
    assert got[0] == (
        "dup.topic",
        ErrorCode.TOPIC_ALREADY_EXISTS,
        "Topic 'dup.topic' already exists.",
    )
    assert got[1] == (
        "dup_topic",
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        "Topic 'dup_topic' collides with existing topics: dup.topic",
    )
    assert got[2][1] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert got[3] == (
        "too-many-replicas",
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "Replication factor: 3 larger than available brokers: 2.",
    )
    assert got[4] == (
        "no-partitions",
        ErrorCode.INVALID_PARTITIONS,
        "Number of partitions must be larger than 0.",
    )
    assert got[5][:2] == ("bad-config", ErrorCode.INVALID_CONFIG)
    assert got[6] == (
        "unknown-broker",
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes broker 99, but no such broker is registered.",
    )
    assert got[7][1] == got[8][1] == ErrorCode.INVALID_REQUEST
    for name in ("dup_topic", "too-many-replicas", "bad-config", "twice"):
        assert await zk.exists(layout.topic_path(name)) is None
        assert await zk.exists(layout.topic_config_path(name)) is None

    [checked] = await create(
        zk,
        pb.TopicSpec(name="only-validated", num_partitions=3, replication_factor=2),
        validate_only=True,
    )
    assert (checked.error_code, checked.num_partitions, checked.replication_factor) == (0, 3, 2)
    assert await zk.exists(layout.topic_path("only-validated")) is None
    assert await zk.exists(layout.topic_config_path("only-validated")) is None


async def test_broker_death_and_return(
    controllers: tuple[str, list[ControllerProc]], zk: AsyncZk, storage: list[FakeStorage]
) -> None:
    connect, procs = controllers
    b11, b12 = await start_nodes(connect, storage, [11, 12])
    active_id, epoch = await active_controller(zk)  # type: ignore[misc]
    admin_port = next(p.admin_port for p in procs if p.id == active_id)
    offline_name = "kafka_controller_kafkacontroller_offlinepartitionscount"
    results = await create(
        zk,
        pb.TopicSpec(
            name="solo",
            num_partitions=-1,
            replication_factor=-1,
            assignments=[pb.ReplicaAssignment(partition=0, broker_ids=[11])],
        ),
        pb.TopicSpec(
            name="pair",
            num_partitions=-1,
            replication_factor=-1,
            assignments=[pb.ReplicaAssignment(partition=0, broker_ids=[11, 12])],
        ),
    )
    assert [r.error_code for r in results] == [0, 0]
    offline_before = metric(admin_port, offline_name)

    await b11.deregister()
    solo = "/brokers/topics/solo/partitions/0/state"
    pair = "/brokers/topics/pair/partitions/0/state"
    await wait_for(lambda: _leader_is(zk, solo, -1), what="solo-0 to go offline")
    assert await json_at(zk, solo) == {
        "controller_epoch": epoch,
        "leader": -1,
        "version": 1,
        "leader_epoch": 1,
        "isr": [11],
    }
    await wait_for(lambda: _leader_is(zk, pair, 12), what="pair-0 to move to broker 12")
    assert await json_at(zk, pair) == {
        "controller_epoch": epoch,
        "leader": 12,
        "version": 1,
        "leader_epoch": 1,
        "isr": [12],
    }
    await wait_for(
        lambda: (st := b12.latest("pair", 0)) is not None and st.leader_epoch == 1,
        what="broker 12 to be told it leads pair-0",
    )
    st = b12.latest("pair", 0)
    assert st is not None and (st.leader, list(st.isr), st.partition_epoch) == (12, [12], 1)
    assert metric(admin_port, offline_name) == offline_before + 1

    before = len(b11.updates)
    await b11.register()  # the node comes back (new session, new broker epoch)
    await wait_for(lambda: _leader_is(zk, solo, 11), what="solo-0 to be re-elected")
    assert await json_at(zk, solo) == {
        "controller_epoch": epoch,
        "leader": 11,
        "version": 1,
        "leader_epoch": 2,
        "isr": [11],
    }
    await wait_for(lambda: len(b11.updates) > before, what="full state for the returning node")
    full = {(p.topic, p.partition): p for p in b11.updates[before].partitions}
    assert {("solo", 0), ("pair", 0)} <= set(full)
    assert (full["solo", 0].leader, full["solo", 0].leader_epoch) == (11, 2)
    assert (full["pair", 0].leader, list(full["pair", 0].isr)) == (12, [12])
    assert metric(admin_port, offline_name) == offline_before


async def _leader_is(zk: AsyncZk, path: str, leader: int) -> bool:
    got = await zk.get_or_none(path)
    return got is not None and layout.loads(got[0])["leader"] == leader


async def test_delete_topics(
    controllers: tuple[str, list[ControllerProc]], zk: AsyncZk, storage: list[FakeStorage]
) -> None:
    connect, _ = controllers
    b21, b22 = await start_nodes(connect, storage, [21, 22])
    assert [
        r.error_code
        for r in await create(
            zk,
            pb.TopicSpec(
                name="doomed",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[
                    pb.ReplicaAssignment(partition=0, broker_ids=[21, 22]),
                    pb.ReplicaAssignment(partition=1, broker_ids=[22, 21]),
                ],
            ),
            pb.TopicSpec(
                name="stuck",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[pb.ReplicaAssignment(partition=0, broker_ids=[21])],
            ),
        )
    ] == [0, 0]
    stub, channel = await controller_stub(zk)
    try:
        resp = await stub.DeleteTopics(
            pb.DeleteTopicsRequest(names=["doomed", "nope"], timeout_ms=5000)
        )
        assert [(t.name, t.error_code) for t in resp.topics] == [
            ("doomed", 0),
            ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        for path in (
            "/brokers/topics/doomed",
            "/config/topics/doomed",
            "/admin/delete_topics/doomed",
        ):
            assert await zk.exists(path) is None
        for node in (b21, b22):
            [stop] = [s for s in node.stops if s.partitions[0].topic == "doomed"]
            assert stop.delete_partitions
            assert sorted(p.partition for p in stop.partitions) == [0, 1]

        # a replica on a dead node: queued until the node returns (Kafka: ineligible)
        await b21.deregister()
        await wait_for(
            lambda: _leader_is(zk, "/brokers/topics/stuck/partitions/0/state", -1),
            what="the controller to see broker 21 die",
        )
        resp = await stub.DeleteTopics(pb.DeleteTopicsRequest(names=["stuck"], timeout_ms=500))
        assert [(t.name, t.error_code) for t in resp.topics] == [
            ("stuck", ErrorCode.REQUEST_TIMED_OUT)
        ]
        assert await zk.exists("/admin/delete_topics/stuck") is not None
        assert await zk.exists("/brokers/topics/stuck") is not None
        await b21.register()
        await wait_for(lambda: _gone(zk, "/brokers/topics/stuck"), what="stuck to be deleted")
        assert await zk.exists("/admin/delete_topics/stuck") is None
        assert any(s.delete_partitions and s.partitions[0].topic == "stuck" for s in b21.stops)
    finally:
        await channel.close()


async def _gone(zk: AsyncZk, path: str) -> bool:
    return await zk.exists(path) is None


async def test_create_partitions(
    controllers: tuple[str, list[ControllerProc]], zk: AsyncZk, storage: list[FakeStorage]
) -> None:
    connect, _ = controllers
    nodes = await start_nodes(connect, storage, [31, 32, 33])
    assert [
        r.error_code
        for r in await create(zk, pb.TopicSpec(name="grow", num_partitions=2, replication_factor=2))
    ] == [0]
    before = (await json_at(zk, "/brokers/topics/grow"))["partitions"]  # type: ignore[index]
    stub, channel = await controller_stub(zk)
    try:
        resp = await stub.CreatePartitions(
            pb.CreatePartitionsRequest(
                topics=[pb.PartitionCountSpec(name="grow", count=5)], timeout_ms=5000
            )
        )
        assert [(t.error_code, t.num_partitions, t.replication_factor) for t in resp.topics] == [
            (0, 5, 2)
        ]
        after = await json_at(zk, "/brokers/topics/grow")
        parts = {int(p): r for p, r in after["partitions"].items()}  # type: ignore[index]
        assert {str(p): parts[p] for p in (0, 1)} == before
        # AdminZkClient.createNewPartitionsAssignment: start index from partition 0's leader
        brokers = [BrokerMeta(i) for i in (31, 32, 33)]
        start = [b.id for b in brokers].index(parts[0][0])
        assert {p: parts[p] for p in (2, 3, 4)} == assign_replicas(
            3, 2, brokers, start_index=start, start_partition_id=2
        )
        for p in (2, 3, 4):
            assert (await json_at(zk, f"/brokers/topics/grow/partitions/{p}/state"))[  # type: ignore[index]
                "leader"
            ] == parts[p][0]
            for node in nodes:
                st = node.latest("grow", p)
                assert (st is not None) == (node.broker_id in parts[p])
                assert st is None or (st.is_new and list(st.replicas) == parts[p])

        resp = await stub.CreatePartitions(
            pb.CreatePartitionsRequest(
                topics=[
                    pb.PartitionCountSpec(name="grow", count=2),
                    pb.PartitionCountSpec(name="missing", count=2),
                ],
                timeout_ms=5000,
            )
        )
        assert [(t.error_code, t.error_message) for t in resp.topics] == [
            (
                ErrorCode.INVALID_PARTITIONS,
                "Topic currently has 5 partitions, which is higher than the requested 2.",
            ),
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'missing' does not exist."),
        ]
        resp = await stub.CreatePartitions(
            pb.CreatePartitionsRequest(
                topics=[
                    pb.PartitionCountSpec(
                        name="grow",
                        count=6,
                        assignments=[pb.ReplicaAssignment(broker_ids=[33, 31])],
                    )
                ],
                timeout_ms=5000,
            )
        )
        assert resp.topics[0].error_code == 0
        assert (await json_at(zk, "/brokers/topics/grow"))["partitions"]["5"] == [33, 31]  # type: ignore[index]
    finally:
        await channel.close()


async def test_alter_configs(
    controllers: tuple[str, list[ControllerProc]], zk: AsyncZk, storage: list[FakeStorage]
) -> None:
    connect, _ = controllers
    [b41] = await start_nodes(connect, storage, [41])
    assert [
        r.error_code
        for r in await create(
            zk, pb.TopicSpec(name="tuned", num_partitions=2, replication_factor=1)
        )
    ] == [0]
    changes_before = set(await zk.get_children(layout.CONFIG_CHANGES))
    stub, channel = await controller_stub(zk)
    try:
        resp = await stub.AlterConfigs(
            pb.AlterConfigsRequest(
                resources=[
                    pb.ConfigResourceChange(
                        resource_type=2,
                        name="tuned",
                        incremental=True,
                        ops=[
                            pb.ConfigOp(key="cleanup.policy", value="compact", op=2),
                            pb.ConfigOp(key="retention.ms", value="60000", op=0),
                        ],
                    ),
                    pb.ConfigResourceChange(
                        resource_type=2,
                        name="ghost",
                        incremental=True,
                        ops=[pb.ConfigOp(key="retention.ms", value="1", op=0)],
                    ),
                    pb.ConfigResourceChange(
                        resource_type=2,
                        name="tuned",
                        incremental=True,
                        ops=[pb.ConfigOp(key="retention.ms", value="never", op=0)],
                    ),
                    pb.ConfigResourceChange(
                        resource_type=4,
                        name="1",
                        incremental=True,
                        ops=[pb.ConfigOp(key="log.retention.ms", value="1", op=0)],
                    ),
                    pb.ConfigResourceChange(
                        resource_type=4,
                        name="",
                        incremental=True,
                        ops=[pb.ConfigOp(key="log.dirs", value="/x", op=0)],
                    ),
                ]
            )
        )
        codes = [(r.error_code, r.error_message) for r in resp.resources]
        assert codes[0] == (0, "")
        assert codes[1] == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "The topic 'ghost' does not exist.",
        )
        assert codes[2][0] == ErrorCode.INVALID_CONFIG
        assert codes[3] == (0, "")  # dynamic broker config (KIP-226)
        assert codes[4] == (
            ErrorCode.INVALID_REQUEST,
            "Invalid config value for resource ConfigResource(type=BROKER, name=''): "
            "Cannot update these configs dynamically: Set(log.dirs)",
        )
        expected = {"cleanup.policy": "delete,compact", "retention.ms": "60000"}
        assert await json_at(zk, "/config/topics/tuned") == {"version": 1, "config": expected}
        assert await json_at(zk, "/config/brokers/1") == {
            "version": 1,
            "config": {"log.retention.ms": "1"},
        }
        assert await zk.exists("/config/brokers/<default>") is None
        changes = sorted(set(await zk.get_children(layout.CONFIG_CHANGES)) - changes_before)
        assert all(
            c.startswith("config_change_") and len(c) == len("config_change_") + 10 for c in changes
        )
        assert [await json_at(zk, f"{layout.CONFIG_CHANGES}/{c}") for c in changes] == [
            {"version": 2, "entity_path": "topics/tuned"},
            {"version": 2, "entity_path": "brokers/1"},
        ]
        await wait_for(
            lambda: all(
                (st := b41.latest("tuned", p)) is not None and dict(st.config) == expected
                for p in (0, 1)
            ),
            what="replicas to get the new config",
        )
        for p in (0, 1):
            st = b41.latest("tuned", p)
            assert st is not None and st.leader_epoch == 0 and not st.is_new  # same epoch

        # full replacement (AlterConfigs, not incremental)
        resp = await stub.AlterConfigs(
            pb.AlterConfigsRequest(
                resources=[
                    pb.ConfigResourceChange(
                        resource_type=2,
                        name="tuned",
                        incremental=False,
                        ops=[pb.ConfigOp(key="segment.ms", value="100000")],
                    )
                ]
            )
        )
        assert resp.resources[0].error_code == 0
        assert await json_at(zk, "/config/topics/tuned") == {
            "version": 1,
            "config": {"segment.ms": "100000"},
        }
    finally:
        await channel.close()


async def test_topic_written_directly_to_zookeeper(
    controllers: tuple[str, list[ControllerProc]], zk: AsyncZk, storage: list[FakeStorage]
) -> None:
    """Kafka's fourth way to create a topic: write /brokers/topics/<t> yourself."""
    [b51] = await start_nodes(controllers[0], storage, [51])
    _, epoch = await active_controller(zk)  # type: ignore[misc]
    await zk.create(
        "/brokers/topics/handmade",
        layout.dumps({"version": 1, "partitions": {"0": [51], "1": [51]}}),
    )
    await wait_for(
        lambda: zk.exists("/brokers/topics/handmade/partitions/1/state"),
        what="partition states for a hand-made topic",
    )
    topic = await json_at(zk, "/brokers/topics/handmade")
    assert topic["version"] == 3 and len(topic["topic_id"]) == 22  # type: ignore[index]
    assert await json_at(zk, "/brokers/topics/handmade/partitions/0/state") == {
        "controller_epoch": epoch,
        "leader": 51,
        "version": 1,
        "leader_epoch": 0,
        "isr": [51],
    }
    await wait_for(lambda: b51.latest("handmade", 1) is not None, what="orders for handmade")

    # adding a partition by rewriting the assignment (kafka-topics --alter with --zookeeper)
    await zk.set(
        "/brokers/topics/handmade",
        layout.dumps(
            {
                "version": 3,
                "topic_id": topic["topic_id"],  # type: ignore[index]
                "partitions": {"0": [51], "1": [51], "2": [51]},
            }
        ),
    )
    await wait_for(
        lambda: zk.exists("/brokers/topics/handmade/partitions/2/state"),
        what="a state for the added partition",
    )
    await wait_for(lambda: b51.latest("handmade", 2) is not None, what="orders for partition 2")
