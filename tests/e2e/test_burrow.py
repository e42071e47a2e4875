"""Burrow 1.2.1 (Debian's ``burrow``, on the Go client Sarama) reads a consuming group's lag from
a local cluster: it consumes ``__consumer_offsets`` (GroupMetadataValue v1, written because the
group coordinators run with ``inter.broker.protocol.version`` 2.0) and asks the log ends with
ListOffsets v0 (``kafka-version`` 2.1.0 in its client profile)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from services.cli.local_cluster import LocalCluster
from tests.integration.kafka_support import gateway_requests, wait_for, wait_for_topic

pytestmark = pytest.mark.e2e
BURROW = shutil.which("Burrow")
TOPIC = "burrow-lag"
GROUP = "burrow-watched"
PARTITIONS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def old_format_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path / "cluster",
        gateways=1,
        storage_nodes=1,
        controllers=1,
        gateway_port=0,
        zk_port=0,
        extra={"group_coordinator": ["--inter.broker.protocol.version", "2.0"]},
    )
    cluster.start(timeout=90)
    try:
        yield cluster
    finally:
        cluster.stop()


def _burrow_config(tmp: Path, cluster: LocalCluster, http_port: int) -> Path:
    conf_dir = tmp / "burrow"
    conf_dir.mkdir()
    (conf_dir / "burrow.toml").write_text(
        f"""
[general]
pidfile="{tmp}/burrow.pid"
[logging]
filename="{tmp}/burrow.log"
level="info"
[zookeeper]
servers=["{cluster.zk_connect}"]
timeout=6
root-path="/burrow"
[client-profile.kp]
client-id="burrow"
kafka-version="2.1.0"
[cluster.local]
class-name="kafka"
servers=["{cluster.bootstrap}"]
client-profile="kp"
topic-refresh=5
offset-refresh=2
[consumer.local]
class-name="kafka"
cluster="local"
servers=["{cluster.bootstrap}"]
client-profile="kp"
offsets-topic="__consumer_offsets"
start-latest=false
[httpserver.default]
address="127.0.0.1:{http_port}"
[storage.default]
class-name="inmemory"
workers=4
intervals=10
expire-group=604800
min-distance=1
[evaluator.default]
class-name="caching"
expire-cache=1
"""
    )
    return conf_dir


def _get(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            doc: dict[str, Any] = json.loads(r.read())
            return doc
    except OSError:
        return None


@pytest.mark.skipif(BURROW is None, reason="Burrow is not installed (scripts/install-deps.sh)")
def test_burrow_reads_a_consuming_groups_lag(
    old_format_cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster = old_format_cluster
    bs = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)
    wait_for_topic(admin, TOPIC, PARTITIONS)
    p = Producer({"bootstrap.servers": bs})
    for part in range(PARTITIONS):
        for i in range(20):
            p.produce(TOPIC, value=f"{i}".encode(), partition=part)
    assert p.flush(30) == 0
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )
    c.subscribe([TOPIC])
    wait_for("an assignment", lambda: (c.poll(0.2), c.assignment())[1], timeout=60)
    v0_before = gateway_requests(cluster, "ListOffsets").get(0, 0)

    http_port = _free_port()
    conf_dir = _burrow_config(tmp_path, cluster, http_port)
    log = (tmp_path / "burrow.out").open("wb")
    assert BURROW is not None
    proc = subprocess.Popen(
        [BURROW, "--config-dir", str(conf_dir)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        lag_url = f"http://127.0.0.1:{http_port}/v3/kafka/local/consumer/{GROUP}/lag"

        def committed_lag(per_partition: int) -> dict[str, Any] | None:
            # keep the group alive and committing (Burrow evaluates a window of commits)
            c.poll(0.1)
            c.commit(
                offsets=[TopicPartition(TOPIC, q, per_partition) for q in range(PARTITIONS)],
                asynchronous=False,
            )
            doc = _get(lag_url)
            if not doc or doc.get("error"):
                return None
            status = doc["status"]
            parts = status.get("partitions") or []
            ends = {q["partition"]: q["end"]["lag"] for q in parts if q.get("end")}
            want = {q: 20 - per_partition for q in range(PARTITIONS)}
            if ends == want and status.get("totallag") == sum(want.values()):
                return status
            return None

        # Committing the same offsets with lag left: Burrow's rules call that a stall (ERR).
        status = wait_for("Burrow's lag of the group", lambda: committed_lag(15), timeout=90)
        assert status["cluster"] == "local" and status["group"] == GROUP
        assert status["status"] == "ERR", status
        assert {q["status"] for q in status["partitions"]} == {"STALL"}, status
        # Caught up: lag 0, OK.
        status = wait_for("Burrow to see the group catch up", lambda: committed_lag(20), timeout=90)
        assert status["status"] == "OK", status
        assert gateway_requests(cluster, "ListOffsets").get(0, 0) > v0_before
        burrow_log = (tmp_path / "burrow.log").read_text(errors="replace")
        assert "value version" not in burrow_log, burrow_log[-2000:]
        assert proc.poll() is None
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
        c.close()
