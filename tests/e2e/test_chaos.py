"""The shared checker under a mixed schedule of every fault class (issue 12, acceptance 2).

Four idempotent acks=all writers (two confluent-kafka with 5 in flight, kafka-python,
aiokafka) and a two-member consumer group run on a 6-partition topic (RF 3,
min.insync.replicas 2) while the nemesis applies, one after another for at least 90 s:
kill -9, SIGSTOP/SIGCONT and SIGTERM + restart of storage nodes, controllers (mostly the active
one), gateways and group coordinators, ZooKeeper paused past the session timeout at least
three times, and ZooKeeper killed -9 and restarted on its data dir. After the heal: 0 lost, 0 duplicate, 0 reordered, 0 inconsistent, no group
anomaly, and the cluster is live again (one acting controller, every partition led with a full
ISR, every shard placed, writers acked, the group reads to the end and commits).

The schedule is seeded: ``KAFKAPY_CHECKER_SEED`` replays one; the seed is printed in the
summary. Evidence goes to ``$KAFKAPY_CHECKER_EVIDENCE`` (or the test's tmp path).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.cli.local_cluster import LocalCluster
from tests.e2e.checker import Checker, Schedule, evidence_dir
from tests.integration.kafka_support import running_cluster

pytestmark = pytest.mark.e2e

SESSION_TIMEOUT_MS = 3000
FAULT_SECONDS = 90.0


@pytest.fixture
def chaos_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path,
        start_timeout=120,
        gateways=2,
        storage_nodes=3,
        controllers=2,
        group_coordinators=2,
        zk_session_timeout_ms=SESSION_TIMEOUT_MS,
        extra={"storage": ["--replica.lag.time.max.ms", "5000"]},
    ) as cluster:
        yield cluster


@pytest.mark.timeout(420)
def test_mixed_faults_lose_nothing_and_the_cluster_heals(
    chaos_cluster: LocalCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    seed = int(os.environ.get("KAFKAPY_CHECKER_SEED") or random.randrange(1 << 30))
    with Checker(
        chaos_cluster, "chaos", evidence=evidence_dir(tmp_path, request.node.name), seed=seed
    ) as checker:
        checker.create_topic(partitions=6, config={"min.insync.replicas": "2"})
        checker.start()
        schedule = Schedule.mixed(
            seed,
            checker.layout(),
            duration=FAULT_SECONDS,
            session_timeout_s=SESSION_TIMEOUT_MS / 1000,
            zookeeper_pauses=3,
        )
        nemesis = checker.run_schedule(schedule)
        outcome = checker.finish(heal=nemesis.heal)
    assert outcome.fault_seconds >= FAULT_SECONDS
    outcome.assert_ok()
