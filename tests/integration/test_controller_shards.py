"""The controller creates ``__consumer_offsets`` and places its shards on group coordinators.

Real ZooKeeper, two controller processes, one storage node and a gateway (``LocalCluster``, no
group coordinator processes). Coordinators are played by the test: each is an ephemeral
registration znode of its own ZooKeeper session. A fake storage node (the controller harness's
``FakeStorage``) becomes the second broker the offsets topic's replication factor (2) asks for.
"""

from __future__ import annotations

import asyncio
import sys
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from services.cli.local_cluster import LocalCluster
from services.common.errors import ErrorCode
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.common.rpc.kafkapy.v1 import controller_pb2_grpc
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.common.zk.layout import CONSUMER_OFFSETS_TOPIC, ShardMap
from tests.integration.kafka_support import running_cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness, whatever the import mode
from test_controller_harness import STARTUP_S, FakeStorage, active_controller, wait_for  # noqa: E402

pytestmark = pytest.mark.integration

PARTITIONS = 6
RF = 2
SESSION_MS = 4000

NOT_ENOUGH_BROKERS = (
    "Number of alive brokers '1' does not meet the required replication factor '2' for the "
    "offsets topic (configured via 'offsets.topic.replication.factor'). This error can be "
    "ignored if the cluster is starting up and not all brokers are up yet."
)


@pytest.fixture(scope="module")
def shards_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("controller-shards"),
        gateways=1,
        storage_nodes=1,
        controllers=2,
        group_coordinators=0,
        extra={
            "controller": [
                "--offsets.topic.replication.factor",
                str(RF),
                "--offsets.topic.num.partitions",
                str(PARTITIONS),
            ]
        },
    ) as c:
        yield c


class FakeCoordinator:
    """A group coordinator as far as the controller can tell: its registration znode."""

    def __init__(self, connect: str, node_id: int) -> None:
        self.id = node_id
        self._connect = connect
        self._zk: AsyncZk | None = None
        self.czxid = 0

    @property
    def path(self) -> str:
        return layout.group_coordinator_path(self.id)

    async def register(self) -> None:
        """A session and its registration."""
        self._zk = await self._session()
        await self._zk.create(self.path, self._endpoint(), ephemeral=True)
        await self._read_czxid()

    async def restart(self) -> None:
        """A new session replaces the registration in one transaction (a restarted coordinator
        whose old registration the controller never sees missing), then the old session ends."""
        old, self._zk = self._zk, await self._session()
        t = self._zk.client.transaction()
        t.delete(self.path)
        t.create(self.path, self._endpoint(), ephemeral=True)
        results = await asyncio.to_thread(t.commit)
        assert not any(isinstance(r, Exception) for r in results), results
        await self._read_czxid()
        if old is not None:
            await old.stop()

    async def _session(self) -> AsyncZk:
        zk = AsyncZk(self._connect, SESSION_MS)
        await zk.start()
        return zk

    def _endpoint(self) -> bytes:
        return layout.Endpoint(self.id, "127.0.0.1", 1).to_json()

    async def _read_czxid(self) -> None:
        assert self._zk is not None
        stat = await self._zk.exists(self.path)
        assert stat is not None
        self.czxid = stat.czxid

    async def close(self) -> None:
        """The session ends; ZooKeeper deletes the registration at once."""
        if self._zk is not None:
            await self._zk.stop()
            self._zk = None


async def call(cluster: LocalCluster, index: int, name: str) -> pb.CreateInternalTopicResponse:
    async with grpc.aio.insecure_channel(cluster.address("controller", index)) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        return await stub.CreateInternalTopic(pb.CreateInternalTopicRequest(name=name), timeout=10)


async def active_index(zk: AsyncZk) -> int:
    got = await wait_for(lambda: active_controller(zk), STARTUP_S, what="an active controller")
    return int(got[0])


async def read_map(zk: AsyncZk) -> tuple[ShardMap, int] | None:
    got = await zk.get_or_none(layout.GROUP_COORDINATOR_SHARDS)
    return (ShardMap.from_json(got[0]), got[1].version) if got is not None else None


def owners(m: ShardMap) -> Counter[int]:
    return Counter(s.owner for s in m.shards.values())


async def wait_for_owners(zk: AsyncZk, expected: dict[int, int]) -> ShardMap:
    async def placed() -> ShardMap | None:
        got = await read_map(zk)
        return got[0] if got is not None and owners(got[0]) == expected else None

    m: ShardMap = await wait_for(placed, 15, interval=0.05, what=f"shards placed as {expected}")
    return m


def assert_moves(
    before: ShardMap, after: ShardMap, coordinators: dict[int, FakeCoordinator]
) -> None:
    """Kept shards are unchanged; a moved shard keeps its producer id and gets epoch + 1."""
    assert after.partitions == PARTITIONS and sorted(after.shards) == list(range(PARTITIONS))
    for p, s in after.shards.items():
        old = before.shards[p]
        assert s.session == coordinators[s.owner].czxid
        assert s.producer_id == old.producer_id
        assert s.epoch == (old.epoch if s == old else old.epoch + 1)


