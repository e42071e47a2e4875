"""Replication with the real services: RF 3, min.insync.replicas 2, acks=all + idempotence.

kill -9 of the leader storage node while a producer keeps writing: the controller elects a new
leader from the ISR, every acknowledged record is readable exactly once, in order; the killed
node comes back, truncates against the new leader, catches up and re-joins the ISR.
"""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from tests.e2e.checker import Checker, evidence_dir
from tests.integration.kafka_support import (
    consume_confluent,
    gateway_requests,
    running_cluster,
    wait_for,
)

pytestmark = pytest.mark.e2e

TOPIC = "replicated"
LAG_MS = 3000
FIRST_BATCH = 5000
RATE = 2000.0  # records per second of the writer


def _cluster(tmp_path: Path, *controller_flags: str) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path,
        gateways=1,
        storage_nodes=3,
        controllers=1,
        extra={
            "storage": ["--replica.lag.time.max.ms", str(LAG_MS)],
            # the live consumer is a group member: few __consumer_offsets partitions keep a
            # storage node's restart about this test's topic
            "controller": ["--offsets.topic.num.partitions", "3", *controller_flags],
        },
    ) as c:
        yield c


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from _cluster(tmp_path)


@pytest.fixture
def balancing_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from _cluster(tmp_path, "--leader.imbalance.check.interval.seconds", "2")


@pytest.fixture
def manual_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    yield from _cluster(tmp_path, "--auto.leader.rebalance.enable", "false")


def partition_state(zk: KazooClient) -> dict[str, Any]:
    data, _ = zk.get(f"/brokers/topics/{TOPIC}/partitions/0/state")
    state: dict[str, Any] = json.loads(data)
    return state


def live_checker(cluster: LocalCluster, tmp_path: Path, name: str) -> Checker:
    """The shared checker on TOPIC: one idempotent acks=all confluent-kafka writer and a
    one-member group reading (and committing) through the failover."""
    checker = Checker(
        cluster,
        TOPIC,
        evidence=evidence_dir(tmp_path, name),
        writers=[("c0", "confluent-kafka", RATE)],
        group="live",
        group_members=1,
    )
    checker.use_topic(1)
    return checker


def log_end_offset(cluster: LocalCluster, broker: int) -> int | None:
    with urllib.request.urlopen(cluster.admin_url("storage", broker) + "/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(
        rf'kafka_log_log_logendoffset\{{partition="0",topic="{TOPIC}"\}} (\S+)', text
    ) or re.search(rf'kafka_log_log_logendoffset\{{topic="{TOPIC}",partition="0"\}} (\S+)', text)
    return int(float(m.group(1))) if m else None


