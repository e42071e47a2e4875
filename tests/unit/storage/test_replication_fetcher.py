"""Replication between replica managers in one process, over the real log engine.

The "network" is a direct call into the leader's Storage handlers (fetch, OffsetForLeaderEpoch),
and ZooKeeper is an in-memory store of partition states with versions, so these tests exercise
the fetchers, truncation, the HW and the ISR manager end to end without processes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry

from services.common.errors import ErrorCode
from services.common.records.batch import iter_headers
from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.zk.layout import PartitionStateZk
from services.storage.appends import append
from services.storage.epochs import offset_for_leader_epoch
from services.storage.fetches import fetch
from services.storage.metrics import StorageMetrics
from services.storage.partition import Partition
from services.storage.replica_manager import ReplicaManager
from services.storage.replication.endpoints import LeaderEndpoint
from services.storage.replication.fetcher import FetcherConfig
from services.storage.replication.isr import IsrManager, IsrVersionConflict
from services.storage.replication.manager import ReplicaFetcherManager
from services.storage.wire import FetchReply

T = "t"
LAG_MS = 10_000


# ---- an in-memory "ZooKeeper" for partition states --------------------------------------------
class MemoryStateStore:
    def __init__(self) -> None:
        self.states: dict[tuple[str, int], tuple[PartitionStateZk, int]] = {}
        self.notifications: list[list[tuple[str, int]]] = []
        self.writes = 0

    def put(self, topic: str, partition: int, state: PartitionStateZk) -> int:
        """A controller write: returns the new version."""
        old = self.states.get((topic, partition))
        version = 0 if old is None else old[1] + 1
        self.states[(topic, partition)] = (state, version)
        return version

    async def read(self, topic: str, partition: int) -> tuple[PartitionStateZk, int] | None:
        return self.states.get((topic, partition))

    async def write(
        self, topic: str, partition: int, state: PartitionStateZk, expected_version: int
    ) -> int:
        old = self.states.get((topic, partition))
        if old is None or old[1] != expected_version:
            raise IsrVersionConflict("bad version")
        self.writes += 1
        return self.put(topic, partition, state)

    async def notify(self, partitions: Sequence[tuple[str, int]]) -> None:
        self.notifications.append(list(partitions))


# ---- in-process brokers ---------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms


@dataclass
class Sent:
    """A follower's fetch as the leader got it, and the session error it answered."""

    replica_id: int
    session_id: int
    session_epoch: int
    listed: list[tuple[str, int]]
    forgotten: list[tuple[str, int]]
    error_code: int = 0


class InProcessLeader:
    def __init__(self, rm: ReplicaManager, sent: list[Sent], stalled: set[int]) -> None:
        self.rm = rm
        self.sent = sent
        self.stalled = stalled  # leaders whose fetches time out (a SIGSTOPped process)

    async def fetch(self, req: pb.FetchRequest, timeout_s: float) -> FetchReply:
        if self.rm.broker_id in self.stalled:
            await asyncio.sleep(0.05)
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                "Deadline Exceeded",
            )
        seen = Sent(
            req.replica_id,
            req.session_id,
            req.session_epoch,
            [(pf.topic, pf.partition) for pf in req.partitions],
            [(fp.topic, fp.partition) for fp in req.forgotten],
        )
        self.sent.append(seen)
        reply = await fetch(self.rm, req)
        seen.error_code = reply.error_code
        return reply

    async def offset_for_leader_epoch(
        self, req: pb.OffsetForLeaderEpochRequest, timeout_s: float
    ) -> pb.OffsetForLeaderEpochResponse:
        return offset_for_leader_epoch(self.rm, req)