async def test_create_internal_topic_refusals(shards_cluster: LocalCluster) -> None:
    zk = AsyncZk(shards_cluster.zk_connect, SESSION_MS)
    await zk.start()
    try:
        active = await active_index(zk)
        standby = 1 - active
        got = await call(shards_cluster, standby, CONSUMER_OFFSETS_TOPIC)
        assert got.error_code == ErrorCode.NOT_CONTROLLER

        got = await call(shards_cluster, active, "__cluster_metadata")
        assert got.error_code == ErrorCode.INVALID_REQUEST

        async def refused() -> pb.CreateInternalTopicResponse | None:
            resp = await call(shards_cluster, active, CONSUMER_OFFSETS_TOPIC)
            assert resp.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            # the controller may not have seen the storage node's registration yet ('0')
            return resp if resp.error_message == NOT_ENOUGH_BROKERS else None

        await wait_for(refused, 15, interval=0.1, what="the one storage node to be counted")
        assert await zk.exists(layout.topic_path(CONSUMER_OFFSETS_TOPIC)) is None
    finally:
        await zk.stop()


async def test_offsets_topic_and_shards_follow_coordinators(shards_cluster: LocalCluster) -> None:
    connect = shards_cluster.zk_connect
    zk = AsyncZk(connect, SESSION_MS)
    await zk.start()
    c = {i: FakeCoordinator(connect, i) for i in (1, 2, 3)}
    broker = FakeStorage(1, connect, rack="zone-b")
    try:
        await c[1].register()
        await c[2].register()
        await broker.start()
        active = await active_index(zk)

        # -- created once, as soon as the second broker is seen; concurrent calls get NONE
        async def created() -> bool:
            got = await asyncio.gather(
                *(call(shards_cluster, active, CONSUMER_OFFSETS_TOPIC) for _ in range(2))
            )
            codes = {r.error_code for r in got}
            assert codes <= {ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE}, got
            return codes == {ErrorCode.NONE}

        await wait_for(created, 15, interval=0.1, what="__consumer_offsets to be created")
        assert (await call(shards_cluster, active, CONSUMER_OFFSETS_TOPIC)).error_code == 0
        data, _ = await zk.get(layout.topic_path(CONSUMER_OFFSETS_TOPIC))
        assignment, topic_id = layout.parse_topic_assignment(data)
        assert topic_id and sorted(assignment) == list(range(PARTITIONS))
        assert all(sorted(r) == [0, 1] for r in assignment.values())
        config, _ = await zk.get(layout.topic_config_path(CONSUMER_OFFSETS_TOPIC))
        assert layout.parse_topic_config(config) == {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": "104857600",
        }
        await wait_for(
            lambda: (
                {p.partition for _, p in broker.states(CONSUMER_OFFSETS_TOPIC)}
                == set(range(PARTITIONS))
            ),
            what="orders for every offsets partition at the storage node",
        )

        # -- placed on the two coordinators registered before: balanced, epoch 0, own ids
        first = await wait_for_owners(zk, {1: 3, 2: 3})
        assert first.topic_id == topic_id
        assert all(s.epoch == 0 and s.session == c[s.owner].czxid for s in first.shards.values())
        assert len({s.producer_id for s in first.shards.values()}) == PARTITIONS
        block, _ = await zk.get(layout.LATEST_PRODUCER_ID_BLOCK)
        assert max(s.producer_id for s in first.shards.values()) <= int(
            layout.loads(block)["block_end"]
        )

        # -- coordinator 1 goes away: its shards move to 2 with epoch + 1
        await c[1].close()
        survivor = await wait_for_owners(zk, {2: 6})
        assert_moves(first, survivor, c)
        assert sum(survivor.shards[p] != first.shards[p] for p in range(PARTITIONS)) == 3

        # -- a third registers: it takes its fair share, nothing else moves
        await c[3].register()
        three = await wait_for_owners(zk, {2: 3, 3: 3})
        assert_moves(survivor, three, c)

        # -- coordinator 3 restarts (new registration): same owner, new epoch
        await c[3].restart()

        async def reowned() -> ShardMap | None:
            got = await read_map(zk)
            m = got[0] if got is not None else None
            seen = m is not None and any(s.session == c[3].czxid for s in m.shards.values())
            return m if seen else None

        again: ShardMap = await wait_for(reowned, 15, what="the re-registration to be seen")
        assert owners(again) == {2: 3, 3: 3}
        assert_moves(three, again, c)
        assert {p for p, s in again.shards.items() if s != three.shards[p]} == {
            p for p, s in three.shards.items() if s.owner == 3
        }

        # -- the active controller dies: its successor keeps the map as it is
        before = await read_map(zk)
        assert before is not None
        shards_cluster.kill("controller", active)
        successor, _ = await wait_for(
            lambda: _other_active(zk, active), 15, interval=0.05, what="a new controller"
        )
        # answered by the successor's event loop, so its failover (placement included) is done
        assert (await call(shards_cluster, successor, CONSUMER_OFFSETS_TOPIC)).error_code == 0
        assert await read_map(zk) == before

        # ... and acts on the next change with the sessions it read from the map
        await c[2].close()
        last = await wait_for_owners(zk, {3: 6})
        assert_moves(before[0], last, c)
        url = f"{shards_cluster.admin_url('controller', successor)}/metrics"

        async def gauged() -> bool:
            return await _shard_gauges(url) == {"3": 6.0}

        await wait_for(gauged, what="the coordinator_shards gauge")

        # -- the topic grows: only the new shards are placed, with epoch 0 and new producer ids
        async with grpc.aio.insecure_channel(shards_cluster.address("controller", successor)) as ch:
            stub = controller_pb2_grpc.ControllerStub(ch)
            spec = pb.PartitionCountSpec(name=CONSUMER_OFFSETS_TOPIC, count=PARTITIONS + 2)
            grown = await stub.CreatePartitions(
                pb.CreatePartitionsRequest(topics=[spec], timeout_ms=5000)
            )
            assert grown.topics[0].error_code == 0, grown
            m, _ = await wait_for(lambda: read_map(zk), what="the map")
            assert m.partitions == PARTITIONS + 2 and owners(m) == {3: PARTITIONS + 2}
            assert all(m.shards[p] == last.shards[p] for p in range(PARTITIONS))
            new = [m.shards[p] for p in (PARTITIONS, PARTITIONS + 1)]
            assert [s.epoch for s in new] == [0, 0]
            ids = {s.producer_id for s in m.shards.values()}
            assert len(ids) == PARTITIONS + 2

            # -- the topic is deleted: the map is emptied (every owner resigns) and stays so
            gone = await stub.DeleteTopics(
                pb.DeleteTopicsRequest(names=[CONSUMER_OFFSETS_TOPIC], timeout_ms=10000)
            )
            assert gone.topics[0].error_code == 0, gone
        await wait_for(
            lambda: _absent(zk, layout.topic_path(CONSUMER_OFFSETS_TOPIC)), 15, what="deletion"
        )
        emptied = await read_map(zk)
        assert emptied is not None and emptied[0] == ShardMap(0, {})
        await c[1].register()
        await c[3].close()
        await _controller_caught_up(zk)
        assert await read_map(zk) == emptied

        # -- created again: placed afresh (epoch 0, new producer ids, the new topic's id)
        assert (await call(shards_cluster, successor, CONSUMER_OFFSETS_TOPIC)).error_code == 0
        data, _ = await zk.get(layout.topic_path(CONSUMER_OFFSETS_TOPIC))
        _, new_topic_id = layout.parse_topic_assignment(data)
        recreated = await wait_for_owners(zk, {1: PARTITIONS})
        assert recreated.topic_id == new_topic_id and new_topic_id != topic_id
        assert all(s.epoch == 0 and s.session == c[1].czxid for s in recreated.shards.values())
        assert len({s.producer_id for s in recreated.shards.values()} - ids) == PARTITIONS
    finally:
        await asyncio.gather(*(x.close() for x in c.values()))
        await broker.stop()
        await zk.stop()