def replicated_topic(cluster: LocalCluster) -> KazooClient:
    """Create TOPIC (1 partition, RF 3, min.insync.replicas 2); a ZooKeeper client once its
    three replicas are in sync."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(
        30
    )
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(10)
    wait_for(
        "the partition state with every replica in sync",
        lambda: (
            zk.exists(f"/brokers/topics/{TOPIC}/partitions/0/state")
            and sorted(partition_state(zk)["isr"]) == [0, 1, 2]
        ),
        15,
    )
    return zk


def test_leader_failover_and_rejoin(cluster: LocalCluster, tmp_path: Path) -> None:
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    zk = replicated_topic(cluster)
    try:
        checker = live_checker(cluster, tmp_path, "leader-failover")
        checker.start()
        writer, group = checker.writers[0], checker.group
        assert group is not None
        # 1. 5,000 records with acks=all over RF 3, read by the live group member
        first_s = writer.wait_acks(FIRST_BATCH)
        # after the leader change librdkafka checks its position with OffsetForLeaderEpoch
        # (KIP-320) before it fetches on
        wait_for("the live consumer to catch up", lambda: group.read >= FIRST_BATCH, 30)
        epoch_requests_before = gateway_requests(cluster, "OffsetForLeaderEpoch")

        # 2. kill -9 the leader while producing continues
        victim = partition_state(zk)["leader"]
        old_epoch = partition_state(zk)["leader_epoch"]
        acks_at_kill = writer.acks
        killed_at = time.monotonic()
        cluster.kill("storage", victim, signal.SIGKILL)
        checker.fault(f"kill -9 storage-{victim} (the leader)")
        new_state = wait_for(
            "a new leader",
            lambda: (s := partition_state(zk))["leader"] not in (victim, -1) and s,
            20,
        )
        elected_s = time.monotonic() - killed_at
        assert new_state["leader_epoch"] > old_epoch
        assert victim not in new_state["isr"] and len(new_state["isr"]) == 2
        new_leader = new_state["leader"]
        acks_at_election = writer.acks
        wait_for("acks after the kill", lambda: writer.acks > acks_at_kill, 20)
        first_ack_s = time.monotonic() - killed_at
        wait_for("acks on the new leader", lambda: writer.acks > acks_at_election, 20)
        resumed_s = time.monotonic() - killed_at

        # describe shows the new leader and the shrunk ISR
        def described() -> Any:
            md = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]
            return md if md.leader != -1 and sorted(md.isrs) == sorted(new_state["isr"]) else None

        md = wait_for("metadata with the new ISR", described, 10)
        assert victim not in md.isrs and sorted(md.replicas) == [0, 1, 2]
        time.sleep(1.0)  # keep producing on the new leader for a while

        # 3. restart the killed node: it truncates, catches up and re-joins the ISR
        restarted_at = time.monotonic()
        cluster.start_process("storage", victim)
        checker.note(f"storage-{victim} restarted", "nemesis")
        rejoined = wait_for(
            "the restarted node back in the ISR",
            lambda: victim in (s := partition_state(zk))["isr"] and s,
            30,
        )
        rejoin_s = time.monotonic() - restarted_at
        assert (
            rejoined["leader"] == new_leader
            and rejoined["leader_epoch"] == new_state["leader_epoch"]
        )  # an ISR change by the leader: same leader epoch

        # every acknowledged record exactly once, in order, in both final reads; the live
        # member read on through the failover to the end, nothing it read or committed is off
        outcome = checker.finish()
        outcome.assert_ok()
        # (librdkafka asks v2 of it; kafka-py advertises v2-v4)
        epoch_requests = gateway_requests(cluster, "OffsetForLeaderEpoch")
        assert epoch_requests.get(2, 0) > epoch_requests_before.get(2, 0), epoch_requests

        # the restarted node holds the same log as the leader
        wait_for(
            "the restarted node at the leader's log end",
            lambda: log_end_offset(cluster, victim) == log_end_offset(cluster, new_leader),
            15,
        )
        # the controller consumed the leader's ISR change notifications
        wait_for(
            "the ISR change notifications to be processed",
            lambda: zk.get_children("/isr_change_notification") == [],
            10,
        )
        node_log = cluster.log_path("storage", victim).read_text()
        assert "became follower" in node_log and "fetching" in node_log
        print(
            f"\nfailover: first {FIRST_BATCH} acks=all in {first_s * 1000:.0f} ms; "
            f"new leader {new_leader} elected {elected_s:.2f}s after kill -9 of {victim}; "
            f"first ack after kill {first_ack_s:.2f}s, acks on the new leader from "
            f"{resumed_s:.2f}s; rejoined ISR {rejoin_s:.2f}s after restart; "
            f"{outcome.history.counts()['acked']} records acked, all read back once"
        )
    finally:
        zk.stop()
        zk.close()


def test_leadership_returns_to_the_preferred_replica_under_load(
    balancing_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Leader moves while both leaders are alive: the old leader becomes a follower with
    produce requests in flight. No acknowledged record is lost or duplicated."""
    cluster = balancing_cluster
    zk = replicated_topic(cluster)
    try:
        assignment = json.loads(zk.get(f"/brokers/topics/{TOPIC}")[0])["partitions"]["0"]
        preferred = assignment[0]
        wait_for("the preferred leader", lambda: partition_state(zk)["leader"] == preferred, 10)

        checker = live_checker(cluster, tmp_path, "preferred-leader")
        checker.start()
        writer = checker.writers[0]
        time.sleep(1.0)

        # the preferred leader dies; another replica leads
        cluster.kill("storage", preferred, signal.SIGKILL)
        checker.fault(f"kill -9 storage-{preferred} (the preferred leader)")
        moved = wait_for(
            "a new leader",
            lambda: (s := partition_state(zk))["leader"] not in (preferred, -1) and s,
            20,
        )
        time.sleep(1.0)
        # back and in sync, it is made leader again by the controller, not by a failure
        cluster.start_process("storage", preferred)
        checker.note(f"storage-{preferred} restarted", "nemesis")
        back = wait_for(
            "the preferred replica leading again",
            lambda: (s := partition_state(zk))["leader"] == preferred and s,
            40,
        )
        assert back["leader_epoch"] == moved["leader_epoch"] + 1
        assert sorted(back["isr"]) == [0, 1, 2]
        assert cluster.exited() == {}, "no node died in the move"
        acked_before_move = writer.acks
        wait_for("acks on the preferred leader", lambda: writer.acks > acked_before_move + 1000, 30)

        outcome = checker.finish()
        outcome.assert_ok()
        controller_log = cluster.log_path("controller", 0).read_text()
        assert "preferred replicas elected as leaders" in controller_log
        print(
            f"\npreferred leader {preferred}: moved to {moved['leader']} by kill -9, back at "
            f"leader epoch {back['leader_epoch']}; {outcome.history.counts()['acked']} records "
            "acked, all read back once"
        )
    finally:
        zk.stop()
        zk.close()


def test_elect_leaders_from_the_admin_client(manual_cluster: LocalCluster) -> None:
    """kafka-leader-election.sh's request from confluent-kafka's AdminClient.elect_leaders."""
    cluster = manual_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    tp = TopicPartition(TOPIC, 0)
    zk = replicated_topic(cluster)
    try:
        preferred = json.loads(zk.get(f"/brokers/topics/{TOPIC}")[0])["partitions"]["0"][0]
        wait_for("the preferred leader", lambda: partition_state(zk)["leader"] == preferred, 10)
        result = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)
        assert result[tp].code() == KafkaError.ELECTION_NOT_NEEDED

        cluster.kill("storage", preferred, signal.SIGKILL)
        moved = wait_for(
            "a new leader",
            lambda: (s := partition_state(zk))["leader"] not in (preferred, -1) and s,
            20,
        )
        result = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)
        assert result[tp].code() == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE

        cluster.start_process("storage", preferred)
        wait_for(
            "the restarted node back in the ISR",
            lambda: preferred in partition_state(zk)["isr"],
            30,
        )
        time.sleep(3)  # the balancer is off: leadership stays where it is
        assert partition_state(zk)["leader"] == moved["leader"]
        result = admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
        assert result == {tp: None}
        back = partition_state(zk)
        assert (back["leader"], back["leader_epoch"]) == (preferred, moved["leader_epoch"] + 1)
        assert admin.elect_leaders(ElectionType.PREFERRED, None).result(30) == {}

        # the new leader serves produce and fetch
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(1000):
            producer.produce(TOPIC, b"after-%d" % i)
        assert producer.flush(30) == 0
        read = consume_confluent(cluster.bootstrap, TOPIC, [0], 1000)[0]
        assert [r.rec.value for r in read][-1] == b"after-999"
    finally:
        zk.stop()
        zk.close()
