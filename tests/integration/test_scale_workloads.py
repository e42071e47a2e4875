"""`make bench-scale`'s workloads run small against one real cluster, for correctness only (the
suite's timings are measured by the bench, never asserted): every partition led again after a
storage node's kill -9, every idle connection still answering, every group's commits read back
after its coordinator's kill -9, every produced record consumed by every consumer process; and
the peer (Tansu) running the same workloads where it can."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_support import running_cluster

from bench.peers import TansuPeer, tansu_running
from bench.scale import clients, connections, failover, groups, partitions
from bench.scale.procs import admin_ports, role_pids

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with running_cluster(
        tmp_path_factory.mktemp("scale"),
        storage_nodes=3,
        controllers=2,
        group_coordinators=2,
        transaction_coordinators=0,
    ) as c:
        yield c


@pytest.fixture(scope="module")
def peer() -> Iterator[TansuPeer]:
    with tansu_running() as p:
        yield p


def test_partitions_row_survives_its_faults(cluster: Any) -> None:
    row = partitions.measure(cluster, 30, 3, idle_seconds=1.0)
    print(row)
    assert row["partitions"] == 30 and row["create_s"] > 0 and row["metadata_all_ms"] > 0
    # each new replica's active segment holds its files open on its storage node
    assert row["storage_fds_per_replica"] >= 1
    for key in (
        "all_led_after_kill9_s",
        "storage_ready_after_kill9_s",
        "storage_ready_after_clean_stop_s",
        "controller_failover_s",
    ):
        assert row[key] > 0, key
    assert {"storage", "gateway", "controller"} <= {
        k.removeprefix("rss_per_partition_").removesuffix("_b") for k in row if k.startswith("rss")
    }


def test_failover_bench_reads_the_new_controllers_phases(cluster: Any) -> None:
    # --after-restarts: the partitions row's storage kill -9 + restart and clean stop +
    # restart come first (the restarted nodes' new processes are the ones measured)
    (row,) = failover.failover_runs(cluster, 20, 1, 1, idle_s=0.5, after_s=2.0, after_restarts=True)
    print(row)
    assert row["storage_ready_after_clean_stop_s"] > 0 and row["isr_notices_at_kill"] >= 0
    assert row["failover_s"] > 0 and row["controller_cpu_s"] >= 0
    # from the new controller's log: elected, then serving, then its failover finished
    assert 0 < row["elected"] <= row["serving"] <= row["finished"], row
    assert row["created"] > 0 and row["full_state_acked"] > 0 and row["finished_s"] > 0


def test_connections_row_keeps_every_idle_connection(cluster: Any) -> None:
    topic = clients.create_topic(cluster.bootstrap, 1, 1)
    row = connections.measure(cluster, topic, 60, active=5, seconds=1.0, idle_seconds=0.5)
    print(row)
    assert row["idle_answered"] == 60
    assert row["active_requests"] > 0 and row["active_p99_ms_beside_idle"] > 0


def test_groups_row_reads_commits_back_after_a_coordinator_death(cluster: Any) -> None:
    row = groups.measure(cluster, groups=6, partitions=4, rounds=2, interval=0.0)
    print(row)
    assert row["group_commits_per_s"] > 0 and row["coordinator_failover_s"] > 0


def test_many_clients_and_replication_rows(cluster: Any, peer: TansuPeer) -> None:
    storage = admin_ports(cluster, "storage")
    workload = (2, 2, 6, 100, 2000, "all")
    ours = clients.many_clients(
        cluster.bootstrap, role_pids(cluster), *workload, storage_admin=storage
    )
    theirs = clients.many_clients(peer.bootstrap, {"tansu": peer.pids()}, *workload)
    row = clients.beside_peer(ours, theirs, peer.name)
    print(row)
    # every consumer process read everything the producers wrote, on both brokers
    assert row["records_consumed"] == row["tansu_records_consumed"] == 2 * 2 * 2000
    # the peer's CPU is read (0 is possible: /proc counts 10 ms ticks, and the peer may read
    # these 800 KB within one)
    assert row["produce_x_peer"] > 0 and row["tansu_consume_cpu_s_per_gb"] >= 0
    # the storage nodes' Exchange counters were read: at least one call per stream message
    assert row["produce_exchange_calls_per_msg"] >= 1
    assert row["consume_exchange_calls_per_msg"] >= 1
    # the CPU split names the cluster's roles: both data-path roles for the produce phase; the
    # consume phase's 800 KB can cost the gateway less than one 10 ms /proc tick (it did in a
    # CI run: "storage 88% controller 12%"), so only its roles are checked
    produce_roles = _roles(row["produce_cpu_by_role"])
    consume_roles = _roles(row["consume_cpu_by_role"])
    assert {"storage", "gateway"} <= produce_roles <= set(role_pids(cluster))
    assert consume_roles and consume_roles <= set(role_pids(cluster))
    # two producer processes share the records, RF 1 acks=1 then RF 3 acks=all
    ratio = clients.replication(cluster.bootstrap, role_pids(cluster), 2, 3, 1024, 2000, storage)
    print(ratio)
    assert ratio["rf1_mb_per_s"] > 0 and ratio["rf3_mb_per_s"] > 0
    assert ratio["rf3_cpu_s_per_gb"] > 0
    assert ratio["rf3_isr_shrinks"] >= 0  # read from the nodes (a missing counter raises)


def test_peer_runs_the_partitions_connections_and_groups_rows(peer: TansuPeer) -> None:
    row = partitions.measure_peer(peer.bootstrap, peer.pids(), 30, idle_seconds=0.5)
    print(row)
    assert row["partitions"] == 30 and row["create_s"] > 0 and row["metadata_all_ms"] > 0
    topic = clients.create_topic(peer.bootstrap, 1, 1)
    (pid,) = peer.pids()
    row = connections.measure_at(
        peer.bootstrap, pid, topic, 20, active=3, seconds=0.5, idle_seconds=0.5
    )
    print(row)
    assert row["idle_answered"] == 20 and row["active_requests"] > 0
    # commit_load itself reads a sample of the groups' commits back
    row, readable = groups.commit_load(peer.bootstrap, peer.pids(), 4, 3, rounds=2, interval=0)
    print(row)
    assert row["group_commits_per_s"] > 0 and readable()


def test_doc_table_is_written_between_markers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench.scale import __main__ as suite

    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nkept\n")
    monkeypatch.setattr(suite, "DOC", doc)
    suite.write_doc(suite.table("T", [{"a": 1.5, "b": "x"}]))
    suite.write_doc(suite.table("T", [{"a": 2.5, "b": "y"}]))
    text = doc.read_text()
    assert text.count(suite.BEGIN) == 1 and "| 2.5 | y |" in text and "kept" in text


def _roles(split: str) -> set[str]:
    """The roles of a CPU split such as ``storage 52% gateway 48%``."""
    words = split.split()
    return set(words[::2])
