"""Exactly-once consume-transform-produce under faults (issue 15, acceptance 4).

50,000 input records (RF 3, min.insync.replicas 2) go through the checker's transactional
pipeline (two confluent-kafka workers: read_committed consumers of one group, transactional
producers with ``send_offsets_to_transaction``, every 10th transaction aborted on purpose;
the input fed in 8 steps, one before each fault, so that each finds transactions running)
while the test hits, one after another, timed by the pipeline's phases: the transaction
coordinator owning a worker's ``transactional.id`` killed -9 before, during and after its
EndTxn; the leader of an output partition holding the open transaction; the group coordinator
holding its pending transactional offsets; a gateway; and the transaction coordinator stopped
(SIGSTOP) past its ZooKeeper session. After the heal the checker reads the output
read_committed and read_uncommitted and the group's offsets: output = input transformed, no
duplicate, no loss, no aborted read, committed offsets match the output, no hanging LSO.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from services.common.zk.layout import TRANSACTION
from tests.e2e.checker import SAFETY, TXN_SAFETY, Checker, Schedule, evidence_dir
from tests.e2e.checker.txn import coordinator_states
from tests.integration.kafka_support import shard_owner, wait_for_topic, zk_partition_state

pytestmark = pytest.mark.e2e

SESSION_TIMEOUT_MS = 3000
RECORDS = 50_000
PARTITIONS = 6
TC = "transaction_coordinator"
GC = "group_coordinator"


@pytest.fixture
def txn_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path / "cluster",
        gateways=2,
        storage_nodes=3,
        controllers=1,
        group_coordinators=2,
        transaction_coordinators=2,
        gateway_port=0,
        zk_port=0,
        zk_session_timeout_ms=SESSION_TIMEOUT_MS,
        extra={"storage": ["--replica.lag.time.max.ms", "5000"]},
    )
    cluster.start(timeout=120)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.timeout(600)
def test_exactly_once_pipeline_under_transactional_faults(
    txn_cluster: LocalCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cluster = txn_cluster
    seed = int(os.environ.get("KAFKAPY_CHECKER_SEED") or random.randrange(1 << 30))
    rnd = random.Random(seed)
    started = time.monotonic()
    with Checker(
        cluster,
        "eos-in",
        evidence=evidence_dir(tmp_path, request.node.name),
        writers=(),
        group=None,
        seed=seed,
    ) as checker:
        config = {"min.insync.replicas": "2"}
        checker.create_topic(partitions=PARTITIONS, config=config)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("eos-out", PARTITIONS, 3, config=config)])["eos-out"].result(
            60
        )
        wait_for_topic(admin, "eos-out", PARTITIONS, timeout=60)
        nemesis = checker.run_schedule(Schedule(seed))  # no scheduled fault: its heal
        # the input comes in 8 steps, one before each fault: each finds transactions running
        step = RECORDS // 8
        assert step * 8 == RECORDS
        pipeline = checker.transactions("eos-out", step, group="eos", batch=100)
        txn_id = f"{pipeline.group}-{pipeline.hooked_worker}"
        zk = KazooClient(hosts=cluster.zk_connect)
        zk.start()
        down: list[tuple[str, int]] = []
        prepared_seen: list[int] = []

        def kill(role: str, index: int, why: str, sig: int = signal.SIGKILL) -> None:
            verb = "kill -9" if sig == signal.SIGKILL else "SIGSTOP"
            checker.fault(f"{verb} {role} ({why})")
            checker.note(f"{verb} {role}-{index}: {why}")
            cluster.kill(role, index, sig)
            if sig == signal.SIGKILL:
                down.append((role, index))

        def txn_owner() -> int:
            return shard_owner(zk, txn_id, TRANSACTION)[1]

        def restart_down(hold: float = 1.5) -> None:
            time.sleep(hold)
            while down:
                role, index = down.pop()
                cluster.start_process(role, index, timeout=90)
                checker.note(f"{role}-{index} restarted")
            time.sleep(rnd.uniform(0.5, 2.0))

        watchers: list[threading.Thread] = []

        def at(phase: str, action: Callable[[], None]) -> None:
            pipeline.feed(step)
            assert pipeline.at_phase(phase, action, timeout=90), (
                f"the pipeline never reached {phase}"
            )
            for t in watchers:
                t.join()
            watchers.clear()
            restart_down()

        def kill_when_prepared() -> None:
            """From a thread (the worker goes on into commit_transaction): kill -9 the owner
            once its /metrics show a prepared transaction, i.e. EndTxn wrote PrepareCommit and
            the markers are not all written."""
            owner = txn_owner()
            port = {p.name: p.admin_port for p in cluster.processes()}[f"{TC}-{owner}"]
            assert port is not None

            def watch() -> None:
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline:
                    with contextlib.suppress(OSError):
                        states = coordinator_states(cluster.host, port)
                        if states.get("PrepareCommit", 0) + states.get("PrepareAbort", 0):
                            prepared_seen.append(owner)
                            break
                kill(TC, owner, "transaction coordinator, during EndTxn")

            watchers.append(threading.Thread(target=watch, daemon=True))
            watchers[-1].start()

        try:
            at(
                "offsets_sent",
                lambda: kill(TC, txn_owner(), "transaction coordinator, before EndTxn"),
            )
            at("committing", kill_when_prepared)
            at("committed", lambda: kill(TC, txn_owner(), "transaction coordinator, after EndTxn"))
            out_p = rnd.randrange(PARTITIONS)
            at(
                "produced",
                lambda: kill(
                    "storage",
                    zk_partition_state(cluster.zk_connect, "eos-out", out_p)["leader"],
                    "leader of an output partition in an open transaction",
                ),
            )
            at(
                "offsets_sent",
                lambda: kill(
                    GC, shard_owner(zk, pipeline.group)[1], "group coordinator with pending offsets"
                ),
            )
            at("produced", lambda: kill("gateway", rnd.randrange(2), "gateway"))
            owner = txn_owner()
            at(
                "produced",
                lambda: kill(
                    TC, owner, "transaction coordinator past its ZooKeeper session", signal.SIGSTOP
                ),
            )
            time.sleep(SESSION_TIMEOUT_MS / 1000 * 2)
            cluster.kill(TC, owner, signal.SIGCONT)
            checker.note(f"SIGCONT {TC}-{owner}")
            if pipeline.fed < RECORDS:
                pipeline.feed(RECORDS - pipeline.fed)
        finally:
            zk.stop()
            zk.close()
        outcome = checker.finish(heal=nemesis.heal, drain_timeout=90)
    txn = outcome.history.txn
    assert txn is not None and txn.committed_read and txn.uncommitted_read
    resumed = sum(
        cluster.log_path(TC, i).read_text().count(f"Completing transaction for {txn_id} with state")
        for i in range(2)
    )
    print(  # noqa: T201 - the checker's counts belong in the test output
        f"transactions: {dict(txn.counts)}; killed during EndTxn with a prepared "
        f"transaction on its /metrics: {bool(prepared_seen)}; {resumed} prepared transactions "
        f"of {txn_id} "
        "completed by a new coordinator; output read_committed "
        f"{sum(len(r) for r in txn.committed_read.records.values())} records, read_uncommitted "
        f"{sum(len(r) for r in txn.uncommitted_read.records.values())}; "
        f"{time.monotonic() - started:.0f}s from the cluster's start"
    )
    assert len(checker.own_faults) == 7
    outcome.assert_ok(SAFETY + TXN_SAFETY)
