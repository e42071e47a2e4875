"""Idempotent writers while the ISR falls below min.insync.replicas and grows back, with no
leader move on the surviving node: nothing acknowledged is lost or written twice.

The duplicates of checker seed 540026937 (issue 12, "open") came from such a window: a batch
appended, then answered NOT_ENOUGH_REPLICAS_AFTER_APPEND when the controller bumped the
partition's epoch with ISR [1] (its followers stopped), then written again under a new
producer epoch after the ISR grew back (decision "a leader answers the batch behind one it
refused with that refusal"). Each round SIGSTOPs two of the three storage nodes past their
session timeout, so the third leads every partition with itself alone in the ISR (the
partitions it led get a new epoch without a move), then resumes them and waits until every
ISR is full again; the node left running changes every round.

Besides the checker's verdicts, librdkafka's own log (its ``eos`` debug context, kept in the
evidence; ``KAFKAPY_CHECKER_RDKAFKA_DEBUG`` may add more) must show no epoch bump for "skipped
sequence numbers": the out-of-order answer that starts the duplication. Before the fix, one of
5 runs (3 to 8 rounds each) showed one (R1 refused NOT_ENOUGH_REPLICAS, the ISR grew back while the
pipelined R2 arrived: OUT_OF_ORDER_SEQUENCE_NUMBER, PID epoch 0 -> 1).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from tests.e2e.checker import Checker, evidence_dir
from tests.e2e.checker.liveness import partitions_led_with_full_isr
from tests.e2e.checker.workload import RDKAFKA_DEBUG_ENV
from tests.integration.kafka_support import running_cluster

pytestmark = pytest.mark.e2e

SESSION_MS = 3000
ROUNDS = 5
IMPLICIT_ACK = re.compile(r"(\d+) message\(s\) implicitly acked")
STOPPED_S = 5.0  # past the session timeout: the controller takes the nodes out of every ISR


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path,
        gateways=1,
        storage_nodes=3,
        controllers=1,
        group_coordinators=0,
        zk_session_timeout_ms=SESSION_MS,
        extra={"storage": ["--replica.lag.time.max.ms", "3000"]},
    ) as c:
        yield c


def wait_full_isr(cluster: LocalCluster, timeout: float = 60.0) -> float:
    """Seconds until every partition is led with a full ISR."""
    started = time.monotonic()
    zk = KazooClient(hosts=cluster.zk_connect, timeout=5)
    zk.start(15)
    try:
        while True:
            ok, detail = partitions_led_with_full_isr(cluster, zk)
            if ok:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise AssertionError(f"ISRs not full after {timeout:g}s: {detail}")
            time.sleep(0.2)
    finally:
        zk.stop()
        zk.close()


@pytest.mark.timeout(400)
def test_isr_below_min_insync_and_back_writes_nothing_twice(
    cluster: LocalCluster,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if "eos" not in os.environ.get(RDKAFKA_DEBUG_ENV, ""):
        monkeypatch.setenv(RDKAFKA_DEBUG_ENV, "eos")
    evidence = evidence_dir(tmp_path, request.node.name)
    with Checker(cluster, "below-min-isr", evidence=evidence, group=None) as checker:
        checker.create_topic(partitions=6, config={"min.insync.replicas": "2"})
        checker.start()
        for w in checker.writers:
            w.wait_acks(300)
        for round_ in range(ROUNDS):
            keep = round_ % 3
            stopped = [i for i in range(3) if i != keep]
            for i in stopped:
                cluster.kill("storage", i, signal.SIGSTOP)
            checker.fault(
                f"SIGSTOP storage-{stopped[0]} and storage-{stopped[1]} for {STOPPED_S:g}s "
                f"(storage-{keep} alone in every ISR)"
            )
            time.sleep(STOPPED_S)
            for i in stopped:
                cluster.kill("storage", i, signal.SIGCONT)
            checker.note(f"SIGCONT storage-{stopped[0]} and storage-{stopped[1]}", "nemesis")
            took = wait_full_isr(cluster)
            checker.note(f"every ISR full again {took:.1f}s after the resume", "nemesis")
            time.sleep(1.0)
        outcome = checker.finish()
    outcome.assert_ok()
    logs = sorted(evidence.glob("rdkafka-*.log"))
    assert logs, f"no librdkafka debug log in {evidence}"
    bumps = [
        line
        for log in logs
        for line in log.read_text(errors="replace").splitlines()
        if "skipped sequence numbers" in line and "ERRSEQ" in line
    ]
    assert not bumps, "\n".join(bumps[:5])
    # An ack without an offset must be one of librdkafka's implicit acks (a request answered
    # NOT_ENOUGH_REPLICAS_AFTER_APPEND, then a later batch's success), which its log names.
    implicit = sum(
        int(m.group(1))
        for log in logs
        for m in IMPLICIT_ACK.finditer(log.read_text(errors="replace"))
    )
    assert outcome.history.acked_without_offset() <= implicit, (
        f"{outcome.history.acked_without_offset()} writes acked without an offset, "
        f"{implicit} implicit acks in librdkafka's log"
    )
