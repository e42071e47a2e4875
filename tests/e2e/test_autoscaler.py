"""The storage autoscaler end to end on the local cluster (issue 13, acceptance 5), under the
checker's load: disks filled past a small target -> it adds a node and rebalances onto it;
the filler topic deleted -> after the cooldown it drains the highest id and removes it. Its
decisions show in ``kafka-py cluster autoscaler status``, the kafkapy_autoscaler_* metrics and
the controller's log."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from services.cli.local_scaler import LocalScaler
from services.common.zk import elastic
from services.common.zk.layout import BROKER_IDS, BROKER_TOPICS
from tests.e2e.checker import Checker, evidence_dir
from tests.integration.kafka_support import wait_for_topic, wait_for_topic_gone

pytestmark = pytest.mark.e2e

CAPACITY = 8_000_000  # bytes per storage node, so a few MB cross the 50% target


def wait_until(what: str, cond: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.5)


def status(cluster: LocalCluster) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "cluster", "autoscaler", "status",
         "--output", "json", "--zookeeper", cluster.zk_connect, "--timeout", "30"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout))


def metrics(cluster: LocalCluster) -> str:
    idx = cluster.active_controller_index()
    assert idx is not None
    with urllib.request.urlopen(cluster.admin_url("controller", idx) + "/metrics", timeout=10) as r:
        return str(r.read().decode())


def hosts(zk: KazooClient, node: int) -> bool:
    for t in zk.get_children(BROKER_TOPICS):
        body = json.loads(zk.get(f"{BROKER_TOPICS}/{t}")[0])
        if any(node in r for r in body["partitions"].values()):
            return True
    return False


@pytest.mark.timeout(600)
def test_autoscaler_adds_a_node_past_the_disk_target_and_removes_it_when_usage_falls(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(
        tmp_path / "cluster",
        gateways=1,
        storage_nodes=3,
        controllers=2,
        zones=("a", "b", "c"),
        gateway_port=0,
        zk_port=0,
        extra={
            "controller": [
                "--kafkapy.autoscaler.provisioner", "local",
                "--kafkapy.autoscaler.enable", "true",
                "--kafkapy.autoscaler.disk.target.percent", "50",
                "--kafkapy.autoscaler.hysteresis.percent", "30",
                "--kafkapy.autoscaler.min.nodes", "3",
                "--kafkapy.autoscaler.max.nodes", "4",
                "--kafkapy.autoscaler.cooldown.ms", "5000",
                "--kafkapy.rebalance.check.interval.ms", "500",
            ],
            "storage": [
                "--kafkapy.storage.capacity.bytes", str(CAPACITY),
                "--kafkapy.usage.report.interval.ms", "1000",
            ],
        },
    )  # fmt: skip
    cluster.start(timeout=90)
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(10)
    log: list[str] = []
    scaler = LocalScaler(cluster, log.append)
    writers = [("c0", "confluent-kafka", 80.0), ("k0", "kafka-python", 20.0)]
    try:
        with (
            scaler.running(),
            Checker(
                cluster, "steady", evidence=evidence_dir(tmp_path, "autoscaler"), writers=writers
            ) as checker,
        ):
            checker.create_topic(partitions=12, config={"min.insync.replicas": "2"})
            checker.start()
            before = status(cluster)
            assert (
                before["autoscaler"]["enabled"] and before["autoscaler"]["provisioner"] == "local"
            )

            # fill: 3 x 4.5 MB of replicas on 3 x 8 MB = 56% > 50%
            checker.fault("filler topic written past the 50% disk target")
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.create_topics([NewTopic("filler", 6, 3)])["filler"].result(60)
            wait_for_topic(admin, "filler", 6, timeout=60)
            p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20})
            for i in range(4500):
                p.produce("filler", value=bytes(1000), key=str(i).encode())
                p.poll(0)
            assert p.flush(60) == 0

            wait_until("node 3 added", lambda: len(zk.get_children(BROKER_IDS)) == 4, 120)
            wait_until("replicas rebalanced onto node 3", lambda: hosts(zk, 3), 120)
            up = status(cluster)
            checker.note(f"scaled up: {up['last_decision']}")
            assert any("storage-3: starting" in line for line in log), log
            wait_until(
                "the rebalance to finish",
                lambda: (
                    not elastic.AutoscalerState.from_json(
                        zk.get(elastic.AUTOSCALER)[0]
                    ).rebalance_pending
                ),
                180,
            )
            text = metrics(cluster)
            assert 'kafkapy_autoscaler_decisions_total{decision="scale_up",reason="disk"}' in text
            assert "kafkapy_autoscaler_bytes_moved_total" in text

            # usage falls: after the cooldown the highest id is drained, then removed
            checker.fault("filler topic deleted")
            admin.delete_topics(["filler"])["filler"].result(60)
            wait_for_topic_gone(admin, "filler", timeout=60)
            wait_until(
                "node 3 drained and removed",
                lambda: sorted(zk.get_children(BROKER_IDS)) == ["0", "1", "2"],
                240,
            )
            assert not hosts(zk, 3)
            assert any("storage-3: stopping" in line for line in log), log
            down = status(cluster)
            assert down["last_decision"]["decision"] == "scale_down"
            assert down["last_decision"]["reason"] == "removed drained node 3"
            assert [n["id"] for n in down["nodes"]] == [0, 1, 2]
            text = metrics(cluster)
            assert 'kafkapy_autoscaler_decisions_total{decision="scale_down",reason="disk"}' in text
            assert "kafkapy_autoscaler_nodes 3.0" in text
            active = cluster.active_controller_index()
            controller_log = cluster.log_path("controller", active).read_text()
            decisions = [
                json.loads(line)
                for line in controller_log.splitlines()
                if '"autoscaler decision"' in line
            ]
            assert {d["decision"] for d in decisions} >= {"scale_up", "scale_down"}
            scale_up = next(d for d in decisions if d["decision"] == "scale_up")
            assert (
                scale_up["reason"].startswith("disk use ")
                and "above the 50% target" in (scale_up["reason"])
            )
            outcome = checker.finish()
        outcome.assert_ok()
    finally:
        scaler.close()
        zk.stop()
        zk.close()
        cluster.stop()
