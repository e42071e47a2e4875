"""Controlled shutdown (issue 13 §2): the controller's ControlledShutdown RPC and the storage
node's SIGTERM path, on one real cluster (ZooKeeper, a controller, 3 storage nodes, a gateway).

In order, on one cluster: the RPC's refusals (unknown broker, stale broker epoch); a controlled
shutdown of node 1 through the RPC (it leads nothing and is out of every ISR afterwards, and
stays out: it stopped fetching); node 2's controlled shutdown with a partition it is the only
in-sync replica of (answered as remaining; not retriable, its other replica shutting down too),
so node 2's own SIGTERM stops after one attempt; restarted nodes rejoin every ISR; without a
controller a SIGTERM tries ``controlled.shutdown.max.retries`` times, then stops anyway; and
with ``controlled.shutdown.enable=false`` a SIGTERM stops a node that still leads.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from confluent_kafka import ElectionType, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from services.cli.rolling_restart import ClusterView, PartitionView
from services.common.errors import ErrorCode
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.common.rpc.kafkapy.v1 import controller_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kafka_support import running_cluster, wait_for, wait_for_topic  # noqa: E402  # isort: skip

pytestmark = pytest.mark.integration

BACKOFF_MS = 300
RETRIES = 3
TOPIC = "cs-rf3"
SOLE = "cs-rf2"  # replicas [2, 1]: once node 1 left its ISR, node 2 is its only member


@pytest.fixture
def cs_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path,
        start_timeout=120,
        gateways=1,
        storage_nodes=3,
        controllers=1,
        group_coordinators=0,
        extra={
            "storage": [
                "--controlled.shutdown.retry.backoff.ms", str(BACKOFF_MS),
                "--controlled.shutdown.max.retries", str(RETRIES),
            ],
            # the test moves leaders itself: no automatic preferred election in between
            "controller": ["--auto.leader.rebalance.enable", "false"],
        },
    ) as cluster:  # fmt: skip
        yield cluster


def _states(cluster: LocalCluster) -> dict[tuple[str, int], PartitionView]:
    view = ClusterView(cluster.zk_connect)
    try:
        return {tp: v for tp, v in view.partitions().items() if tp[0] in (TOPIC, SOLE)}
    finally:
        view.close()


def _broker_epoch(cluster: LocalCluster, broker_id: int) -> int:
    zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
    zk.start(timeout=10)
    try:
        return int(zk.exists(f"/brokers/ids/{broker_id}").czxid)
    finally:
        zk.stop()
        zk.close()


def _shutdown_rpc(
    cluster: LocalCluster, broker_id: int, epoch: int
) -> pb.ControlledShutdownResponse:
    with grpc.insecure_channel(cluster.address("controller", 0)) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        req = pb.ControlledShutdownRequest(
            broker_id=broker_id, broker_epoch=epoch, timeout_ms=10000
        )
        resp: pb.ControlledShutdownResponse = stub.ControlledShutdown(req, timeout=30)
        return resp


def _log_events(cluster: LocalCluster, index: int, event: str) -> list[dict[str, object]]:
    out = []
    for line in cluster.log_path("storage", index).read_text().splitlines():
        if event in line and line.startswith("{"):
            body = json.loads(line)
            if body.get("event") == event:
                out.append(body)
    return out


def _metric(cluster: LocalCluster, name: str) -> float:
    url = cluster.admin_url("controller", 0) + "/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()  # noqa: S310 - loopback
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def _all_in_sync(cluster: LocalCluster) -> bool:
    return all(not v.under_replicated for v in _states(cluster).values())


def _restart(cluster: LocalCluster, index: int) -> None:
    cluster.kill("storage", index, signal.SIGTERM)
    assert cluster.wait_exit("storage", index, timeout=30) == 0
    cluster.start_process("storage", index, timeout=60)


@pytest.mark.timeout(300)
def test_controlled_shutdown_moves_leaders_and_isrs(cs_cluster: LocalCluster) -> None:
    cluster = cs_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(TOPIC, 6, 3, config={"min.insync.replicas": "2"}),
            NewTopic(SOLE, num_partitions=1, replica_assignment=[[2, 1]]),
        ]
    )
    for fut in futures.values():
        fut.result(timeout=60)
    wait_for_topic(admin, TOPIC, 6)
    wait_for_topic(admin, SOLE, 1)
    wait_for("every ISR full", lambda: _all_in_sync(cluster), timeout=30)
    before = _states(cluster)

    # refusals, as Kafka's controller answers them
    unknown = _shutdown_rpc(cluster, 99, -1)
    assert unknown.error_code == ErrorCode.BROKER_NOT_AVAILABLE, unknown
    epoch1 = _broker_epoch(cluster, 1)
    stale = _shutdown_rpc(cluster, 1, epoch1 - 1)
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH, stale
    assert _states(cluster) == before, "a refused request changed partition states"

    # node 1: every leadership moves, it leaves every ISR, each change with a new leader epoch
    resp = _shutdown_rpc(cluster, 1, epoch1)
    assert resp.error_code == ErrorCode.NONE and not resp.remaining_partitions, resp
    after = _states(cluster)
    for tp, v in after.items():
        assert v.leader != 1, (tp, v)
        assert 1 not in v.isr, (tp, v)
        assert len(v.isr) >= 1
        if before[tp].leader == 1:  # the first other in-sync replica in assignment order
            assert v.leader == next(r for r in v.replicas if r != 1 and r in before[tp].isr)
    assert any(before[tp].leader == 1 for tp in before), "node 1 led nothing to move"
    # producers with acks=all still write (ISR 2 of 3 = min.insync.replicas)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    errors: list[object] = []
    for i in range(60):
        producer.produce(
            TOPIC,
            f"v{i}".encode(),
            partition=i % 6,
            on_delivery=lambda e, _m: errors.append(e) if e else None,
        )
    assert producer.flush(30) == 0 and not errors, errors
    # node 1 stopped fetching (StopReplicas): it does not rejoin an ISR while it shuts down
    time.sleep(2.0)  # a few follower fetch rounds
    assert all(1 not in v.isr for v in _states(cluster).values()), _states(cluster)

    # node 2 is the only in-sync replica of SOLE-0: it stays leader, answered as remaining; its
    # other replica (node 1) is shutting down too, so retrying cannot help: not retriable
    resp2 = _shutdown_rpc(cluster, 2, _broker_epoch(cluster, 2))
    assert resp2.error_code == ErrorCode.NONE, resp2
    assert [(p.topic, p.partition) for p in resp2.remaining_partitions] == [(SOLE, 0)]
    assert not resp2.retriable
    states = _states(cluster)
    assert states[(SOLE, 0)].leader == 2 and states[(SOLE, 0)].isr == (2,)
    assert all(v.leader == 0 and v.isr == (0,) for tp, v in states.items() if tp[0] == TOPIC)
    # node 1, still shutting down, got node 0's new states like any replica and follows again:
    # caught up, it still stays out of every ISR (KIP-841), as does node 2
    time.sleep(2.0)
    states = _states(cluster)
    assert all(v.isr == (0,) for tp, v in states.items() if tp[0] == TOPIC), states
    # the two requests handled (the refusals are not timed), as Kafka's ControlledShutdownRateAndTimeMs
    assert (
        _metric(cluster, "kafka_controller_controllerstats_controlledshutdownrateandtimems_count")
        == 2
    )

    # node 2's own SIGTERM: the same answer, so it stops after one attempt, still leading it
    cluster.kill("storage", 2, signal.SIGTERM)
    assert cluster.wait_exit("storage", 2, timeout=30) == 0
    assert len(_log_events(cluster, 2, "remaining partitions to move")) == 1
    assert _log_events(
        cluster, 2, "no other live replica can lead the remaining partitions: proceeding to stop"
    )
    assert _log_events(cluster, 2, "deregistering")[-1]["leaders"] == 1

    # restarted nodes rejoin every ISR; node 1's own SIGTERM finds nothing left to move
    cluster.start_process("storage", 2, timeout=60)
    _restart(cluster, 1)
    assert _log_events(cluster, 1, "controlled shutdown succeeded")
    assert _log_events(cluster, 1, "deregistering")[-1]["leaders"] == 0
    wait_for("every ISR full after the restarts", lambda: _all_in_sync(cluster), timeout=60)

    # no controller to answer: max.retries attempts, backoff apart, then the node stops anyway
    cluster.kill("controller", 0, signal.SIGKILL)
    started = time.monotonic()
    cluster.kill("storage", 1, signal.SIGTERM)
    assert cluster.wait_exit("storage", 1, timeout=30) == 0
    took = time.monotonic() - started
    failed = _log_events(cluster, 1, "controlled shutdown attempt failed")
    assert [e["attempt"] for e in failed] == list(range(1, RETRIES + 1)), failed
    assert took >= (RETRIES - 1) * BACKOFF_MS / 1000
    assert _log_events(
        cluster,
        1,
        "proceeding to do an unclean shutdown as all the controlled shutdown attempts failed",
    )
    cluster.start_process("controller", 0, timeout=60)
    cluster.start_process("storage", 1, timeout=60)
    wait_for("every ISR full with the controller back", lambda: _all_in_sync(cluster), timeout=60)

    # controlled.shutdown.enable=false: a plain stop, node 0 still leads when it deregisters
    normal = list(cluster.extra["storage"])
    cluster.extra["storage"] = [*normal, "--controlled.shutdown.enable", "false"]
    try:
        _restart(cluster, 0)  # stopped the controlled way, back with the flag
    finally:
        cluster.extra["storage"] = normal
    wait_for("every ISR full", lambda: _all_in_sync(cluster), timeout=60)

    def node0_leads() -> list[tuple[str, int]]:
        # the controller learns of ISR expansions a moment after ZooKeeper shows them: a
        # refused election (PREFERRED_LEADER_NOT_AVAILABLE) is asked again
        admin.elect_leaders(
            ElectionType.PREFERRED, [KafkaTopicPartition(TOPIC, p) for p in range(6)]
        ).result(timeout=30)
        return [tp for tp, v in _states(cluster).items() if v.leader == 0]

    led = wait_for("node 0 leading its preferred partitions", node0_leads, timeout=30, interval=1)
    controlled = len(_log_events(cluster, 0, "starting controlled shutdown"))
    cluster.kill("storage", 0, signal.SIGTERM)
    assert cluster.wait_exit("storage", 0, timeout=30) == 0
    assert _log_events(
        cluster, 0, "controlled shutdown disabled (controlled.shutdown.enable=false)"
    )
    assert _log_events(cluster, 0, "deregistering")[-1]["leaders"] == len(led)
    assert len(_log_events(cluster, 0, "starting controlled shutdown")) == controlled
    cluster.start_process("storage", 0, timeout=60)
    wait_for("every ISR full at the end", lambda: _all_in_sync(cluster), timeout=60)