class Cluster:
    def __init__(self, tmp_path: Path, ids: Sequence[int], **fetch_overrides: int) -> None:
        self.clock = Clock()
        self.store = MemoryStateStore()
        self.reachable: set[int] = set(ids)
        self.stalled: set[int] = set()
        self.lookups_held: asyncio.Event | None = None  # leader lookups wait until it is set
        self.rms: dict[int, ReplicaManager] = {}
        self.managers: dict[int, ReplicaFetcherManager] = {}
        self.isr: dict[int, IsrManager] = {}
        self.controller_epoch = 1
        self.sent: list[Sent] = []  # every fetch request, in order
        for b in ids:
            (tmp_path / f"broker-{b}").mkdir()
            rm = ReplicaManager(
                b,
                tmp_path / f"broker-{b}",
                {},
                metrics=StorageMetrics(CollectorRegistry()),
                replica_lag_time_max_ms=LAG_MS,
                clock=self.clock,
            )
            config = FetcherConfig(broker_id=b, max_wait_ms=50, backoff_ms=100, **fetch_overrides)
            self.managers[b] = ReplicaFetcherManager(rm, self, config)
            self.isr[b] = IsrManager(rm, self.store)
            rm.attach_replication(self.managers[b], self.isr[b])
            self.rms[b] = rm

    # EndpointProvider
    async def endpoint(self, broker_id: int) -> LeaderEndpoint | None:
        if self.lookups_held is not None:  # a real lookup may wait (ZooKeeper)
            await self.lookups_held.wait()
        if broker_id not in self.reachable:
            return None
        return InProcessLeader(self.rms[broker_id], self.sent, self.stalled)

    async def close(self) -> None:  # EndpointProvider.close (the managers call it)
        return None

    async def shutdown(self) -> None:
        for b in self.rms:
            await self.managers[b].close()
        for b, rm in self.rms.items():
            await self.isr[b].close()
            await rm.close()

    def partition(self, broker: int, partition: int = 0) -> Partition:
        p = self.rms[broker].get(T, partition)
        assert p is not None
        return p

    async def elect(
        self,
        leader: int,
        isr: Sequence[int],
        replicas: Sequence[int],
        *,
        to: Sequence[int] | None = None,
        partition: int = 0,
        config: dict[str, str] | None = None,
    ) -> int:
        """What the controller does: write a new state (leader epoch + 1) and order replicas."""
        old = self.store.states.get((T, partition))
        epoch = 0 if old is None else old[0].leader_epoch + 1
        self.store.put(
            T, partition, PartitionStateZk(leader, epoch, list(isr), self.controller_epoch)
        )
        await self.resend(replicas, to=to, partition=partition, config=config)
        return epoch

    async def resend(
        self,
        replicas: Sequence[int],
        *,
        to: Sequence[int] | None = None,
        partition: int = 0,
        config: dict[str, str] | None = None,
        ineligible: Sequence[int] = (),
    ) -> None:
        """Order replicas with the current state (as sent to a node that just registered)."""
        st, version = self.store.states[(T, partition)]
        leader, epoch, isr = st.leader, st.leader_epoch, st.isr
        state = pb.PartitionState(
            topic=T,
            partition=partition,
            leader=leader,
            leader_epoch=epoch,
            isr=list(isr),
            replicas=list(replicas),
            partition_epoch=version,
            config=config or {},
        )
        for b in to if to is not None else replicas:
            resp = await self.rms[b].update_partitions(
                pb.UpdatePartitionsRequest(
                    controller_id=100,
                    controller_epoch=self.controller_epoch,
                    partitions=[state],
                    ineligible_replicas=list(ineligible),
                )
            )
            assert resp.partitions[0].error_code == 0, resp

    async def announce(self, broker: int, ineligible: Sequence[int]) -> None:
        """An order without partitions: only the controller's shutting-down set."""
        resp = await self.rms[broker].update_partitions(
            pb.UpdatePartitionsRequest(
                controller_id=100,
                controller_epoch=self.controller_epoch,
                ineligible_replicas=list(ineligible),
            )
        )
        assert resp.error_code == 0 and not resp.partitions, resp


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path, [1, 2, 3])
    yield c
    await c.shutdown()


