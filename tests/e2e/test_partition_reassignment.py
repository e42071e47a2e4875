"""Partition reassignment under load (issue 13 §1: acceptance 1 and the reassignment half of 7).

One cluster of 5 storage nodes (zones a, b, c, a, b) and 2 controllers; the shared checker's
idempotent acks=all writers and consumer group run on a 24-partition topic (RF 3,
min.insync.replicas 2) the whole time, while:

1. kafka-python's ``KafkaAdminClient.alter_partition_reassignments`` moves 8 partitions to other
   nodes (their leader among the replicas removed) and lowers RF 3 -> 2 on 2 others; the
   errors Kafka answers are checked on the same client (cancel of nothing, unknown partition,
   duplicate replicas, a broker that is not alive; on the wire also an empty list and a v1
   request refusing replication-factor changes) and ``list_partition_reassignments`` is polled
   until nothing moves;
2. ``kafka-py reassign-partitions --generate/--execute/--verify`` raises those 2 back to RF 3
   and moves 10 more partitions, with Kafka's JSON files;
3. a reassignment onto a SIGSTOPped node is cancelled midway (``--cancel``): the partition is
   back on its original replicas and the half-made replica is deleted once the node resumes;
4. a reassignment onto a node that is then killed is started, the active controller is
   killed -9, the node restarted: the new controller finishes it from ZooKeeper;
5. the legacy ``/admin/reassign_partitions`` znode (Kafka's JSON) moves one more partition and
   reorders another (a preferred-leader change), and is removed when done;
6. a replica is reassigned away while its node is killed: the move completes without it, and
   the node deletes its copy once it registers again.

Every one of the 24 partitions is reassigned at least once.

Then the checker judges (0 lost / duplicate / reordered / inconsistent, cluster live), every
final replica set equals its target, the replicas of each partition hold byte-identical log
segments, and removed replicas are gone from their nodes' disks.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from kafka.structs import TopicPartition
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from services.cli.local_cluster import LocalCluster
from services.cli.wire import bootstrap_exchange
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.zk import layout
from tests.e2e.checker import Checker, evidence_dir
from tests.integration.kafka_support import cli_ok, kafka_py, one_line, running_cluster, wait_for

pytestmark = pytest.mark.e2e

TOPIC = "moving"
PARTITIONS = 24
NODES = 5
WAIT_S = 60.0
# Nodes are SIGSTOPped (so they cannot catch up) while reassignments onto them are submitted and
# cancelled: a session timeout well above those windows keeps them registered on a loaded
# machine (with the local cluster's 3 s a slow request let a stopped node's session expire, and
# a replica cannot be added on a node that is not registered).
SESSION_TIMEOUT_MS = 8000


@pytest.fixture
def five_node_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path,
        start_timeout=120,
        gateways=1,
        storage_nodes=NODES,
        controllers=2,
        zones=("zone-a", "zone-b", "zone-c", "zone-a", "zone-b"),
        zk_session_timeout_ms=SESSION_TIMEOUT_MS,
    ) as cluster:
        yield cluster


class View:
    """The topic's assignment and ISRs as the controller wrote them in ZooKeeper."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.zk = KazooClient(cluster.zk_connect)
        self.zk.start(timeout=15)

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def topic(self) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.zk.get(layout.topic_path(TOPIC))[0])
        return body

    def replicas(self) -> dict[int, list[int]]:
        return {int(p): r for p, r in self.topic()["partitions"].items()}

    def isr(self, p: int) -> list[int]:
        return list(json.loads(self.zk.get(layout.partition_state_path(TOPIC, p))[0])["isr"])

    def wait(self, what: str, done: Callable[[], bool], timeout: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
            time.sleep(0.2)

    def wait_targets(self, targets: dict[int, list[int]]) -> None:
        """Every target reached: the replica list in order, nothing being added or removed,
        every target replica in the ISR."""

        def done() -> bool:
            body = self.topic()
            return (
                all(body["partitions"][str(p)] == r for p, r in targets.items())
                and not any(str(p) in body.get("adding_replicas", {}) for p in targets)
                and not any(str(p) in body.get("removing_replicas", {}) for p in targets)
                and all(set(self.isr(p)) == set(r) for p, r in targets.items())
            )

        self.wait(f"targets {targets} (now {self.replicas()})", done)


def _moved(current: list[int], keep: int, nodes: range) -> list[int]:
    """``current`` with all but its ``keep`` last replicas replaced by nodes it does not use
    (so the first replica, the usual leader, is removed)."""
    kept = current[len(current) - keep :]
    spare = [n for n in nodes if n not in current]
    return spare[: len(current) - keep] + kept


def _log_bytes(cluster: LocalCluster, node: int, p: int) -> bytes | None:
    """The partition's record batches on ``node``: its segments concatenated in offset order."""
    for d in cluster.storage_dirs(node):
        part = d / f"{TOPIC}-{p}"
        if part.is_dir():
            return b"".join(f.read_bytes() for f in sorted(part.glob("*.log")))
    return None


def _reassigning_gauge(cluster: LocalCluster) -> float:
    """``kafkapy_controller_reassigning_partitions`` of the active controller."""
    index = cluster.active_controller_index()
    assert index is not None
    with urllib.request.urlopen(cluster.admin_url("controller", index) + "/metrics") as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "kafkapy_controller_reassigning_partitions":
            return float(family.samples[0].value)
    raise AssertionError("no kafkapy_controller_reassigning_partitions on /metrics")


def _write_plan(path: Path, moves: dict[int, list[int]]) -> Path:
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": TOPIC, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                    for p, r in sorted(moves.items())
                ],
            }
        )
    )
    return path


