"""Elastic storage under the checker's load (issue 13, acceptance 4 and the drain half of 7).

One cluster start (zones a, b, c), idempotent acks=all writers and a consumer group on a 12
partition topic with RF 3 and min.insync.replicas 2:

1. grow 3 -> 5 storage nodes (the operator scales the local "StatefulSet"; the new nodes get
   zones a and b): the controller rebalances onto them by itself; replicas per node within ±1
   of even inside each zone, one replica per zone, leaders within ±1 of even;
2. a shrink the zones cannot take (node 2, the only one in zone c) is refused with the reason;
3. shrink 5 -> 3 with ``kafka-py cluster decommission --broker 3 --broker 4``, the active
   controller killed with SIGKILL in the middle of the drain: the new one finishes it, and only
   then are nodes 3 and 4 stopped; no partition is ever without a leader meanwhile;
4. the checker: nothing acknowledged lost, duplicated or reordered.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from services.cli.local_cluster import LocalCluster
from services.cli.local_scaler import LocalScaler
from services.common.zk import elastic
from services.common.zk.layout import BROKER_IDS, BROKER_TOPICS
from tests.e2e.checker import Checker, evidence_dir

pytestmark = pytest.mark.e2e

ZONES = ("a", "b", "c")
ZONE = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b"}


def topics(zk: KazooClient) -> dict[str, dict]:
    return {
        t: json.loads(zk.get(f"{BROKER_TOPICS}/{t}")[0]) for t in zk.get_children(BROKER_TOPICS)
    }


def states(zk: KazooClient, layout: dict[str, dict]) -> dict[tuple[str, int], dict]:
    out = {}
    for t, body in layout.items():
        for p in body["partitions"]:
            try:
                out[(t, int(p))] = json.loads(
                    zk.get(f"{BROKER_TOPICS}/{t}/partitions/{p}/state")[0]
                )
            except NoNodeError:
                pass
    return out


def wait_until(what: str, cond: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.5)


def settled(zk: KazooClient, nodes: set[int]) -> bool:
    """Every partition on ``nodes`` only, nothing moving, the rebalancer idle."""
    layout = topics(zk)
    for body in layout.values():
        if body.get("adding_replicas") or body.get("removing_replicas"):
            return False
        if any(set(r) - nodes for r in body["partitions"].values()):
            return False
    state = elastic.AutoscalerState.from_json(zk.get(elastic.AUTOSCALER)[0])
    return not state.rebalance_pending and not state.draining


def leaders_even(zk: KazooClient) -> bool:
    lead = Counter(s["leader"] for s in states(zk, topics(zk)).values())
    live = {int(b) for b in zk.get_children(BROKER_IDS)}
    counts = [lead.get(b, 0) for b in live]
    return max(counts) - min(counts) <= 1


def throttles(zk: KazooClient) -> list[str]:
    """Throttle configs left in ZooKeeper (rates on brokers, replica lists on topics)."""
    left = []
    for kind in ("brokers", "topics"):
        for name in zk.get_children(f"/config/{kind}"):
            config = json.loads(zk.get(f"/config/{kind}/{name}")[0] or b"{}").get("config", {})
            left += [f"{kind}/{name}: {k}" for k in config if "throttled" in k]
    return left


def throttled_in_logs(cluster: LocalCluster) -> int:
    return sum(
        cluster.log_path("controller", i).read_text().count('"rebalance moves throttled"')
        for i in (0, 1)
    )


def cli(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", "cluster", *args,
         "--zookeeper", cluster.zk_connect, "--timeout", "60"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


class OfflineWatch:
    """Samples every partition's state during the shrink: a leader of -1 (no in-sync replica
    left to lead) is recorded."""

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk
        self.offline: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            for (t, p), st in states(self.zk, topics(self.zk)).items():
                if st["leader"] < 0 or not st["isr"]:
                    self.offline.append(f"{t}-{p}: {st}")
            self.samples += 1

    def __enter__(self) -> OfflineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.timeout(600)
def test_grow_rebalance_refused_shrink_and_drain_across_controller_failover(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(
        tmp_path / "cluster",
        gateways=1,
        storage_nodes=3,
        controllers=2,
        zones=ZONES,
        gateway_port=0,
        zk_port=0,
        extra={
            "controller": [
                "--kafkapy.autoscaler.provisioner", "local",
                "--kafkapy.rebalance.check.interval.ms", "500",
                "--kafkapy.rebalance.max.concurrent.moves", "4",
                "--kafkapy.rebalance.throttle.bytes.per.sec", "5000000",
            ],
            "storage": ["--kafkapy.usage.report.interval.ms", "1000"],
        },
    )  # fmt: skip
    cluster.start(timeout=90)
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(10)
    log: list[str] = []
    scaler = LocalScaler(cluster, log.append)
    try:
        with (
            scaler.running(),
            Checker(cluster, "elastic", evidence=evidence_dir(tmp_path, "elastic")) as checker,
        ):
            checker.create_topic(partitions=12, config={"min.insync.replicas": "2"})
            checker.start()
            time.sleep(3)

            # 1. grow 3 -> 5
            checker.fault("storage scaled 3 -> 5 (zones a, b, c, a, b)")
            zk.set(elastic.STORAGE_SCALE, elastic.ScaleSpec(5).to_json())
            wait_until(
                "nodes 3 and 4 to register", lambda: len(zk.get_children(BROKER_IDS)) == 5, 90
            )
            wait_until("the rebalance onto 3 and 4", lambda: settled(zk, {0, 1, 2, 3, 4})
                       and any(3 in r for b in topics(zk).values() for r in b["partitions"].values()), 180)  # fmt: skip
            layout = topics(zk)
            replicas = Counter(b for body in layout.values() for r in body["partitions"].values() for b in r)  # fmt: skip
            for body in layout.values():
                for r in body["partitions"].values():
                    assert len({ZONE[b] for b in r}) == len(r), f"two replicas in one zone: {r}"
            # zone c has one node: it holds a replica of everything; zones a and b share evenly
            total = sum(len(r) for body in layout.values() for r in body["partitions"].values())
            partitions = sum(len(body["partitions"]) for body in layout.values())
            assert replicas[2] == partitions
            assert (
                max(replicas[b] for b in (0, 1, 3, 4)) - min(replicas[b] for b in (0, 1, 3, 4)) <= 1
            )
            assert sum(replicas.values()) == total
            wait_until("leaders within ±1 of even", lambda: leaders_even(zk), 60)
            # the moves were throttled, and the throttles are gone once they are done
            wait_until("the rebalance throttles cleared", lambda: not throttles(zk), 30)
            assert throttled_in_logs(cluster) >= 1
            checker.note(f"grown: replicas per node {dict(sorted(replicas.items()))}")

            # 2. a shrink the zones cannot take is refused
            refused = cli(cluster, "decommission", "--broker", "2")
            assert refused.returncode == 1
            assert refused.stderr.strip().splitlines()[-1] == (
                "error: cannot decommission node 2: replication factor 3 needs 3 zones but only "
                "2 (a, b) would remain once node 2 is drained"
            ), refused.stderr

            # 3. shrink 5 -> 3, the active controller killed mid-drain
            with OfflineWatch(zk) as watch:
                started = cli(cluster, "decommission", "--broker", "3", "--broker", "4")
                assert started.returncode == 0, started.stderr
                assert started.stdout.startswith("decommission of 3, 4: moving ")
                # replica sizes come from the nodes (Storage.DescribeLogDirs), not the usage znode
                copied = re.search(r"(\d+) bytes to copy", started.stdout)
                assert copied is not None and int(copied.group(1)) > 0, started.stdout
                wait_until(
                    "a move of the drain in flight",
                    lambda: any(b.get("adding_replicas") for b in topics(zk).values()),
                    60,
                )
                victim = cluster.active_controller_index()
                assert victim is not None
                checker.fault(f"kill -9 controller-{victim} (active) during the drain")
                cluster.kill("controller", victim, signal.SIGKILL)
                wait_until(
                    "nodes 3 and 4 drained and removed",
                    lambda: sorted(zk.get_children(BROKER_IDS)) == ["0", "1", "2"],
                    240,
                )
                # removed only once they hosted nothing
                assert settled(zk, {0, 1, 2})
                assert not any(
                    {3, 4} & set(r) for b in topics(zk).values() for r in b["partitions"].values()
                )
            assert watch.samples > 10
            assert not watch.offline, watch.offline[:10]
            assert any("stopping" in line and "storage-3" in line for line in log), log
            status = cli(cluster, "autoscaler", "status", "--output", "json")
            assert status.returncode == 0, status.stderr
            body = json.loads(status.stdout)
            assert [n["id"] for n in body["nodes"]] == [0, 1, 2]
            assert body["draining"] == [] and body["moves_in_flight"] == []
            assert body["last_decision"]["reason"] == "removed drained nodes 3, 4"

            outcome = checker.finish(
                heal=lambda: cluster.start_process("controller", victim, timeout=60)
            )
        outcome.assert_ok()
    finally:
        scaler.close()
        zk.stop()
        zk.close()
        cluster.stop()
