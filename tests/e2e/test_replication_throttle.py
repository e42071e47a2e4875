"""Replication throttles, DescribeLogDirs and ``kafka-py log-dirs`` on a real cluster (issue 13
§1, acceptance 2).

~210 MB of incompressible 1 MB records are written to ``bulk`` (one replica on node 0 for
partition 0, on node 1 for partition 1); ``kafka-py reassign-partitions --execute --throttle``
(5 MB/s) moves both partitions to node 2 while a producer keeps writing to ``ordinary``, which
node 2 follows too. ``--verify`` is run every 2 s: it prints the progress of the moving replicas
(DescribeLogDirs sizes) and, once done, clears the throttles as kafka-reassign-partitions.sh
does. The measured rate is printed, never asserted; asserted instead: the throttles in force,
the throttled bytes accounted on ``bulk``'s moving replicas and never on ``ordinary``'s, the
follower's bucket having held partitions back, node 2 in ``ordinary``'s ISRs at every sample,
every acknowledged ``ordinary`` write. Then kafka-python's ``describe_log_dirs`` and
``kafka-py log-dirs`` report the moved sizes, and a log dir that fails answers
KAFKA_STORAGE_ERROR.

Runtime 1-2 minutes (most of it the throttled copy): marked e2e like the other long tests;
``make test`` runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from kafka.admin import KafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families

from services.cli.local_cluster import LocalCluster
from services.cli.log_dirs import describe_log_dirs
from tests.integration.kafka_support import (
    cli_ok,
    gateway_requests,
    kafka_py,
    one_line,
    running_cluster,
    wait_for,
    wait_for_topic,
    zk_partition_state,
)

pytestmark = pytest.mark.e2e

BULK, ORDINARY = "bulk", "ordinary"
FOLLOWER = 2  # the storage node the bulk partitions move to
RECORD_BYTES = 1_000_000
BULK_RECORDS = 210  # ~210 MB over two partitions
THROTTLE = 5_000_000  # bytes/s
KAFKA_STORAGE_ERROR = 56


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path,
        gateways=1,
        storage_nodes=3,
        controllers=1,
        group_coordinators=0,
        log_dirs_per_node=2,
    ) as c:
        yield c


def samples(
    cluster: LocalCluster, node: int, name: str
) -> dict[tuple[tuple[str, str], ...], float]:
    """Samples of one metric of storage node ``node``, by their sorted labels."""
    with urllib.request.urlopen(cluster.admin_url("storage", node) + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def sample(cluster: LocalCluster, node: int, name: str, **labels: str) -> float:
    return samples(cluster, node, name).get(tuple(sorted(labels.items())), 0.0)


class OrdinaryProducer(threading.Thread):
    """acks=all writes of small records to ``ordinary`` until stopped; every one acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        )
        self.acked = 0
        self.failed: list[str] = []
        self.halt = threading.Event()

    def _done(self, err: object, msg: object) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failed.append(str(err))

    def run(self) -> None:
        i = 0
        while not self.halt.is_set():
            self.producer.produce(
                ORDINARY, value=b"o%d" % i, partition=i % 2, on_delivery=self._done
            )
            self.producer.poll(0.01)
            i += 1
        self.producer.flush(30)


def bulk_sizes(dirs: dict[int, list], node: int) -> dict[int, int]:
    return {p: r.size for d in dirs.get(node, []) for (t, p), r in d.replicas.items() if t == BULK}


def _plan(path: Path, targets: dict[int, list[int]]) -> str:
    doc = {
        "version": 1,
        "partitions": [{"topic": BULK, "partition": p, "replicas": r} for p, r in targets.items()],
    }
    path.write_text(json.dumps(doc))
    return str(path)


