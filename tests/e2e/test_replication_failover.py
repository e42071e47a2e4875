"""Replication with the real services: RF 3, min.insync.replicas 2, acks=all + idempotence.

kill -9 of the leader storage node while a producer keeps writing: the controller elects a new
leader from the ISR, every acknowledged record is readable exactly once, in order; the killed
node comes back, truncates against the new leader, catches up and re-joins the ISR.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from tests.integration.kafka_support import gateway_requests, wait_for

pytestmark = pytest.mark.e2e

TOPIC = "replicated"
LAG_MS = 3000
FIRST_BATCH = 5000


def _cluster(tmp_path: Path, *controller_flags: str) -> Iterator[LocalCluster]:
    c = LocalCluster(
        tmp_path / "cluster",
        gateways=1,
        storage_nodes=3,
        controllers=1,
        gateway_port=0,
        zk_port=0,
        extra={
            "storage": ["--replica.lag.time.max.ms", str(LAG_MS)],
            "controller": list(controller_flags),
        },
    )
    c.start(timeout=90)
    try:
        yield c
    finally:
        c.stop()


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


def read_all(bootstrap: str, expected: int, timeout: float = 30) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    idle_until: float | None = None
    try:
        while time.monotonic() < deadline:
            for m in consumer.consume(5000, 0.5):
                assert m.error() is None, m.error()
                values.append(m.value())
            if len(values) >= expected:
                # read on briefly: a duplicate beyond the expected count must show up
                idle_until = idle_until or time.monotonic() + 1.0
                if time.monotonic() > idle_until:
                    break
    finally:
        consumer.close()
    return values


class LiveConsumer(threading.Thread):
    """A confluent-kafka consumer assigned partition 0 from the start, polling until stopped."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "live",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.values: list[bytes] = []
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        self.consumer.assign([TopicPartition(TOPIC, 0, 0)])
        try:
            while not self._halt.is_set():
                for m in self.consumer.consume(1000, 0.2):
                    if m.error() is None:
                        self.values.append(m.value())
                    else:
                        self.errors.append(str(m.error()))
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


def log_end_offset(cluster: LocalCluster, broker: int) -> int | None:
    with urllib.request.urlopen(cluster.admin_url("storage", broker) + "/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(
        rf'kafka_log_log_logendoffset\{{partition="0",topic="{TOPIC}"\}} (\S+)', text
    ) or re.search(rf'kafka_log_log_logendoffset\{{topic="{TOPIC}",partition="0"\}} (\S+)', text)
    return int(float(m.group(1))) if m else None


