"""Several ``log.dirs`` per storage node, and the failure of one of them (KIP-112).

New replicas are spread over the directories (fewest partitions first); when one directory
fails - here it is replaced by a file, which root cannot write into either (chmod would not
stop root) - its replicas go offline, the controller re-leads them on the other nodes and takes
them out of the ISRs, no acknowledged record is lost, and the node keeps serving the partitions
of its good directory. After a restart with the directory still broken the node comes back
with the good directory only; once the directory is repaired it rebuilds the lost replicas.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from services.common.zk import layout
from tests.integration.kafka_support import (
    Rec,
    assert_partition_logs,
    consume_confluent,
    make_records,
    produce_confluent,
    running_cluster,
    wait_for,
    wait_for_topic,
)

pytestmark = pytest.mark.e2e

TOPIC = "spread"
PARTITIONS = 12
NODE = 0  # the storage node whose second log dir fails


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path,
        gateways=1,
        storage_nodes=3,
        controllers=1,
        group_coordinators=1,
        log_dirs_per_node=2,
    ) as c:
        yield c


def partitions_in(d: Path) -> set[int]:
    """Partitions of TOPIC whose directory is in log dir ``d``."""
    if not d.is_dir():
        return set()
    return {int(p.name.rsplit("-", 1)[1]) for p in d.glob(f"{TOPIC}-*") if p.is_dir()}


def states(zk: KazooClient) -> dict[int, dict]:
    return {
        p: json.loads(zk.get(layout.partition_state_path(TOPIC, p))[0]) for p in range(PARTITIONS)
    }


def metric(cluster: LocalCluster, name: str) -> float | None:
    with urllib.request.urlopen(cluster.admin_url("storage", NODE) + "/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


class ChunkedProducer(threading.Thread):
    """Idempotent acks=all producers, one chunk of 300 records after the other, until stopped;
    every chunk must be delivered completely (``produce_confluent`` asserts it)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.records: list[Rec] = []
        self.error: BaseException | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        chunk = 0
        try:
            while not self.halt.is_set():
                recs = make_records(f"c{chunk}", 300, PARTITIONS, big_values=False)
                produce_confluent(self.bootstrap, TOPIC, recs, config={"message.timeout.ms": 60000})
                self.records.extend(recs)
                chunk += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def stop(self) -> list[Rec]:
        self.halt.set()
        self.join(120)
        assert not self.is_alive(), "the producer did not finish its last chunk"
        if self.error is not None:
            raise self.error
        return self.records


def test_a_failed_log_dir_takes_only_its_replicas_offline(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
        TOPIC
    ].result(timeout=60)
    wait_for_topic(admin, TOPIC, PARTITIONS)
    good, bad = cluster.storage_dirs(NODE)

    # every node holds all 12 replicas: 6 in each of its two dirs (fewest partitions first)
    for node in range(3):
        first, second = cluster.storage_dirs(node)
        a, b = partitions_in(first), partitions_in(second)
        assert not a & b and a | b == set(range(PARTITIONS)), (node, a, b)
        assert abs(len(a) - len(b)) <= 1, (node, sorted(a), sorted(b))
        total = Counter(
            d for d in (first, second) for p in d.iterdir() if p.is_dir() and "-" in p.name
        )
        assert abs(total[first] - total[second]) <= 1, total  # __consumer_offsets too
        for d in (first, second):
            assert (d / "meta.properties").is_file()
    in_bad, in_good = partitions_in(bad), partitions_in(good)

    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(10)
    producer = ChunkedProducer(bootstrap)
    try:
        wait_for(
            "every replica in sync",
            lambda: all(sorted(s["isr"]) == [0, 1, 2] for s in states(zk).values()),
        )
        producer.start()
        wait_for("records acknowledged", lambda: len(producer.records) >= 900, 60)
        led_before = {p for p, s in states(zk).items() if s["leader"] == NODE}
        assert led_before & in_bad and led_before & in_good, "the node must lead in both dirs"

        shutil.rmtree(bad)  # the disk is gone: what root cannot write into either
        bad.write_text("not a directory any more\n")

        def offline_handled() -> bool:
            st = states(zk)
            return all(
                st[p]["leader"] != NODE and NODE not in st[p]["isr"] for p in in_bad
            ) and all(NODE in st[p]["isr"] for p in in_good)

        wait_for("the failed dir's replicas re-led elsewhere", offline_handled, 60)
        st = states(zk)
        assert {p for p in in_good if st[p]["leader"] == NODE} == led_before & in_good
        assert metric(cluster, "kafka_log_logmanager_offlinelogdirectorycount") == 1.0
        assert zk.get_children(layout.LOG_DIR_EVENT_NOTIFICATION) == []  # consumed
        log_text = cluster.log_path("storage", NODE).read_text()
        assert f"Stopping serving replicas in dir {bad}" in log_text

        mark = len(producer.records)
        wait_for("more records acknowledged", lambda: len(producer.records) >= mark + 900, 60)
    finally:
        records = producer.stop()
        zk.stop()

    # every acknowledged record is there exactly once, in order, with its offset
    got = consume_confluent(bootstrap, TOPIC, list(range(PARTITIONS)), len(records))
    assert_partition_logs(records, got)

    # a restart with the dir still broken: the node serves its good dir, the rest stays offline
    cluster.kill("storage", NODE)
    cluster.start_process("storage", NODE, timeout=90)
    assert partitions_in(good) == in_good and bad.is_file()
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(10)
    try:
        wait_for(
            "the good dir's replicas back in sync",
            lambda: all(NODE in states(zk)[p]["isr"] for p in in_good),
            60,
        )
        assert all(NODE not in s["isr"] for p, s in states(zk).items() if p in in_bad)
        assert metric(cluster, "kafka_log_logmanager_offlinelogdirectorycount") == 1.0

        # repaired (an empty disk): the lost replicas are rebuilt from their leaders
        cluster.kill("storage", NODE)
        bad.unlink()
        cluster.start_process("storage", NODE, timeout=90)
        wait_for(
            "every replica in sync again",
            lambda: all(sorted(s["isr"]) == [0, 1, 2] for s in states(zk).values()),
            90,
        )
        assert partitions_in(bad) | partitions_in(good) == set(range(PARTITIONS))
    finally:
        zk.stop()
    got = consume_confluent(bootstrap, TOPIC, list(range(PARTITIONS)), len(records))
    assert_partition_logs(records, got)


def test_a_node_whose_every_log_dir_failed_halts(tmp_path: Path) -> None:
    """Kafka halts a broker with no log dir left; the node exits 1 and says why."""
    with running_cluster(
        tmp_path,
        gateways=1,
        storage_nodes=1,
        controllers=1,
        group_coordinators=0,
        zones=("zone-a",),
        extra={"storage": ["--replica.high.watermark.checkpoint.interval.ms", "200"]},
    ) as c:
        (only,) = c.storage_dirs(0)
        shutil.rmtree(only)
        only.write_text("")
        assert c.wait_exit("storage", 0, timeout=30) == 1
        assert "have failed" in c.log_path("storage", 0).read_text()