async def _other_active(zk: AsyncZk, old: int) -> tuple[int, int] | None:
    """(id, epoch) of the active controller once it is not ``old``."""
    got = await active_controller(zk)
    return got if got is not None and got[0] != old else None


async def _absent(zk: AsyncZk, path: str) -> bool:
    return await zk.exists(path) is None


async def _controller_caught_up(zk: AsyncZk) -> None:
    """Wait until the controller handled every ZooKeeper change made before this call: it gets
    watch notifications in order, so once it has brought a topic created now online, it has
    seen the earlier changes too."""
    name = f"shards-sync-{uuid.uuid4().hex[:8]}"
    await zk.create(layout.topic_path(name), layout.topic_assignment_json({0: [0]}))
    await wait_for(
        lambda: zk.exists(layout.partition_state_path(name, 0)), 15, what="the sync topic"
    )


async def _shard_gauges(url: str) -> dict[str, float]:
    """``kafkapy_controller_coordinator_shards`` by coordinator, from a /metrics page."""

    def get() -> str:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - http://127.0.0.1
            return str(resp.read().decode())

    return {
        sample.labels["coordinator"]: sample.value
        for family in text_string_to_metric_families(await asyncio.to_thread(get))
        if family.name == "kafkapy_controller_coordinator_shards"
        for sample in family.samples
    }