class LoadProducer:
    """An idempotent acks=all confluent-kafka producer of numbered values; ``start()`` keeps it
    producing from a thread until ``stop()``."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                "retry.backoff.ms": 50,
            }
        )
        self.acked: list[bytes] = []
        self.ack_times: list[float] = []
        self.failed: list[str] = []
        self.sent = 0
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is None:
                self.acked.append(msg.value())
                self.ack_times.append(time.monotonic())
            else:
                self.failed.append(str(err))

    def _send(self) -> None:
        self.producer.produce(TOPIC, b"v-%08d" % self.sent, on_delivery=self._on_delivery)
        self.sent += 1

    def produce(self, count: int) -> None:
        """``count`` records, waiting for every acknowledgement."""
        for _ in range(count):
            self._send()
            if self.sent % 500 == 0:
                self.producer.poll(0)
        assert self.producer.flush(60) == 0

    def start(self) -> None:
        def loop() -> None:
            while not self._halt.is_set():
                self._send()
                self.producer.poll(0)
                if self.sent % 100 == 0:
                    time.sleep(0.01)

        self._thread = threading.Thread(target=loop)
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(30)
        assert self.producer.flush(60) == 0
        assert not self.failed, self.failed[:5]
        assert len(self.acked) == self.sent


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


def test_leader_failover_and_rejoin(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    zk = replicated_topic(cluster)
    try:
        load = LoadProducer(bootstrap)
        acked, ack_times = load.acked, load.ack_times
        # 1. 5,000 records with acks=all over RF 3, read back
        started = time.monotonic()
        load.produce(FIRST_BATCH)
        first_ms = (time.monotonic() - started) * 1000
        assert not load.failed, load.failed[:5]
        assert len(acked) == FIRST_BATCH
        assert read_all(bootstrap, FIRST_BATCH) == acked

        # 2. kill -9 the leader while producing continues
        victim = partition_state(zk)["leader"]
        old_epoch = partition_state(zk)["leader_epoch"]

        # a consumer reading through the failover: after the leader change librdkafka checks
        # its position with OffsetForLeaderEpoch (KIP-320) before it fetches on
        live = LiveConsumer(bootstrap)
        live.start()
        wait_for("the live consumer to catch up", lambda: len(live.values) >= FIRST_BATCH, 30)
        epoch_requests_before = gateway_requests(cluster, "OffsetForLeaderEpoch")

        load.start()
        time.sleep(1.0)
        killed_at = time.monotonic()
        cluster.kill("storage", victim, signal.SIGKILL)
        new_state = wait_for(
            "a new leader",
            lambda: (s := partition_state(zk))["leader"] not in (victim, -1) and s,
            20,
        )
        elected_s = time.monotonic() - killed_at
        assert new_state["leader_epoch"] > old_epoch
        assert victim not in new_state["isr"] and len(new_state["isr"]) == 2
        new_leader = new_state["leader"]
        wait_for(
            "acks after the failover",
            lambda: any(ts > killed_at + elected_s for ts in list(ack_times)),
            20,
        )
        first_ack_s = min(ts for ts in list(ack_times) if ts > killed_at) - killed_at
        resumed_s = min(ts for ts in list(ack_times) if ts > killed_at + elected_s) - killed_at

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
        load.stop()

        # every acknowledged record exactly once, in order
        got = read_all(bootstrap, len(acked))
        assert len(got) == len(set(got)), "duplicates"
        assert got == acked

        # the live consumer read on through the failover, and validated its position
        wait_for("the live consumer to reach the end", lambda: len(live.values) >= len(acked), 30)
        live.stop()
        assert not live.errors, live.errors[:5]
        assert live.values == acked
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
        node_log = (cluster.data_dir / "logs" / f"storage-{victim}.log").read_text()
        assert "became follower" in node_log and "fetching" in node_log
        print(
            f"\nfailover: first batch {FIRST_BATCH} acks=all in {first_ms:.0f} ms; "
            f"new leader {new_leader} elected {elected_s:.2f}s after kill -9 of {victim}; "
            f"first ack after kill {first_ack_s:.2f}s, acks on the new leader from "
            f"{resumed_s:.2f}s; rejoined ISR {rejoin_s:.2f}s after restart; "
            f"{len(acked)} records acked, all read back once"
        )
    finally:
        zk.stop()
        zk.close()


def test_leadership_returns_to_the_preferred_replica_under_load(
    balancing_cluster: LocalCluster,
) -> None:
    """Leader moves while both leaders are alive: the old leader becomes a follower with
    produce requests in flight. No acknowledged record is lost or duplicated."""
    cluster = balancing_cluster
    bootstrap = cluster.bootstrap
    zk = replicated_topic(cluster)
    try:
        assignment = json.loads(zk.get(f"/brokers/topics/{TOPIC}")[0])["partitions"]["0"]
        preferred = assignment[0]
        wait_for("the preferred leader", lambda: partition_state(zk)["leader"] == preferred, 10)

        live = LiveConsumer(bootstrap)
        live.start()
        load = LoadProducer(bootstrap)
        acked = load.acked
        load.start()
        time.sleep(1.0)

        # the preferred leader dies; another replica leads
        cluster.kill("storage", preferred, signal.SIGKILL)
        moved = wait_for(
            "a new leader",
            lambda: (s := partition_state(zk))["leader"] not in (preferred, -1) and s,
            20,
        )
        time.sleep(1.0)
        # back and in sync, it is made leader again by the controller, not by a failure
        cluster.start_process("storage", preferred)
        back = wait_for(
            "the preferred replica leading again",
            lambda: (s := partition_state(zk))["leader"] == preferred and s,
            40,
        )
        assert back["leader_epoch"] == moved["leader_epoch"] + 1
        assert sorted(back["isr"]) == [0, 1, 2]
        assert cluster.exited() == {}, "no node died in the move"
        acked_before_move = len(acked)
        wait_for("acks on the preferred leader", lambda: len(acked) > acked_before_move + 1000, 30)
        load.stop()

        got = read_all(bootstrap, len(acked))
        assert len(got) == len(set(got)), "duplicates"
        assert got == acked
        wait_for("the live consumer to reach the end", lambda: len(live.values) >= len(acked), 30)
        live.stop()
        assert not live.errors, live.errors[:5]
        assert live.values == acked
        controller_log = (cluster.data_dir / "logs" / "controller-0.log").read_text()
        assert "preferred replicas elected as leaders" in controller_log
        print(
            f"\npreferred leader {preferred}: moved to {moved['leader']} by kill -9, back at "
            f"leader epoch {back['leader_epoch']}; {len(acked)} records acked, all read back once"
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
        assert read_all(cluster.bootstrap, 1000)[-1] == b"after-999"
    finally:
        zk.stop()
        zk.close()
