"""Replication throttles: the token bucket, the throttled-replica lists, and leader-side and
follower-side throttling between in-process replica managers over the real log engine (the
harness of test_replication_fetcher)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.topic_config import LONG_MAX
from services.storage.appends import append
from services.storage.log_dir_info import describe_log_dirs
from services.storage.metrics import StorageMetrics
from services.storage.replica_manager import ReplicaManager
from services.storage.replication.quota import ReplicationQuotas, TokenBucket, throttled_partitions
from tests.unit.storage.test_replication_fetcher import (
    Cluster,
    T,
    batch,
    log_bytes,
    produce,
    until,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_records_then_refills_at_its_rate() -> None:
    clock = FakeClock()
    b = TokenBucket(1000, clock)
    assert not b.exceeded()  # one second saved up
    b.record(1500)
    assert b.exceeded() and b.wait_s() == pytest.approx(0.5)
    clock.now += 0.5
    assert not b.exceeded()
    clock.now += 100  # never more than one second's worth saved
    b.record(1001)
    assert b.exceeded()
    b.set_rate(LONG_MAX)  # unlimited at once
    assert not b.exceeded() and b.wait_s() == 0
    b.set_rate(0)
    b.record(1)
    clock.now += 1000
    assert b.exceeded()  # a rate of 0 never refills


def test_throttled_replica_lists_name_this_broker() -> None:
    assert throttled_partitions(["0:1", "1:2", "3:1"], 1) == {0, 3}
    assert throttled_partitions(["0:1", "1:2"], 3) == frozenset()
    assert throttled_partitions(["*"], 7) is None
    metrics = StorageMetrics(CollectorRegistry())
    q = ReplicationQuotas(
        2, metrics.replication_throttled_bytes, metrics.replication_throttled_holds
    ).follower
    assert q.is_throttled("t", 1, {"follower.replication.throttled.replicas": ["1:2"]})
    assert not q.is_throttled("t", 0, {"follower.replication.throttled.replicas": ["1:2"]})
    assert q.is_throttled("u", 5, {"follower.replication.throttled.replicas": ["*"]})
    assert not q.is_throttled("t", 1, {"leader.replication.throttled.replicas": ["1:2"]})


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path, [1, 2], max_bytes=20_000)  # one batch per partition and fetch
    yield c
    await c.shutdown()


def throttled_bytes(rm: ReplicaManager, role: str) -> float:
    value = rm.metrics.registry.get_sample_value(
        "kafkapy_replication_throttled_bytes_total", {"role": role, "topic": T}
    )
    return value or 0.0


async def _lagging_follower(cluster: Cluster, config: dict[str, str]) -> None:
    """Partitions 0 (throttled by ``config``) and 1 (not), written by leader 1 while follower 2
    had no order; then 2 gets its order (out of the ISR, 3 batches of 20 KB behind)."""
    for partition in (0, 1):
        await cluster.elect(1, [1], [1, 2], to=[1], partition=partition, config=config)
    rm = cluster.rms[1]
    for i in range(3):
        for partition in (0, 1):
            records = batch(bytes([i]) * 20_000)
            resp = await _produce_to(rm, partition, records)
            assert resp.error_code == 0
    for partition in (0, 1):
        await cluster.resend([1, 2], to=[2], partition=partition, config=config)


async def _produce_to(
    rm: ReplicaManager, partition: int, records: bytes
) -> pb.PartitionAppendResult:
    resp = await append(
        rm,
        pb.AppendRequest(
            acks=1,
            timeout_ms=5000,
            partitions=[
                pb.PartitionAppend(
                    topic=T, partition=partition, records=records, current_leader_epoch=-1
                )
            ],
        ),
    )
    return resp.partitions[0]


@pytest.mark.parametrize("side", ["leader", "follower"])
async def test_only_throttled_replicas_wait_and_a_new_rate_applies_at_once(
    cluster: Cluster, side: str
) -> None:
    leader, follower = cluster.rms[1], cluster.rms[2]
    throttling = leader if side == "leader" else follower
    # rate 0: the first fetch of a throttled partition passes, then it waits for tokens
    throttling.quotas.set_rates(*((0, LONG_MAX) if side == "leader" else (LONG_MAX, 0)))
    config = {
        "leader.replication.throttled.replicas": "0:1",
        "follower.replication.throttled.replicas": "0:2",
    }
    await _lagging_follower(cluster, config)
    p0, p1 = cluster.partition(2, 0), cluster.partition(2, 1)
    await until(lambda: p1.log.log_end_offset == 3)  # never throttled: caught up
    await until(lambda: p0.log.log_end_offset >= 1)
    holds = "kafkapy_replication_throttled_holds_total"
    await until(
        lambda: (throttling.metrics.registry.get_sample_value(holds, {"role": side}) or 0) > 3
    )
    assert p0.log.log_end_offset < 3  # held back while the quota is exceeded
    assert log_bytes(p1) == log_bytes(cluster.partition(1, 1))
    # the bytes counted are partition 0's (the throttled one), never partition 1's
    counted = throttled_bytes(throttling, side)
    assert 0 < counted <= len(log_bytes(p0)) + 1  # + nothing of partition 1
    assert throttled_bytes(leader if side == "follower" else follower, side) == 0
    # the operator lifts the rate (a dynamic broker config): it catches up without a restart
    throttling.quotas.set_rates(LONG_MAX, LONG_MAX)
    await until(lambda: p0.log.log_end_offset == 3)
    assert log_bytes(p0) == log_bytes(cluster.partition(1, 0))
    if side == "follower":
        assert throttled_bytes(follower, "follower") == len(log_bytes(p0))
    await until(lambda: sorted(cluster.partition(1, 0).isr) == [1, 2])

    # an in-sync replica is never held back, even at rate 0 and with the quota exceeded
    throttling.quotas.set_rates(0, 0)
    throttling.quotas.leader.record(T, 1)
    throttling.quotas.follower.record(T, 1)
    r = await produce(leader, batch(b"in-sync" * 1000), acks=-1)
    assert r.error_code == 0
    await until(lambda: p0.log.log_end_offset == 4)

    # DescribeLogDirs on the follower: sizes of both replicas, lag 0 once caught up
    resp = await describe_log_dirs(follower, pb.DescribeLogDirsRequest(all_topics=True))
    (d,) = resp.log_dirs
    sizes = {(r.topic, r.partition): (r.size, r.offset_lag) for r in d.replicas}
    assert sizes[(T, 1)] == (len(log_bytes(p1)), 0)
    assert sizes[(T, 0)][0] == len(log_bytes(p0))
    assert d.total_bytes > 0 and d.usable_bytes > 0 and d.error_code == 0
    only = await describe_log_dirs(
        follower,
        pb.DescribeLogDirsRequest(topics=[pb.DescribeLogDirsTopic(topic=T, partitions=[1])]),
    )
    assert [(r.topic, r.partition) for r in only.log_dirs[0].replicas] == [(T, 1)]