def test_throttled_reassignment_leaves_ordinary_replication_alone(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap
    host, port = bootstrap.rsplit(":", 1)
    gateway = [(host, int(port))]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # bulk: one replica on 0 and on 1, moved to node 2; ordinary: node 2 follows both leaders
    futures = admin.create_topics(
        [
            NewTopic(BULK, num_partitions=2, replica_assignment=[[0], [1]]),
            NewTopic(ORDINARY, num_partitions=2, replica_assignment=[[0, FOLLOWER], [1, FOLLOWER]]),
        ]
    )
    for fut in futures.values():
        fut.result(timeout=60)
    for t in (BULK, ORDINARY):
        wait_for_topic(admin, t, 2)

    def isr(topic: str, partition: int) -> list[int]:
        return sorted(zk_partition_state(cluster.zk_connect, topic, partition)["isr"])

    wait_for("node 2 in ordinary's ISRs", lambda: all(FOLLOWER in isr(ORDINARY, q) for q in (0, 1)))

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.max.bytes": 2_000_000,
        }
    )
    errors: list[str] = []
    for i in range(BULK_RECORDS):
        p.produce(
            BULK,
            value=os.urandom(RECORD_BYTES),
            partition=i % 2,
            on_delivery=lambda e, m: e and errors.append(str(e)),
        )
        p.poll(0)
    assert p.flush(120) == 0 and not errors, errors
    dirs = describe_log_dirs(gateway, 30)
    sources = {0: bulk_sizes(dirs, 0)[0], 1: bulk_sizes(dirs, 1)[1]}
    total = sum(sources.values())
    assert total >= 200_000_000

    ordinary = OrdinaryProducer(bootstrap)
    ordinary.start()
    plan = _plan(tmp_path / "move.json", {0: [FOLLOWER], 1: [FOLLOWER]})
    common = ("--bootstrap-server", bootstrap, "--reassignment-json-file", plan)
    try:
        out = cli_ok("reassign-partitions", "--execute", *common, "--throttle", str(THROTTLE))
        lines = out.splitlines()
        assert lines[-3:] == [
            "Warning: You must run --verify periodically, until the reassignment completes, to "
            "ensure the throttle is removed.",
            f"The inter-broker throttle limit was set to {THROTTLE} B/s",
            f"Successfully started partition reassignments for {BULK}-0,{BULK}-1",
        ]
        started = time.monotonic()
        res = ConfigResource(ResourceType.TOPIC, BULK)
        configs = admin.describe_configs([res])[res].result(timeout=30)
        assert configs["leader.replication.throttled.replicas"].value == "0:0,1:1"
        assert configs["follower.replication.throttled.replicas"].value == "0:2,1:2"
        for b in (0, 1, FOLLOWER):
            broker = ConfigResource(ResourceType.BROKER, str(b))
            got = admin.describe_configs([broker])[broker].result(timeout=30)
            assert got["leader.replication.throttled.rate"].value == str(THROTTLE)
            assert got["follower.replication.throttled.rate"].value == str(THROTTLE)

        timeline: list[tuple[float, int]] = []  # (time, bytes on node 2)
        in_isr_samples = 0
        while True:
            verify = cli_ok("reassign-partitions", "--verify", *common)
            if "still in progress" not in verify:
                break
            print(verify)
            assert "Progress of partition reassignment:" in verify
            copied = bulk_sizes(describe_log_dirs(gateway, 30), FOLLOWER)
            timeline.append((time.monotonic(), sum(copied.values())))
            # ordinary replication is not throttled: node 2 stays in its ISRs all along
            assert all(FOLLOWER in isr(ORDINARY, q) for q in (0, 1))
            in_isr_samples += 1
            assert time.monotonic() - started < 300, "the throttled reassignment did not finish"
            time.sleep(2)
        elapsed = time.monotonic() - started
        assert verify.splitlines() == [
            "Status of partition reassignment:",
            f"Reassignment of partition {BULK}-0 is completed.",
            f"Reassignment of partition {BULK}-1 is completed.",
            "",
            "Clearing broker-level throttles on brokers 0,1,2",
            f"Clearing topic-level throttles on topic {BULK}",
        ]
        assert len(timeline) >= 3, timeline  # it was seen moving
        (t0, b0), (t1, b1) = timeline[0], timeline[-1]
        rate = (b1 - b0) / (t1 - t0) if t1 > t0 else float("nan")
        print(
            f"throttled reassignment of {total} bytes: done in {elapsed:.1f}s "
            f"({total / elapsed / 1e6:.2f} MB/s overall, leader moves included); {b1 - b0} bytes "
            f"copied between the first and the last sample in {t1 - t0:.1f}s = {rate / 1e6:.2f} MB/s (throttle "
            f"{THROTTLE / 1e6:.1f} MB/s); node 2 in ordinary's ISRs at all {in_isr_samples} samples"
        )
    finally:
        ordinary.halt.set()
        ordinary.join(60)
    assert ordinary.acked > 0 and not ordinary.failed, ordinary.failed
    caught_up = bulk_sizes(describe_log_dirs(gateway, 30), FOLLOWER)
    assert caught_up == sources

    # the throttle acted on bulk's moving replicas, and only there
    fetched = sample(
        cluster, FOLLOWER, "kafka_server_brokertopicmetrics_replicationbytesin_total", topic=BULK
    )
    throttled = sample(
        cluster, FOLLOWER, "kafkapy_replication_throttled_bytes_total", role="follower", topic=BULK
    )
    assert throttled == fetched >= total
    assert (
        sample(cluster, FOLLOWER, "kafkapy_replication_throttled_holds_total", role="follower") > 0
    )
    for leader in (0, 1):
        assert (
            sample(
                cluster,
                leader,
                "kafkapy_replication_throttled_bytes_total",
                role="leader",
                topic=BULK,
            )
            >= sources[leader]
        )
    for node in (0, 1, FOLLOWER):
        for role in ("leader", "follower"):
            assert (
                sample(
                    cluster,
                    node,
                    "kafkapy_replication_throttled_bytes_total",
                    role=role,
                    topic=ORDINARY,
                )
                == 0
            )
    assert (
        sample(
            cluster,
            FOLLOWER,
            "kafka_server_brokertopicmetrics_replicationbytesin_total",
            topic=ORDINARY,
        )
        > 0
    )
    # --verify cleared them: defaults again, everywhere
    configs = admin.describe_configs([res])[res].result(timeout=30)
    assert configs["leader.replication.throttled.replicas"].value == ""
    assert configs["follower.replication.throttled.replicas"].value == ""
    for b in (0, 1, FOLLOWER):
        broker = ConfigResource(ResourceType.BROKER, str(b))
        assert (
            admin.describe_configs([broker])[broker]
            .result(timeout=30)["follower.replication.throttled.rate"]
            .is_default
        )
    wait_for(
        "the rate cleared on node 2",
        lambda: (
            sample(
                cluster,
                FOLLOWER,
                "kafkapy_storage_replication_throttled_rate_bytes",
                role="follower",
            )
            >= 2**63 - 1024
        ),
    )

    # kafka-python's describe_log_dirs: every broker id it knows reaches the gateway, which
    # answers for the storage nodes it serves (here all three)
    before = gateway_requests(cluster, "DescribeLogDirs")
    ka = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        answers = ka.describe_log_dirs()
    finally:
        ka.close()
    after = gateway_requests(cluster, "DescribeLogDirs")
    assert {v: n - before.get(v, 0) for v, n in after.items() if n != before.get(v, 0)} == {4: 3}
    assert sorted(a["broker"] for a in answers) == [0, 1, 2]
    for a in answers:
        follower_dirs = [
            d for d in a["log_dirs"] if d["log_dir"].startswith(f"storage-{FOLLOWER}:")
        ]
        assert len(follower_dirs) == 2 and all(d["error_code"] == 0 for d in follower_dirs)
        sizes = {
            part["partition_index"]: part["partition_size"]
            for d in follower_dirs
            for t in d["topics"]
            if t["name"] == BULK
            for part in t["partitions"]
        }
        assert sizes == caught_up
        assert all(d["total_bytes"] > 0 and d["usable_bytes"] > 0 for d in follower_dirs)

    # kafka-py log-dirs, as kafka-log-dirs.sh prints it
    text = cli_ok(
        "log-dirs",
        "--describe",
        "--bootstrap-server",
        bootstrap,
        "--topic-list",
        BULK,
        "--broker-list",
        str(FOLLOWER),
    )
    head, received, doc = text.splitlines()
    assert head == "Querying brokers for log directories information"
    assert received == f"Received log directory information from brokers {FOLLOWER}"
    parsed = json.loads(doc)
    assert parsed["version"] == 1 and [b["broker"] for b in parsed["brokers"]] == [FOLLOWER]
    log_dirs = parsed["brokers"][0]["logDirs"]
    assert sorted(d["logDir"] for d in log_dirs) == sorted(
        str(d) for d in cluster.storage_dirs(FOLLOWER)
    )
    got = {
        part["partition"]: (part["size"], part["offsetLag"], part["isFuture"])
        for d in log_dirs
        for part in d["partitions"]
    }
    assert got == {f"{BULK}-{q}": (caught_up[q], 0, False) for q in (0, 1)}
    missing = kafka_py(
        "log-dirs", "--describe", "--bootstrap-server", bootstrap, "--broker-list", "7"
    )
    assert missing.returncode == 1
    assert one_line(missing.stderr) == (
        "error: The given brokers do not exist from --broker-list: 7. "
        "Current existent brokers: 0,1,2"
    )

    # a log dir that fails answers KAFKA_STORAGE_ERROR (KIP-112), the other one still answers
    good, bad = cluster.storage_dirs(0)
    shutil.rmtree(bad)
    bad.write_text("not a directory any more\n")

    def failed_dir() -> bool:
        doc = json.loads(
            cli_ok(
                "log-dirs", "--describe", "--bootstrap-server", bootstrap, "--broker-list", "0"
            ).splitlines()[2]
        )
        errors = {d["logDir"]: d["error"] for d in doc["brokers"][0]["logDirs"]}
        return errors == {
            str(good): None,
            str(bad): "org.apache.kafka.common.errors.KafkaStorageException",
        }

    wait_for("the failed dir reported", failed_dir, 60, interval=1)
    ka = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        (answer,) = ka.describe_log_dirs(brokers=[0])
    finally:
        ka.close()
    node0 = {d["log_dir"]: d for d in answer["log_dirs"] if d["log_dir"].startswith("storage-0:")}
    assert node0[f"storage-0:{bad}"]["error_code"] == KAFKA_STORAGE_ERROR
    assert node0[f"storage-0:{bad}"]["topics"] == []
    assert node0[f"storage-0:{good}"]["error_code"] == 0
