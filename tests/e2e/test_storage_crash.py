"""kill -9 of a storage node while an idempotent producer writes: nothing acknowledged is lost,
nothing is duplicated (judged by the shared checker), the torn tail is truncated and the
indexes are rebuilt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from tests.e2e.checker import Checker, evidence_dir

pytestmark = pytest.mark.e2e

TOPIC = "crash-test"
PARTITIONS = 3


def _leader(cluster: LocalCluster, partition: int) -> int:
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(10)
    try:
        data, _ = zk.get(f"/brokers/topics/{TOPIC}/partitions/{partition}/state")
        return int(json.loads(data)["leader"])
    finally:
        zk.stop()
        zk.close()


def _json_lines(path: Path) -> list[dict[str, object]]:
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def test_kill_storage_node_mid_produce(fault_cluster: LocalCluster, tmp_path: Path) -> None:
    checker = Checker(
        fault_cluster,
        TOPIC,
        evidence=evidence_dir(tmp_path, "storage-crash"),
        writers=[("c0", "confluent-kafka", 1000.0)],
        group=None,
    )
    # one replica per partition: the killed leader's partition waits for its return
    checker.create_topic(PARTITIONS, replication_factor=1)
    victim = _leader(fault_cluster, 0)
    checker.start()
    checker.writers[0].wait_acks(1000)
    fault_cluster.kill("storage", victim, signal.SIGKILL)
    checker.fault(f"kill -9 storage-{victim} (leader of partition 0)")
    time.sleep(0.5)

    # Tear the tail of the victim's active segment as a crash mid-write would.
    part_dir = fault_cluster.storage_dir(victim) / f"{TOPIC}-0"
    active = sorted(part_dir.glob("*.log"))[-1]
    good_size = active.stat().st_size
    with open(active, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x99\x00\x00\x01\x00" + os.urandom(40))
    checker.fault(f"tore the tail of {active.name} at {good_size} bytes")

    time.sleep(1.0)
    fault_cluster.start_process("storage", victim)
    checker.note(f"storage-{victim} restarted", "nemesis")
    time.sleep(3.0)
    outcome = checker.finish()
    outcome.assert_ok()
    counts = outcome.history.counts()
    assert counts["failed"] == counts["unknown"] == 0, counts  # every record was acknowledged

    # The torn tail was cut back to the last complete batch (the file may have grown since with
    # new appends, but the garbage must be gone: every batch in the file must be valid).
    dump = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "dump-log", "--files", str(active)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dump.returncode == 0, dump.stderr
    assert "isvalid: false" not in dump.stdout
    assert "Mismatches" not in dump.stderr and "Found" not in dump.stderr, dump.stderr
    assert active.stat().st_size >= good_size
    # The restarted node logged its recovery of this partition: the torn tail cut, indexes rebuilt.
    recovered = [
        e
        for e in _json_lines(fault_cluster.log_path("storage", victim))
        if e.get("event") == "log_recovered" and e.get("topic") == TOPIC and e.get("partition") == 0
    ]
    assert recovered, "no recovery logged for the torn partition"
    assert recovered[-1]["bytes_truncated"] > 0
    assert recovered[-1]["indexes_rebuilt"] >= 2