async def until(cond: Callable[[], bool], within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


def batch(*values: bytes) -> bytes:
    return build_batch([Record(timestamp=int(time.time() * 1000), value=v) for v in values])


async def produce(
    rm: ReplicaManager,
    records: bytes,
    *,
    acks: int = -1,
    timeout_ms: int = 5000,
    partition: int = 0,
) -> pb.PartitionAppendResult:
    resp = await append(
        rm,
        pb.AppendRequest(
            acks=acks,
            timeout_ms=timeout_ms,
            partitions=[
                pb.PartitionAppend(
                    topic=T, partition=partition, records=records, current_leader_epoch=-1
                )
            ],
        ),
    )
    return resp.partitions[0]


def log_bytes(p: Partition) -> bytes:
    lg = p.log
    if lg.log_end_offset == lg.log_start_offset:
        return b""
    return bytes(lg.read(lg.log_start_offset, 1 << 30, min_one_batch=True).records)


def offsets(p: Partition) -> list[int]:
    return [h.base_offset for h in iter_headers(log_bytes(p))]


def sample(rm: ReplicaManager, name: str) -> float:
    value = rm.metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


# ---- the tests ------------------------------------------------------------------------------------
async def test_followers_replicate_and_acks_all_completes(cluster: Cluster) -> None:
    await cluster.elect(1, [1, 2, 3], [1, 2, 3])
    started = time.monotonic()
    for i in range(5):
        r = await produce(cluster.rms[1], batch(b"v%d" % i, b"w%d" % i))
        assert (r.error_code, r.base_offset) == (0, 2 * i)
    assert time.monotonic() - started < 2.0  # woken by the fetches, not by timeouts
    leader = cluster.partition(1)
    assert leader.high_watermark == 10
    for b in (2, 3):
        f = cluster.partition(b)
        assert log_bytes(f) == log_bytes(leader)  # byte for byte, epochs included
        assert f.log.leader_epoch_cache.latest_epoch == 0
    await until(lambda: all(cluster.partition(b).high_watermark == 10 for b in (2, 3)))
    # followers never serve consumers
    resp = await fetch(
        cluster.rms[2],
        pb.FetchRequest(
            replica_id=-1,
            max_bytes=1 << 20,
            partitions=[
                pb.PartitionFetch(topic=T, partition=0, fetch_offset=0, current_leader_epoch=-1)
            ],
        ),
    )
    assert resp.partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert sample(cluster.rms[2], "kafka_server_brokertopicmetrics_replicationbytesin_total") == 0
    assert cluster.rms[2].metrics.registry.get_sample_value(
        "kafka_server_brokertopicmetrics_replicationbytesin_total", {"topic": T}
    ) == len(log_bytes(leader))


async def test_caught_up_follower_joins_the_isr(cluster: Cluster) -> None:
    # 2 and 3 are assigned but only 1 is in the ISR: it writes alone first
    await cluster.elect(1, [1], [1, 2, 3], to=[1])
    for i in range(3):
        assert (await produce(cluster.rms[1], batch(b"x%d" % i))).error_code == 0
    version_before = cluster.store.states[(T, 0)][1]
    await cluster.resend([1, 2, 3], to=[2, 3])  # the followers get their order
    await until(lambda: len(cluster.partition(1).isr) == 3)
    state, version = cluster.store.states[(T, 0)]
    assert sorted(state.isr) == [1, 2, 3] and state.leader == 1
    assert state.leader_epoch == cluster.partition(1).leader_epoch  # only the ISR changed
    assert version >= version_before + 2
    assert cluster.partition(1).partition_epoch == version
    await until(lambda: cluster.store.notifications != [])
    assert (T, 0) in cluster.store.notifications[0]
    assert sample(cluster.rms[1], "kafka_server_replicamanager_isrexpands_total") == 2
    assert sample(cluster.rms[1], "kafka_server_replicamanager_underreplicatedpartitions") == 0


async def test_shutting_down_follower_never_joins_the_isr(cluster: Cluster) -> None:
    # KIP-841: node 3 is in controlled shutdown; it still follows (and catches up) but the
    # leader never adds it, until an order no longer names it
    await cluster.elect(1, [1], [1, 2, 3], to=[1])
    await cluster.announce(1, [3])
    for i in range(3):
        assert (await produce(cluster.rms[1], batch(b"x%d" % i))).error_code == 0
    await cluster.resend([1, 2, 3], to=[2, 3], ineligible=[3])
    await until(lambda: cluster.partition(1).isr == (1, 2))
    leader = cluster.partition(1)
    await until(lambda: cluster.partition(3).log.log_end_offset == leader.log.log_end_offset)
    await until(lambda: leader.remote[3].log_end_offset == leader.log.log_end_offset)
    await asyncio.sleep(0.3)  # several more fetch rounds from a caught-up node 3
    assert leader.isr == (1, 2)
    assert cluster.store.states[(T, 0)][0].isr == [1, 2]
    assert cluster.rms[1].ineligible_replicas == frozenset({3})
    # its shutdown ended (it re-registered): the next order, even without partitions, lifts it
    await cluster.announce(1, [])
    await until(lambda: sorted(cluster.partition(1).isr) == [1, 2, 3])
    assert sorted(cluster.store.states[(T, 0)][0].isr) == [1, 2, 3]


async def test_lagging_follower_is_shrunk_and_acks_all_proceeds(cluster: Cluster) -> None:
    await cluster.elect(1, [1, 2, 3], [1, 2, 3], config={"min.insync.replicas": "2"})
    assert (await produce(cluster.rms[1], batch(b"a"))).error_code == 0
    cluster.managers[3].unfollow([(T, 0)])  # replica 3 stops fetching (a stuck broker)
    pending = asyncio.create_task(produce(cluster.rms[1], batch(b"b"), timeout_ms=10_000))
    await asyncio.sleep(0.1)
    assert not pending.done()  # 3 is still in the ISR: the HW waits for it
    assert cluster.isr[1].maybe_shrink_all() == 0  # not lagging long enough yet
    cluster.clock.offset_ms += LAG_MS + 1
    assert cluster.isr[1].maybe_shrink_all() == 1
    r = await asyncio.wait_for(pending, 2.0)
    assert r.error_code == 0  # ISR {1,2} >= min.insync.replicas 2
    assert cluster.partition(1).isr == (1, 2)
    assert cluster.store.states[(T, 0)][0].isr == [1, 2]
    assert sample(cluster.rms[1], "kafka_server_replicamanager_isrshrinks_total") == 1
    assert sample(cluster.rms[1], "kafka_server_replicamanager_underreplicatedpartitions") == 1


async def test_shrink_below_min_isr_fails_waiting_acks_all(cluster: Cluster) -> None:
    await cluster.elect(1, [1, 2, 3], [1, 2, 3], config={"min.insync.replicas": "3"})
    assert (await produce(cluster.rms[1], batch(b"a"))).error_code == 0
    cluster.managers[3].unfollow([(T, 0)])
    pending = asyncio.create_task(produce(cluster.rms[1], batch(b"b"), timeout_ms=10_000))
    await asyncio.sleep(0.05)
    cluster.clock.offset_ms += LAG_MS + 1
    cluster.isr[1].maybe_shrink_all()
    r = await asyncio.wait_for(pending, 2.0)
    assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    # and new acks=all appends are refused before they are written
    leo = cluster.partition(1).log.log_end_offset
    r = await produce(cluster.rms[1], batch(b"c"))
    assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert cluster.partition(1).log.log_end_offset == leo


async def test_new_leader_truncates_divergent_follower(cluster: Cluster) -> None:
    await cluster.elect(1, [1, 2, 3], [1, 2, 3])
    for i in range(3):
        assert (await produce(cluster.rms[1], batch(b"c%d" % i))).error_code == 0
    committed = log_bytes(cluster.partition(1))
    # broker 1 gets cut off; it still appends (acks=1) what nobody replicates
    cluster.reachable.discard(1)
    for i in range(4):
        assert (await produce(cluster.rms[1], batch(b"lost%d" % i), acks=1)).error_code == 0
    assert cluster.partition(1).log.log_end_offset == 7
    # the controller elects 2 from the ISR; 2 starts epoch 1 at its LEO (3)
    epoch = await cluster.elect(2, [2, 3], [1, 2, 3], to=[2, 3])
    new_leader = cluster.partition(2)
    assert new_leader.is_leader and new_leader.leader_epoch_start_offset == 3
    assert new_leader.log.leader_epoch_cache.latest_epoch == epoch
    for i in range(2):
        assert (await produce(cluster.rms[2], batch(b"n%d" % i))).error_code == 0
    # broker 1 comes back and is told to follow 2 (same epoch)
    cluster.reachable.add(1)
    await cluster.resend([1, 2, 3], to=[1])
    await until(lambda: log_bytes(cluster.partition(1)) == log_bytes(cluster.partition(2)))
    old = cluster.partition(1)
    assert log_bytes(old).startswith(committed)
    assert offsets(old) == [0, 1, 2, 3, 4]
    assert old.log.leader_epoch_cache.latest_epoch == epoch
    # and it re-joins the ISR
    await until(lambda: 1 in cluster.partition(2).isr)


async def test_truncation_converges_past_an_epoch_that_wrote_nothing(cluster: Cluster) -> None:
    """KIP-279: the leader answers with an epoch the follower never saw, and the follower's own
    latest epoch (a leadership of its own that wrote nothing) starts at its LEO."""
    await cluster.elect(1, [1, 2], [1, 2])
    assert (await produce(cluster.rms[1], batch(b"a", b"b", b"c"))).error_code == 0
    await cluster.elect(2, [2], [1, 2], to=[2])  # epoch 1: 2 leads and writes 3..4
    assert (await produce(cluster.rms[2], batch(b"d", b"e"))).error_code == 0
    await cluster.elect(1, [1], [1, 2], to=[1])  # epoch 2: 1 leads, writes nothing
    assert cluster.partition(1).log.leader_epoch_cache.entries[-1].start_offset == 3
    await cluster.elect(2, [2], [1, 2])  # epoch 3: 2 leads again, 1 follows
    assert (await produce(cluster.rms[2], batch(b"f"), acks=1)).error_code == 0
    await until(lambda: log_bytes(cluster.partition(1)) == log_bytes(cluster.partition(2)))
    entries = [
        (e.epoch, e.start_offset) for e in cluster.partition(1).log.leader_epoch_cache.entries
    ]
    assert entries == [(0, 0), (1, 3), (3, 5)]


async def test_out_of_range_follower_restarts_at_leader_log_start(cluster: Cluster) -> None:
    await cluster.elect(1, [1], [1, 2], to=[1])
    for i in range(10):
        assert (await produce(cluster.rms[1], batch(b"r%d" % i))).error_code == 0
    leader = cluster.partition(1)
    assert leader.log.maybe_increment_log_start_offset(6)  # e.g. DeleteRecords / retention
    await cluster.resend([1, 2], to=[2])
    follower = cluster.partition(2)
    await until(lambda: follower.log.log_end_offset == 10)
    assert follower.log.log_start_offset == 6
    assert offsets(follower) == [6, 7, 8, 9]
    await until(lambda: cluster.partition(1).isr == (1, 2))


async def test_becoming_leader_stops_fetching(cluster: Cluster) -> None:
    await cluster.elect(1, [1, 2], [1, 2], to=[1, 2])
    assert (await produce(cluster.rms[1], batch(b"a"))).error_code == 0
    assert cluster.managers[2].is_following((T, 0))
    await cluster.elect(2, [1, 2], [1, 2], to=[1, 2])
    assert not cluster.managers[2].is_following((T, 0))
    assert cluster.managers[2].fetchers == {}  # its fetcher for broker 1 went away
    assert cluster.managers[1].leader_of((T, 0)) == 2
    assert (await produce(cluster.rms[2], batch(b"b"))).error_code == 0
    await until(lambda: cluster.partition(1).log.log_end_offset == 2)
    # StopReplicas ends following
    resp = await cluster.rms[1].stop_replicas(
        pb.StopReplicasRequest(
            controller_id=100,
            controller_epoch=1,
            partitions=[pb.StopReplica(topic=T, partition=0, leader_epoch=-1)],
        )
    )
    assert resp.partitions[0].error_code == 0
    assert not cluster.managers[1].is_following((T, 0))


async def test_unreachable_leader_is_retried(tmp_path: Path) -> None:
    c = Cluster(tmp_path, [1, 2])
    try:
        c.reachable.discard(1)
        await c.elect(1, [1, 2], [1, 2])
        assert (await produce(c.rms[1], batch(b"a"), acks=1)).error_code == 0
        await asyncio.sleep(0.2)
        assert c.partition(2).log.log_end_offset == 0
        c.reachable.add(1)
        await until(lambda: c.partition(2).log.log_end_offset == 1, within_s=3.0)
    finally:
        await c.shutdown()


async def test_isr_conflict_with_the_controller_waits_for_its_order(cluster: Cluster) -> None:
    cluster.reachable.discard(1)  # hold the follower back until the conflict is set up
    await cluster.elect(1, [1], [1, 2])
    assert (await produce(cluster.rms[1], batch(b"a"))).error_code == 0
    # the controller moves the state on (a new epoch) and its order is not there yet
    st, _ = cluster.store.states[(T, 0)]
    cluster.store.put(T, 0, PartitionStateZk(1, st.leader_epoch + 1, [1], 1))
    cluster.reachable.add(1)
    cluster.managers[2].wake(1)
    await until(
        lambda: sample(cluster.rms[1], "kafka_server_replicamanager_failedisrupdates_total") == 1
    )
    await asyncio.sleep(0.1)  # more follower fetches: no new attempt at the same partition epoch
    p = cluster.partition(1)
    assert p.isr == (1,) and p.pending_isr is None
    assert cluster.store.writes == 0  # nothing written over the controller's state
    assert sample(cluster.rms[1], "kafka_server_replicamanager_failedisrupdates_total") == 1
    # the controller's next order arrives: 2 is added under the new version
    await cluster.elect(1, [1], [1, 2])
    await until(lambda: cluster.partition(1).isr == (1, 2))
    assert cluster.store.states[(T, 0)][0].isr == [1, 2]


async def test_isr_write_whose_answer_was_lost_is_adopted(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("services.storage.replication.isr.RETRY_AFTER_ERROR_S", 0.01)
    store = cluster.store
    real_write = store.write
    lost: list[int] = []

    async def write_then_lose_answer(
        topic: str, partition: int, state: PartitionStateZk, expected_version: int
    ) -> int:
        version = await real_write(topic, partition, state, expected_version)
        if not lost:
            lost.append(version)
            raise ConnectionError("connection loss")  # the write landed, the answer did not
        return version

    store.write = write_then_lose_answer  # type: ignore[method-assign]
    await cluster.elect(1, [1], [1, 2])
    assert (await produce(cluster.rms[1], batch(b"a"))).error_code == 0
    await until(lambda: cluster.partition(1).isr == (1, 2))
    assert cluster.partition(1).partition_epoch == lost[0] == store.states[(T, 0)][1]
    assert store.writes == 1  # adopted on re-read, not written twice
    assert sample(cluster.rms[1], "kafka_server_replicamanager_isrexpands_total") == 1


async def test_offset_for_leader_epoch_answers(cluster: Cluster) -> None:
    await cluster.elect(1, [1], [1, 2], to=[1])
    assert (await produce(cluster.rms[1], batch(b"a", b"b"))).error_code == 0
    await cluster.elect(1, [1], [1, 2], to=[1])  # epoch 1 starts at 2
    assert (await produce(cluster.rms[1], batch(b"c"))).error_code == 0
    await cluster.elect(2, [2], [1, 2], to=[2])
    await cluster.elect(1, [1], [1, 2])  # epoch 3 on broker 1 starts at 3; 2 follows

    def ask(epoch: int, current: int = -1, broker: int = 1) -> pb.EpochEndOffset:
        req = pb.OffsetForLeaderEpochRequest(
            replica_id=2,
            partitions=[
                pb.OffsetForLeaderEpochPartition(
                    topic=T, partition=0, current_leader_epoch=current, leader_epoch=epoch
                )
            ],
        )
        return offset_for_leader_epoch(cluster.rms[broker], req).partitions[0]

    def answer(r: pb.EpochEndOffset) -> tuple[int, int, int]:
        return r.error_code, r.leader_epoch, r.end_offset

    assert answer(ask(0)) == (0, 0, 2)
    assert answer(ask(1)) == (0, 1, 3)
    assert answer(ask(2)) == (0, 1, 3)  # never led epoch 2 here: the epoch below, its end
    assert answer(ask(3)) == (0, 3, 3)  # the latest epoch: the LEO
    assert answer(ask(-1)) == (0, -1, -1)  # UNDEFINED
    assert answer(ask(9)) == (0, -1, -1)  # beyond anything known: UNDEFINED
    assert ask(0, current=2).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert ask(0, current=4).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert ask(0, broker=2).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert ask(0, broker=3).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_stale_order_does_not_undo_the_leaders_isr_change(cluster: Cluster) -> None:
    await cluster.elect(1, [1], [1, 2], to=[1])
    stale_version = cluster.partition(1).partition_epoch
    await cluster.resend([1, 2], to=[2])
    await until(lambda: cluster.partition(1).isr == (1, 2))
    epoch = cluster.partition(1).leader_epoch
    resp = await cluster.rms[1].update_partitions(
        pb.UpdatePartitionsRequest(
            controller_id=100,
            controller_epoch=1,
            partitions=[
                pb.PartitionState(
                    topic=T,
                    partition=0,
                    leader=1,
                    leader_epoch=epoch,
                    isr=[1],
                    replicas=[1, 2],
                    partition_epoch=stale_version,
                )
            ],
        )
    )
    assert resp.partitions[0].error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert cluster.partition(1).isr == (1, 2)


# ---- fetch sessions (KIP-227) ---------------------------------------------------------------------
def quiet(cluster: Cluster, leader: int, follower: int, *keys: tuple[str, int]) -> bool:
    """``keys`` are settled in the follower's session on ``leader`` (its fetches visit nothing)."""
    s = cluster.rms[leader].fetch_sessions.of_replica(follower)
    return s is not None and all(k in s.partitions and s.partitions[k].quiet for k in keys)


def fetches_of(cluster: Cluster, follower: int, since: int = 0) -> list[Sent]:
    return [r for r in cluster.sent[since:] if r.replica_id == follower]


async def test_follower_session_goes_incremental_adds_forgets_and_reopens(cluster: Cluster) -> None:
    p0, p1 = (T, 0), (T, 1)
    await cluster.elect(1, [1, 2, 3], [1, 2, 3])
    assert (await produce(cluster.rms[1], batch(b"a"))).error_code == 0
    await until(lambda: quiet(cluster, 1, 2, p0) and quiet(cluster, 1, 3, p0))
    first = fetches_of(cluster, 2)[0]
    assert (first.session_id, first.session_epoch, first.listed) == (0, 0, [p0])  # full
    session = cluster.rms[1].fetch_sessions.of_replica(2)
    assert session is not None
    # idle: incremental fetches of the session, in epoch order, listing nothing
    mark = len(cluster.sent)
    await asyncio.sleep(0.3)
    idle = fetches_of(cluster, 2, mark)
    assert len(idle) >= 2
    assert all((r.session_id, r.listed, r.forgotten) == (session.id, [], []) for r in idle)
    epochs = [r.session_epoch for r in idle]
    assert epochs == list(range(epochs[0], epochs[0] + len(epochs))) and epochs[0] >= 1
    # data: the follower lists the partition again only once its fetch offset moved
    mark = len(cluster.sent)
    assert (await produce(cluster.rms[1], batch(b"b"))).error_code == 0
    await until(lambda: quiet(cluster, 1, 2, p0) and cluster.partition(2).high_watermark == 2)
    assert [r.listed for r in fetches_of(cluster, 2, mark) if r.listed] == [[p0]]
    # a partition added to the session (its order interrupts a parked fetch): only it is listed
    mark = len(cluster.sent)
    await cluster.elect(1, [1, 2, 3], [1, 2, 3], partition=1)
    assert (await produce(cluster.rms[1], batch(b"c"), partition=1)).error_code == 0
    await until(lambda: quiet(cluster, 1, 2, p0, p1))
    added = fetches_of(cluster, 2, mark)
    assert all(r.session_id == session.id for r in added), added
    assert [r.listed for r in added if r.listed][0] == [p1]
    assert all(p0 not in r.listed for r in added)
    # removed: forgotten by the session
    mark = len(cluster.sent)
    cluster.managers[2].unfollow([p1])
    await until(lambda: p1 not in session.partitions)
    assert [r.forgotten for r in fetches_of(cluster, 2, mark) if r.forgotten] == [[p1]]
    # the leader lost the session (evicted): FETCH_SESSION_ID_NOT_FOUND, then a full fetch
    mark = len(cluster.sent)
    sessions = cluster.rms[1].fetch_sessions
    sessions.evict_idle(cluster.clock() + sessions.evict_ms + 1)
    await until(lambda: quiet(cluster, 1, 2, p0) and sessions.of_replica(2) is not session)
    again = fetches_of(cluster, 2, mark)
    refused = [r for r in again if r.error_code]
    assert refused and refused[0].error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    full = again[again.index(refused[0]) + 1]
    assert (full.session_id, full.session_epoch, full.listed) == (0, 0, [p0])
    # an epoch the leader does not expect: INVALID_FETCH_SESSION_EPOCH, then a full fetch
    reopened = sessions.of_replica(2)
    assert reopened is not None
    mark = len(cluster.sent)
    reopened.epoch += 5
    await until(lambda: sessions.of_replica(2) not in (None, reopened) and quiet(cluster, 1, 2, p0))
    codes = [r.error_code for r in fetches_of(cluster, 2, mark) if r.error_code]
    assert codes[0] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # and replication goes on: acks=all completes at once
    started = time.monotonic()
    assert (await produce(cluster.rms[1], batch(b"d"))).error_code == 0
    assert time.monotonic() - started < 1.0
    await until(lambda: cluster.partition(2).log.log_end_offset == 3)
    # the follower's own log start moved (its retention): its next fetch tells the leader
    await until(lambda: quiet(cluster, 1, 2, p0) and cluster.partition(2).high_watermark == 3)
    assert cluster.partition(2).log.maybe_increment_log_start_offset(2)
    cluster.managers[2].log_start_moved([p0])
    await until(lambda: cluster.partition(1).remote[2].log_start_offset == 2)


async def test_quiet_follower_stays_caught_up_and_a_silent_one_leaves_the_isr(
    cluster: Cluster,
) -> None:
    """The ISR catch: a caught-up follower whose fetches keep coming has no per-partition
    fetch state updates while quiet, yet counts as caught up when the next append comes; one
    whose fetches stopped (its session still open) leaves the ISR after the lag time."""
    p0 = (T, 0)
    await cluster.elect(1, [1, 2, 3], [1, 2, 3])
    assert (await produce(cluster.rms[1], batch(b"a"))).error_code == 0
    await until(lambda: quiet(cluster, 1, 2, p0) and quiet(cluster, 1, 3, p0))
    leader = cluster.partition(1)
    sessions = cluster.rms[1].fetch_sessions

    async def fetched_since_jump(*followers: int) -> int:
        cluster.clock.offset_ms += LAG_MS + 1000
        jumped = cluster.clock()
        await until(
            lambda: all(
                (s := sessions.of_replica(b)) is not None and s.last_fetch_ms >= jumped
                for b in followers
            )
        )
        return jumped

    # a quiet spell longer than replica.lag.time.max.ms, fetches arriving all along
    jumped = await fetched_since_jump(2, 3)
    assert all(leader.remote[b].last_caught_up_time_ms < jumped - LAG_MS for b in (2, 3))
    pending = asyncio.ensure_future(produce(cluster.rms[1], batch(b"b")))
    await asyncio.sleep(0)  # appended; the followers have not fetched it yet
    assert leader.log.log_end_offset == 2 and leader.high_watermark == 1
    assert cluster.isr[1].maybe_shrink_all() == 0  # without the catch-up both would go
    assert all(leader.remote[b].last_caught_up_time_ms >= jumped for b in (2, 3))
    assert (await asyncio.wait_for(pending, 2.0)).error_code == 0  # acks=all: both fetched it
    assert leader.high_watermark == 2 and leader.isr == (1, 2, 3)
    await until(lambda: quiet(cluster, 1, 2, p0) and quiet(cluster, 1, 3, p0))
    # follower 3's fetches stop (its session stays open on the leader)
    stopped = sessions.of_replica(3)
    assert stopped is not None
    await cluster.managers[3].close()
    assert p0 in stopped.partitions  # cancelled at once: nothing forgotten
    await fetched_since_jump(2)
    pending = asyncio.ensure_future(produce(cluster.rms[1], batch(b"c")))
    await asyncio.sleep(0)
    assert sessions.of_replica(3) is stopped
    assert cluster.isr[1].maybe_shrink_all() == 1
    assert (await asyncio.wait_for(pending, 2.0)).error_code == 0
    assert leader.isr == (1, 2) and leader.high_watermark == 3


async def test_followed_again_while_its_truncation_waits_for_the_leaders_address(
    cluster: Cluster,
) -> None:
    # a new replica (empty log) gets two orders in a row (e.g. a reassignment finished by a new
    # controller): the first one's truncation must not end the second one's
    await cluster.elect(1, [1], [1, 2], to=[1])
    for i in range(3):
        assert (await produce(cluster.rms[1], batch(b"x%d" % i))).error_code == 0
    cluster.lookups_held = asyncio.Event()
    await cluster.resend([1, 2], to=[2])
    fetcher = cluster.managers[2].fetchers[1]
    first = fetcher.states[(T, 0)]
    await asyncio.sleep(0.05)  # its fetcher waits for the leader's address, to truncate
    await cluster.elect(1, [1], [1, 2])
    assert fetcher.states[(T, 0)] is not first
    cluster.lookups_held.set()
    await until(lambda: cluster.partition(2).log.log_end_offset == 3)
    await until(lambda: cluster.partition(1).isr == (1, 2))


async def test_follower_dropped_from_the_isr_by_a_new_epoch_does_not_hold_the_hw(
    cluster: Cluster,
) -> None:
    """D78's stall: follower 3 dies while its partition is quiet in its session on the leader;
    the controller drops it from the ISR with a new leader epoch (its caught-up time is reset).
    The leader's marks of the quiet partition must not bring it back as "caught up at its last
    fetch" (within replica.lag.time.max.ms, the HW would wait for it): acks=all writes complete
    with follower 2 alone."""
    p0 = (T, 0)
    await cluster.elect(1, [1, 2, 3], [1, 2, 3], config={"min.insync.replicas": "2"})
    assert (await produce(cluster.rms[1], batch(b"a"))).error_code == 0
    await until(lambda: quiet(cluster, 1, 2, p0) and quiet(cluster, 1, 3, p0))
    await cluster.managers[3].close()  # kill -9: its session stays open on the leader
    await cluster.elect(1, [1, 2], [1, 2, 3], to=[1, 2], config={"min.insync.replicas": "2"})
    leader = cluster.partition(1)
    assert leader.isr == (1, 2) and leader.remote[3].last_caught_up_time_ms == 0
    r = await produce(cluster.rms[1], batch(b"b"), timeout_ms=2000)
    assert r.error_code == 0
    assert leader.high_watermark == 2
    assert leader.remote[3].last_caught_up_time_ms == 0  # still not counted for the HW


async def test_leader_timeouts_while_partitions_back_off_then_every_partition_rejoins(
    cluster: Cluster,
) -> None:
    """The follower's sets after a leader's fetches time out (DEADLINE_EXCEEDED: the session
    restarts, ``_dirty`` is cleared) while some partitions back off on their own: once the leader
    answers again, every followed partition is fetched and rejoins the ISR."""
    parts = range(4)
    for p in parts:
        await cluster.elect(1, [1, 2, 3], [1, 2, 3], partition=p)
        assert (await produce(cluster.rms[1], batch(b"a"), partition=p)).error_code == 0
    keys = [(T, p) for p in parts]
    await until(lambda: quiet(cluster, 1, 2, *keys) and quiet(cluster, 1, 3, *keys))
    # partitions 0 and 1: a new epoch reaches the followers before the leader, so the leader
    # answers UNKNOWN_LEADER_EPOCH and they back off on their own
    for p in (0, 1):
        await cluster.elect(1, [1, 2, 3], [1, 2, 3], to=[2, 3], partition=p)
    fetcher = cluster.managers[2].fetchers[1]
    await until(lambda: {(T, 0), (T, 1)} <= fetcher._waiting)
    cluster.stalled.add(1)  # then the leader's fetches time out
    for p in parts:
        assert (await produce(cluster.rms[1], batch(b"b"), acks=1, partition=p)).error_code == 0
    await asyncio.sleep(0.5)  # several timeouts and backoffs
    cluster.isr[1].maybe_shrink_all()
    cluster.clock.offset_ms += LAG_MS + 1
    # both followers lagging: a shrink starts on each (2 and 3 leave the ISR of 2 and 3; the
    # shrinks of 0 and 1 meet the controller's newer state, which the leader's order brings)
    assert cluster.isr[1].maybe_shrink_all() == 4
    cluster.stalled.discard(1)
    await cluster.resend([1, 2, 3], to=[1], partition=0)  # the leader's orders arrive
    await cluster.resend([1, 2, 3], to=[1], partition=1)

    def rejoined(p: int) -> bool:
        leader = cluster.partition(1, p)
        return (
            sorted(leader.isr) == [1, 2, 3]
            and leader.high_watermark == 2
            and all(cluster.partition(b, p).log.log_end_offset == 2 for b in (2, 3))
        )

    await until(lambda: all(rejoined(p) for p in parts), within_s=5)
