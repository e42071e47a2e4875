"""Idempotent producers while partition leaders move back and forth (issue 12 §0, acceptance 0).

The defect this guards against: librdkafka (5 in flight) had batch R1 fail with
NOT_LEADER_OR_FOLLOWER on the old leader while the pipelined R3 reached the new leader and got
OUT_OF_ORDER_SEQUENCE_NUMBER (the new leader held R1 but not R2); librdkafka then bumps the
producer epoch and renumbers every unacknowledged batch, R1 included although it was stored:
duplicates and reorderings, all acknowledged. The gateway now keeps a connection's batches of a
partition behind an earlier failed one (services/gateway/produce_order.py).

Idempotent acks=all writers of all three Python client families (confluent-kafka fast enough to
keep several batches of a partition in flight, kafka-python, aiokafka) write sequenced values
to a 6-partition topic (RF 3, min.insync.replicas 2) while leaders move many times: each
round kills -9 the storage node leading the most partitions (its leaders move away), restarts
it, and moves the leaders back by ``ElectLeaders`` PREFERRED, by a kill -9 of the active
controller (its successor's first automatic preferred election) or by the running
controller's automatic preferred election (every 2 s here), in a seeded order.

The shared checker (tests/e2e/checker) judges: 0 lost, 0 duplicate, 0 reordered, 0
inconsistent, and the cluster live afterwards. ``KAFKAPY_LEADER_MOVES_SEED`` replays one run.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from tests.e2e.checker import Checker, evidence_dir
from tests.integration.kafka_support import running_cluster

pytestmark = pytest.mark.e2e

TOPIC = "moves"
PARTITIONS = 6
ROUNDS = int(os.environ.get("KAFKAPY_LEADER_MOVES_ROUNDS") or 5)
WAIT_S = 60.0
WRITERS = (
    ("c0", "confluent-kafka", 1500.0),
    ("k0", "kafka-python", 150.0),
    ("a0", "aiokafka", 150.0),
)


@pytest.fixture
def moves_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path,
        start_timeout=120,
        gateways=1,
        storage_nodes=3,
        controllers=2,
        extra={
            "storage": ["--replica.lag.time.max.ms", "3000"],
            "controller": ["--leader.imbalance.check.interval.seconds", "2"],
        },
    ) as cluster:
        yield cluster


class LeaderMover:
    """Moves the topic's leaders, one seeded round at a time, each step on the timeline.

    A round: kill -9 the storage node leading the most partitions and wait until its
    partitions are led elsewhere; restart it and wait until it is back in every ISR; then move
    the leaders back by one of ElectLeaders PREFERRED, a kill -9 of the active controller (its
    successor's first automatic preferred election) or the running controller's automatic
    preferred election; wait until every leader is its preferred replica again."""

    def __init__(self, cluster: LocalCluster, checker: Checker, seed: int) -> None:
        self.cluster = cluster
        self.checker = checker
        self.rng = random.Random(seed)
        self.admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        self.zk = KazooClient(cluster.zk_connect)
        self.zk.start(timeout=15)
        self.moves = 0
        self.how: dict[str, int] = {}

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def states(self) -> dict[int, tuple[int, list[int]]]:
        """partition -> (leader, isr) from ZooKeeper."""
        out: dict[int, tuple[int, list[int]]] = {}
        for p in range(PARTITIONS):
            data, _ = self.zk.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")
            state = json.loads(data)
            out[p] = (int(state["leader"]), [int(r) for r in state["isr"]])
        return out

    def preferred(self) -> dict[int, int]:
        data, _ = self.zk.get(f"/brokers/topics/{TOPIC}")
        return {int(p): r[0] for p, r in json.loads(data)["partitions"].items()}

    def leaders(self) -> dict[int, int]:
        return {p: s[0] for p, s in self.states().items()}

    def _wait(
        self,
        what: str,
        before: dict[int, int],
        done: Callable[[dict[int, tuple[int, list[int]]]], bool],
    ) -> None:
        """Wait until ``done(states)``; count the leaders that differ from ``before``."""
        deadline = time.monotonic() + WAIT_S
        while True:
            states = self.states()
            if done(states):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {WAIT_S:g}s: {what} ({states})")
            time.sleep(0.2)
        moved = sum(1 for p, s in states.items() if s[0] != before[p])
        self.moves += moved
        self.checker.note(f"{what}: {moved} leaders moved, leaders {states}")

    def round(self) -> None:
        before = self.leaders()
        leaders = list(before.values())
        most = max(leaders.count(n) for n in leaders)
        victim = self.rng.choice(sorted(n for n in set(leaders) if leaders.count(n) == most))
        self.checker.fault(f"kill -9 storage-{victim} (leads {most})")
        self.cluster.kill("storage", victim, signal.SIGKILL)
        self._wait(
            f"storage-{victim} leads nothing",
            before,
            lambda st: all(s[0] not in (victim, -1) for s in st.values()),
        )
        time.sleep(self.rng.uniform(0.0, 1.0))
        self.cluster.start_process("storage", victim, timeout=90)
        self.checker.note(f"storage-{victim} restarted")
        before = self.leaders()
        self._wait(
            f"storage-{victim} in every ISR",
            before,
            lambda st: all(victim in s[1] for s in st.values()),
        )
        before = self.leaders()
        how = self.rng.choice(["ElectLeaders", "controller failover", "automatic"])
        self.how[how] = self.how.get(how, 0) + 1
        if how == "ElectLeaders":
            self.checker.fault("ElectLeaders PREFERRED")
            futures = self.admin.elect_leaders(
                ElectionType.PREFERRED, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
            )
            with contextlib.suppress(Exception):  # "already preferred" is an answer too
                futures.result(30)
        elif how == "controller failover":
            active = self.cluster.active_controller_index(timeout=10)
            assert active is not None, "no active controller"
            self.checker.fault(f"kill -9 controller-{active} (active)")
            self.cluster.kill("controller", active, signal.SIGKILL)
            time.sleep(self.rng.uniform(0.2, 1.0))
            self.cluster.start_process("controller", active, timeout=60)
        preferred = self.preferred()
        self._wait(
            f"leaders preferred again ({how})",
            before,
            lambda st: all(s[0] == preferred[p] for p, s in st.items()),
        )
        time.sleep(self.rng.uniform(0.5, 1.5))


@pytest.mark.timeout(600)
def test_idempotent_writers_see_no_duplicates_across_leader_moves(
    moves_cluster: LocalCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    seed = int(os.environ.get("KAFKAPY_LEADER_MOVES_SEED") or random.randrange(1 << 30))
    with Checker(
        moves_cluster,
        TOPIC,
        evidence=evidence_dir(tmp_path, request.node.name),
        writers=WRITERS,
        group_members=1,
        seed=seed,
    ) as checker:
        checker.create_topic(partitions=PARTITIONS, config={"min.insync.replicas": "2"})
        checker.start()
        mover = LeaderMover(moves_cluster, checker, seed)
        stuck: AssertionError | None = None
        try:
            time.sleep(2.0)
            for _ in range(ROUNDS):
                mover.round()
        except AssertionError as exc:  # a move that never completed: judged after the verdicts
            stuck = exc
            checker.note(f"leader moves stopped: {exc}")
        finally:
            mover.close()
        outcome = checker.finish()
    print(f"seed {seed}: {mover.moves} leader moves, moved back by {mover.how}")  # noqa: T201
    if stuck is not None:
        raise AssertionError(f"{stuck} (evidence: {outcome.evidence})")
    assert mover.moves >= 2 * ROUNDS, f"only {mover.moves} leader moves"
    outcome.assert_ok()
