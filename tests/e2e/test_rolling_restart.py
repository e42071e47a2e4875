"""Rolling restart of every storage node with controlled shutdown, under load (issue 13,
acceptance 3).

Idempotent acks=all writers of the three Python client families and a consumer group work on a
12-partition topic (RF 3, min.insync.replicas 2) while ``kafka-py cluster restart --rolling
storage`` runs as its own process against the test's cluster (served through the cluster's
control channel, as ``kafka-py cluster up`` serves it): each node in turn is stopped with
SIGTERM (its controlled shutdown moves its leaderships away and takes it out of the ISRs), started
again on its data dir, waited for until no partition is under-replicated and it leads its
preferred partitions again.

Judged: the shared checker's verdicts (0 lost, duplicated, reordered...) and liveness; no write
failed except with a retriable error and none timed out (librdkafka writers give up on a record
after 30 s, so a produce request stuck that long fails the test; the gateway counts no storage
call that ran out of time); each stopping node led nothing when it deregistered (its own log)
and the controller moved its leaderships before it stopped (the controller's log); every node is
back in every ISR at the end (the checker's liveness).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from services.cli.cluster_control import ControlServer
from services.cli.local_cluster import LocalCluster
from tests.e2e.checker import Checker, evidence_dir

pytestmark = pytest.mark.e2e

TOPIC = "rolling"
PARTITIONS = 12
STORAGE_NODES = 3
#: what a client may retry; a delivery report with anything else is a failure
RETRIABLE = ("NOT_LEADER", "NotLeader", "LEADER_NOT_AVAILABLE", "LeaderNotAvailable")


def _events(path: Path, event: str) -> list[dict[str, object]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{") and event in line:
            body = json.loads(line)
            if body.get("event") == event:
                out.append(body)
    return out


def _timed_out_storage_calls(cluster: LocalCluster) -> int:
    url = cluster.admin_url("gateway", 0) + "/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()  # noqa: S310 - loopback
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("kafkapy_gateway_storage_rpc_errors_total")
        and 'code="DEADLINE_EXCEEDED"' in line
    )


def _rolling_restart(cluster: LocalCluster, checker: Checker) -> subprocess.CompletedProcess[str]:
    """``kafka-py cluster restart --rolling storage`` in its own process; this one serves its
    control requests meanwhile (what ``kafka-py cluster up`` does on each tick)."""
    control = ControlServer(cluster, lambda msg: checker.note(msg, "control"))
    argv = [
        sys.executable, "-m", "services.cli", "cluster", "restart", "--rolling", "storage",
        "--data-dir", str(cluster.data_dir), "--stop-timeout", "60", "--timeout", "180",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        control.poll()
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate()
    for line in out.splitlines():
        checker.note(line, "cluster restart")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.mark.timeout(1200)
def test_rolling_restart_under_load(
    fault_cluster: LocalCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cluster = fault_cluster
    timed_out_before = _timed_out_storage_calls(cluster)
    with Checker(
        cluster,
        TOPIC,
        evidence=evidence_dir(tmp_path, request.node.name),
        writer_config={"confluent-kafka": {"message.timeout.ms": 30_000}},
    ) as checker:
        checker.create_topic(partitions=PARTITIONS, config={"min.insync.replicas": "2"})
        checker.start()
        time.sleep(3.0)
        checker.fault("kafka-py cluster restart --rolling storage")
        result = _rolling_restart(cluster, checker)
        time.sleep(3.0)
        outcome = checker.finish()
    print(result.stdout)  # noqa: T201 - the restart's progress lines belong in the test output
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    assert "Traceback" not in result.stderr
    for i in range(STORAGE_NODES):
        assert f"[{i + 1}/{STORAGE_NODES}] storage-{i}: controlled shutdown" in result.stdout
        assert f"storage-{i}: no under-replicated partitions" in result.stdout
    outcome.assert_ok()

    failed = [w for w in outcome.history.writes.values() if w.error is not None]
    not_retriable = [w for w in failed if not any(r in str(w.error) for r in RETRIABLE)]
    assert not not_retriable, [(w.writer, w.seq, w.error) for w in not_retriable[:10]]
    assert _timed_out_storage_calls(cluster) == timed_out_before

    controller_logs = [cluster.log_path("controller", i) for i in range(2)]
    moved = [e for p in controller_logs for e in _events(p, "controlled shutdown handled")]
    for i in range(STORAGE_NODES):
        log = cluster.log_path("storage", i)
        assert _events(log, "controlled shutdown succeeded"), f"storage-{i}: no controlled shutdown"
        stops = _events(log, "deregistering")
        assert stops and stops[-1]["leaders"] == 0, f"storage-{i} still led at its stop: {stops}"
        handled = [e for e in moved if e["broker"] == i]
        assert handled and handled[-1]["remaining_count"] == 0, handled
