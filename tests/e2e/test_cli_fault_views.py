"""What an operator sees with kafka-py's tools while a storage node is down and after it is
back: ``topics describe --under-replicated-partitions / --unavailable-partitions /
--under-min-isr-partitions / --at-min-isr-partitions`` (kafka-topics.sh's reports, from the
controller's partition state) and ``leader-election --election-type PREFERRED`` moving leaders
back to their preferred replicas. Results are checked against ZooKeeper and with a real client.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from services.cli.local_cluster import LocalCluster
from tests.integration.kafka_support import (
    cli_ok,
    consume_confluent,
    kafka_py,
    running_cluster,
    unique_topic_name,
    wait_for,
    zk_partition_state,
)

pytestmark = pytest.mark.e2e

LINE = re.compile(
    r"\tTopic: (\S+)\tPartition: (\d+)\tLeader: (\d+|none)\tReplicas: ([\d,]+)\tIsr: ([\d,]*)"
)
DOWN = 2  # the storage node that is killed
OTHER = 1  # killed too, for the unclean election


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    # No automatic preferred election: leaders stay moved until the tool moves them back.
    with running_cluster(
        tmp_path,
        gateways=1,
        storage_nodes=3,
        controllers=1,
        extra={"controller": ["--auto.leader.rebalance.enable", "false"]},
    ) as c:
        yield c


def _report(
    bootstrap: str, option: str | None, topics: set[str]
) -> dict[tuple[str, int], tuple[str, list[int], list[int]]]:
    """Partition lines of ``topics describe [option]`` for ``topics``:
    (topic, partition) -> (leader, replicas, isr)."""
    out = cli_ok(
        "topics", "--bootstrap-server", bootstrap, "describe", *([option] if option else [])
    )
    rows = {}
    for line in out.splitlines():
        m = LINE.fullmatch(line)
        if m and m.group(1) in topics:
            isr = [int(i) for i in m.group(5).split(",")] if m.group(5) else []
            rows[(m.group(1), int(m.group(2)))] = (
                m.group(3),
                [int(i) for i in m.group(4).split(",")],
                isr,
            )
    return rows


def _produce(bootstrap: str, topic: str, partition: int, count: int) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 5000})
    for i in range(count):
        producer.produce(
            topic,
            value=f"v{i}".encode(),
            partition=partition,
            on_delivery=lambda e, m: errors.append(e),
        )
    producer.flush(15)
    return errors


def test_reports_while_a_node_is_down_and_preferred_election_after(cluster: LocalCluster) -> None:
    bs = cluster.bootstrap
    replicated = unique_topic_name("cli-urp")
    solo = unique_topic_name("cli-solo")
    unclean = unique_topic_name("cli-unclean")
    cli_ok("topics", "--bootstrap-server", bs, "create", "--topic", replicated, "--partitions", "3",
           "--replication-factor", "3", "--config", "min.insync.replicas=2")  # fmt: skip
    cli_ok("topics", "--bootstrap-server", bs, "create", "--topic", solo,
           "--replica-assignment", str(DOWN))  # fmt: skip
    cli_ok("topics", "--bootstrap-server", bs, "create", "--topic", unclean,
           "--replica-assignment", f"{DOWN}:{OTHER}")  # fmt: skip
    ours = {replicated, solo}
    wait_for("leaders", lambda: all(r[0] != "none" for r in _report(bs, None, ours).values()))
    assert _report(bs, "--under-replicated-partitions", ours) == {}
    assert _report(bs, "--unavailable-partitions", ours) == {}
    preferred_down = sorted(
        p for (t, p), (_, replicas, _) in _report(bs, None, ours).items()
        if t == replicated and replicas[0] == DOWN
    )  # fmt: skip
    assert preferred_down  # one of the three partitions prefers each node

    cluster.kill("storage", DOWN)

    def shrunk() -> bool:
        rows = _report(bs, None, ours)
        return all(DOWN not in isr for (t, _), (_, _, isr) in rows.items() if t == replicated)

    wait_for("the dead node out of every ISR", shrunk, timeout=60, interval=0.5)
    urp = _report(bs, "--under-replicated-partitions", ours)
    assert sorted(urp) == [(replicated, 0), (replicated, 1), (replicated, 2)]
    for leader, replicas, isr in urp.values():
        assert leader != "none" and int(leader) != DOWN and int(leader) in isr
        assert len(isr) == 2 and DOWN in replicas
    # the solo partition's only replica is gone: no leader (or a dead one), so unavailable,
    # and under min ISR; the replicated ones have ISR 2 == min.insync.replicas 2
    assert list(_report(bs, "--unavailable-partitions", ours)) == [(solo, 0)]
    assert list(_report(bs, "--under-min-isr-partitions", ours)) == [(solo, 0)]
    # the solo partition keeps its last ISR [DOWN] (as Kafka's controller does): 1 == min 1
    assert sorted(_report(bs, "--at-min-isr-partitions", ours)) == sorted([*urp, (solo, 0)])
    for (t, p), (leader, _, isr) in urp.items():
        state = zk_partition_state(cluster.zk_connect, t, p)
        assert (int(leader), isr) == (state["leader"], state["isr"])
    # a real client: acks=all writes to an at-min-ISR partition succeed
    assert _produce(bs, replicated, 0, 5) == [None] * 5

    cluster.start_process("storage", DOWN)
    wait_for(
        "every ISR full again",
        lambda: _report(bs, "--under-replicated-partitions", {*ours, unclean}) == {},
        timeout=90,
        interval=0.5,
    )
    moved = _report(bs, None, {replicated})
    assert all(int(moved[(replicated, p)][0]) != DOWN for p in preferred_down)

    out = cli_ok("leader-election", "--bootstrap-server", bs, "--election-type", "PREFERRED",
                 "--all-topic-partitions")  # fmt: skip
    line = next(x for x in out.splitlines() if x.startswith("Successfully completed"))
    elected = set(
        line.removeprefix(
            "Successfully completed leader election (PREFERRED) for partitions "
        ).split(", ")
    )
    assert {f"{replicated}-{p}" for p in preferred_down} <= elected
    after = _report(bs, None, {replicated})
    for p in range(3):
        leader, replicas, _ = after[(replicated, p)]
        assert int(leader) == replicas[0]  # every partition led by its preferred replica
        assert zk_partition_state(cluster.zk_connect, replicated, p)["leader"] == replicas[0]
    again = cli_ok("leader-election", "--bootstrap-server", bs, "--election-type", "PREFERRED",
                   "--topic", replicated, "--partition", str(preferred_down[0]))  # fmt: skip
    assert (
        again == f"Valid replica already elected for partitions {replicated}-{preferred_down[0]}\n"
    )
    # the records written while the node was down are all there, read from the new leader
    assert _produce(bs, replicated, preferred_down[0], 3) == [None] * 3
    read = consume_confluent(bs, replicated, [0], 5)
    assert [r.rec.value for r in read[0]][:5] == [f"v{i}".encode() for i in range(5)]

    # UNCLEAN: OTHER dies (out of the ISR), then DOWN, the last ISR member: no leader. OTHER
    # comes back, alive but not in the ISR, and only an unclean election makes it leader.
    assert _produce(bs, unclean, 0, 2) == [None] * 2
    cluster.kill("storage", OTHER)
    wait_for(
        "ISR [DOWN]",
        lambda: _report(bs, None, {unclean})[(unclean, 0)][2] == [DOWN],
        timeout=60,
        interval=0.5,
    )
    cluster.kill("storage", DOWN)
    wait_for(
        "no live leader",
        lambda: list(_report(bs, "--unavailable-partitions", {unclean})) == [(unclean, 0)],
        timeout=60,
        interval=0.5,
    )
    cluster.start_process("storage", OTHER)
    preferred = kafka_py("leader-election", "--bootstrap-server", bs, "--election-type",
                         "PREFERRED", "--topic", unclean, "--partition", "0")  # fmt: skip
    assert preferred.returncode == 1 and "could not be elected" in preferred.stderr
    out = cli_ok("leader-election", "--bootstrap-server", bs, "--election-type", "UNCLEAN",
                 "--topic", unclean, "--partition", "0")  # fmt: skip
    assert out == f"Successfully completed leader election (UNCLEAN) for partitions {unclean}-0\n"
    leader, _, isr = _report(bs, None, {unclean})[(unclean, 0)]
    assert (leader, isr) == (str(OTHER), [OTHER])
    assert zk_partition_state(cluster.zk_connect, unclean, 0)["leader"] == OTHER
    assert _produce(bs, unclean, 0, 1) == [None]  # a real client writes to the new leader