def test_reassignment_under_load(five_node_cluster: LocalCluster, tmp_path: Path) -> None:
    cluster = five_node_cluster
    nodes = range(NODES)
    bootstrap = ["--bootstrap-server", cluster.bootstrap]
    view = View(cluster)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="reassign-test")
    targets: dict[int, list[int]] = {}
    removed: dict[int, set[int]] = {}  # partition -> nodes that must no longer hold it
    stopped: list[int] = []
    killed_controller: int | None = None

    def target(p: int, replicas: list[int]) -> None:
        before = set(view.replicas()[p])
        targets[p] = replicas
        removed[p] = removed.get(p, set()) | (before - set(replicas))

    def heal() -> None:
        for node in stopped:
            cluster.kill("storage", node, signal.SIGCONT)
        if killed_controller is not None:
            cluster.start_process("controller", killed_controller, timeout=60)

    try:
        with Checker(cluster, TOPIC, evidence=evidence_dir(tmp_path, "reassignment")) as checker:
            checker.create_topic(PARTITIONS, 3, {"min.insync.replicas": "2"})
            checker.start()
            time.sleep(3)
            start = view.replicas()

            # 1. kafka-python: moves (leader removed) and RF 3 -> 2
            moves = {p: _moved(start[p], 1, nodes) for p in range(8)}
            moves |= {p: start[p][1:] for p in (8, 9)}
            for p, r in moves.items():
                target(p, r)
            checker.fault(f"kafka-python alter_partition_reassignments {moves}")
            answer = admin.alter_partition_reassignments(
                {TopicPartition(TOPIC, p): r for p, r in moves.items()}
            )
            assert answer == {TopicPartition(TOPIC, p): None for p in moves}
            errors = admin.alter_partition_reassignments(
                {
                    TopicPartition(TOPIC, 11): None,
                    TopicPartition(TOPIC, 99): [0, 1],
                    TopicPartition("no-such-topic", 0): [0, 1],
                    TopicPartition(TOPIC, 10): [0, 0, 1],
                    TopicPartition(TOPIC, 9): [0, 1, 42],
                }
            )
            assert errors == {
                TopicPartition(TOPIC, 11): NoReassignmentInProgressError,
                TopicPartition(TOPIC, 99): UnknownTopicOrPartitionError,
                TopicPartition("no-such-topic", 0): UnknownTopicOrPartitionError,
                TopicPartition(TOPIC, 10): InvalidReplicationAssignmentError,
                TopicPartition(TOPIC, 9): InvalidReplicationAssignmentError,
            }
            # on the wire, what kafka-python refuses to send: an empty list, and v1 with
            # allow_replication_factor_change=false changing the replication factor (KIP-860)
            raw = bootstrap_exchange(
                cluster.bootstrap,
                ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                1,
                {
                    "timeout": 10000,
                    "allow_replication_factor_change": False,
                    "topics": [
                        {
                            "name": TOPIC,
                            "partitions": [
                                {"partition_index": 10, "replicas": []},
                                {"partition_index": 11, "replicas": start[11][:2]},
                            ],
                        }
                    ],
                },
                30,
            )
            assert raw["error_code"] == 0 and raw["allow_replication_factor_change"] is False
            codes = {
                p["partition_index"]: p["error_code"] for p in raw["responses"][0]["partitions"]
            }
            assert codes == {
                10: ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                11: ErrorCode.INVALID_REPLICATION_FACTOR,
            }
            view.wait(
                "kafka-python lists no ongoing reassignment",
                lambda: admin.list_partition_reassignments() == {},
            )
            view.wait_targets(dict(targets))
            checker.note("phase 1 done")

            # 2. the CLI: RF 2 -> 3 back on 8 and 9, ten more partitions moved
            now = view.replicas()
            moves = {p: now[p] + [n for n in nodes if n not in now[p]][:1] for p in (8, 9)}
            moves |= {p: _moved(now[p], 2, nodes) for p in range(10, 20)}
            for p, r in moves.items():
                target(p, r)
            topics_file = tmp_path / "topics.json"
            topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": TOPIC}]}))
            generated = cli_ok(
                "reassign-partitions", *bootstrap, "--generate",
                "--topics-to-move-json-file", str(topics_file), "--broker-list", "0,1,2,3,4",
            )  # fmt: skip
            lines = generated.splitlines()
            assert lines[0] == "Current partition replica assignment"
            assert lines[3] == "Proposed partition reassignment configuration"
            proposal = json.loads(lines[4])["partitions"]
            assert len(proposal) == PARTITIONS
            assert all(len(set(e["replicas"])) == len(e["replicas"]) for e in proposal)
            plan = _write_plan(tmp_path / "plan.json", moves)
            checker.fault(f"reassign-partitions --execute {moves}")
            out = cli_ok("reassign-partitions", *bootstrap, "--execute",
                         "--reassignment-json-file", str(plan))  # fmt: skip
            lines = out.splitlines()
            assert lines[0] == "Current partition replica assignment"
            rollback = json.loads(lines[2])["partitions"]
            assert {e["partition"]: e["replicas"] for e in rollback} == {p: now[p] for p in moves}
            assert (
                lines[4]
                == "Save this to use as the --reassignment-json-file option during rollback"
            )
            assert lines[-1] == "Successfully started partition reassignments for " + ",".join(
                f"{TOPIC}-{p}" for p in sorted(moves)
            )
            deadline = time.monotonic() + WAIT_S
            while True:
                verify = cli_ok("reassign-partitions", *bootstrap, "--verify",
                                "--reassignment-json-file", str(plan))  # fmt: skip
                assert verify.splitlines()[0] == "Status of partition reassignment:"
                if all(
                    f"Reassignment of partition {TOPIC}-{p} is completed." in verify for p in moves
                ):
                    break
                assert "is still in progress." in verify, verify
                assert time.monotonic() < deadline, verify
                time.sleep(0.5)
            view.wait_targets(dict(targets))
            bad = _write_plan(tmp_path / "bad.json", {99: [0, 1], 0: [0, 1, 42]})
            res = kafka_py("reassign-partitions", *bootstrap, "--execute",
                           "--reassignment-json-file", str(bad))  # fmt: skip
            assert res.returncode == 1 and "Traceback" not in res.stderr
            line = one_line(res.stderr)
            assert line.startswith(f"error: Error reassigning partition(s): {TOPIC}-0: "), line
            assert (
                f"{TOPIC}-0: INVALID_REPLICA_ASSIGNMENT: Replica assignment has brokers that are "
                "not alive." in line
            )
            assert line.endswith(
                f"; {TOPIC}-99: UNKNOWN_TOPIC_OR_PARTITION: The partition does not exist."
            )
            checker.note("phase 2 done")

            # 3. cancelled midway: the node to add is stopped, so it cannot catch up
            now = view.replicas()
            p = 20
            x = next(n for n in nodes if n not in now[p])
            cluster.kill("storage", x, signal.SIGSTOP)
            stopped.append(x)
            checker.fault(f"SIGSTOP storage-{x}; reassign {TOPIC}-{p} {now[p]} -> +{x}")
            cancel_plan = _write_plan(tmp_path / "cancel.json", {p: now[p][1:] + [x]})
            cli_ok("reassign-partitions", *bootstrap, "--execute",
                   "--reassignment-json-file", str(cancel_plan))  # fmt: skip
            ongoing = admin.list_partition_reassignments()
            assert ongoing[TopicPartition(TOPIC, p)]["adding_replicas"] == [x]
            assert _reassigning_gauge(cluster) == 1.0
            out = cli_ok("reassign-partitions", *bootstrap, "--cancel",
                         "--reassignment-json-file", str(cancel_plan))  # fmt: skip
            assert out.strip() == f"Successfully cancelled partition reassignment for: {TOPIC}-{p}"
            cluster.kill("storage", x, signal.SIGCONT)
            stopped.remove(x)
            assert admin.list_partition_reassignments() == {}
            # the original replicas, in their order within the full list (as Kafka: the topic
            # znode keeps no other order)
            reverted = view.replicas()[p]
            assert reverted == now[p][1:] + now[p][:1]
            again = cli_ok("reassign-partitions", *bootstrap, "--cancel",
                           "--reassignment-json-file", str(cancel_plan))  # fmt: skip
            assert again.strip() == "None of the specified partition reassignments are active."
            targets[p] = reverted
            removed[p] = removed.get(p, set()) | {x}
            view.wait(
                f"the cancelled replica of {TOPIC}-{p} deleted from storage-{x}",
                lambda: _log_bytes(cluster, x, p) is None,
            )
            checker.note("phase 3 done")

            # 4. controller failover mid-reassignment, the new node restarted meanwhile
            now = view.replicas()
            p = 21
            y = next(n for n in nodes if n not in now[p])
            cluster.kill("storage", y, signal.SIGSTOP)
            stopped.append(y)
            target(p, [y, *now[p][1:]])
            checker.fault(f"SIGSTOP storage-{y}; reassign {TOPIC}-{p} {now[p]} -> {targets[p]}")
            assert admin.alter_partition_reassignments({TopicPartition(TOPIC, p): targets[p]}) == {
                TopicPartition(TOPIC, p): None
            }
            assert view.topic()["adding_replicas"] == {str(p): [y]}
            killed_controller = cluster.active_controller_index()
            assert killed_controller is not None
            checker.fault(f"kill -9 controller-{killed_controller}, kill -9 storage-{y}")
            cluster.kill("controller", killed_controller, signal.SIGKILL)
            cluster.kill("storage", y, signal.SIGKILL)
            stopped.remove(y)
            cluster.start_process("storage", y, timeout=90)
            checker.note(f"storage-{y} restarted")
            view.wait_targets({p: targets[p]})
            successor = cluster.active_controller_index()
            assert successor not in (None, killed_controller)
            successor_log = cluster.log_path("controller", successor)
            assert "resuming partition reassignment" in successor_log.read_text()
            # the controller logs the completion right after the znodes the wait above saw
            wait_for(
                "the new active controller completing the reassignment (its log)",
                lambda: any(
                    "partition reassignment completed" in line and f"{TOPIC}-{p}" in line
                    for line in successor_log.read_text().splitlines()
                ),
                timeout=10,
            )
            cluster.start_process("controller", killed_controller, timeout=60)
            killed_controller = None
            checker.note("phase 4 done")

            # 5. the legacy znode
            now = view.replicas()
            legacy = {(TOPIC, 22): _moved(now[22], 1, nodes), (TOPIC, 23): now[23][::-1]}
            for (_, p), r in legacy.items():
                target(p, r)
            checker.fault(f"/admin/reassign_partitions {legacy}")
            view.zk.create(layout.REASSIGN_PARTITIONS, layout.reassign_partitions_json(legacy))
            view.wait_targets({p: targets[p] for _, p in legacy})
            view.wait(
                "/admin/reassign_partitions removed",
                lambda: view.zk.exists(layout.REASSIGN_PARTITIONS) is None,
            )

            # 6. a replica removed while its node is down is deleted when the node returns
            now = view.replicas()
            p = 0
            z = now[p][-1]
            spare = next(n for n in nodes if n not in now[p])
            checker.fault(f"kill -9 storage-{z}; reassign {TOPIC}-{p} {now[p]} without it")
            cluster.kill("storage", z, signal.SIGKILL)
            target(p, [*now[p][:-1], spare])
            assert admin.alter_partition_reassignments({TopicPartition(TOPIC, p): targets[p]}) == {
                TopicPartition(TOPIC, p): None
            }
            view.wait_targets({p: targets[p]})
            assert _log_bytes(cluster, z, p) is not None
            cluster.start_process("storage", z, timeout=90)
            checker.note(f"storage-{z} restarted")
            view.wait(
                f"{TOPIC}-{p} deleted from storage-{z} once it registered again",
                lambda: _log_bytes(cluster, z, p) is None,
            )
            # a killed controller is replaced after its session expired: allow two sessions
            outcome = checker.finish(
                heal=heal, max_controller_gap=2 * SESSION_TIMEOUT_MS / 1000 + 4
            )
        outcome.assert_ok()

        final = view.replicas()
        for p, r in targets.items():
            assert final[p] == r, (p, final[p], r)
        assert view.topic()["adding_replicas"] == {} and view.topic()["removing_replicas"] == {}

        def identical() -> bool:
            for p, replicas in final.items():
                copies = {n: _log_bytes(cluster, n, p) for n in replicas}
                if None in copies.values() or len(set(copies.values())) != 1:
                    return False
            return True

        view.wait("replicas hold byte-identical segments", identical)
        for p, gone in removed.items():
            for n in gone - set(final[p]):
                view.wait(
                    f"{TOPIC}-{p} deleted from storage-{n}",
                    lambda n=n, p=p: _log_bytes(cluster, n, p) is None,  # type: ignore[misc]
                )
    finally:
        admin.close()
        view.close()
        for node in stopped:
            cluster.kill("storage", node, signal.SIGCONT)
