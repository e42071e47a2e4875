"""Many partitions: creation, Metadata for everything, memory per partition, idle CPU, and the
recovery times that grow with partition count (storage restart, leader election, controller
failover)."""

from __future__ import annotations

import os
import resource
import signal
import statistics
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.scale.procs import cpu_over, role_pids, rss_by_role, rss_bytes, timed, wait_until
from services.cli.zk_view import connected, read_cluster
from services.common.zk import layout

PER_TOPIC = 100  # partitions per topic, as the 100 topics x 100
#: open files a storage node holds per replica (the active segment's .log, .index and
#: .timeindex); each row measures it again (``storage_fds_per_replica``)
FDS_PER_REPLICA = 3
FD_HEADROOM = 1000  # sockets, the interpreter's own files, ZooKeeper, gRPC


def storage_nodes_for(partitions: int, rf: int, step: int = 3) -> int:
    """Storage nodes (a multiple of ``step``) whose replicas' files fit under this process's
    open-file limit, which the nodes inherit (10,000 partitions at RF 3 on 3 nodes need ~30,000
    descriptors each)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nodes = step
    while FDS_PER_REPLICA * partitions * rf / nodes + FD_HEADROOM > soft:
        nodes += step
    return nodes


def open_fds(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
    return total


def create_topics(admin: AdminClient, prefix: str, partitions: int, rf: int) -> list[str]:
    """Topics of up to PER_TOPIC partitions adding up to ``partitions``; returns their names."""
    sizes = [PER_TOPIC] * (partitions // PER_TOPIC)
    if partitions % PER_TOPIC:
        sizes.append(partitions % PER_TOPIC)
    names = [f"{prefix}-{i}" for i in range(len(sizes))]
    for start in range(0, len(names), 50):
        batch = [
            NewTopic(n, s, rf)
            for n, s in zip(names[start : start + 50], sizes[start : start + 50], strict=True)
        ]
        futures = admin.create_topics(batch, operation_timeout=120, request_timeout=150)
        for fut in futures.values():
            fut.result(timeout=180)
    return names


def leaders(
    zk_connect: str, names: list[str]
) -> dict[tuple[str, int], tuple[int | None, list[int]]]:
    state = read_cluster(zk_connect, names, 30)
    return {
        (t.name, p.partition): (p.leader, p.replicas)
        for t in state.topics.values()
        for p in t.partitions
    }


def all_led(zk_connect: str, names: list[str], want: int, dead: int | None = None) -> bool:
    """Every one of ``want`` partitions has a live leader (one that is not ``dead``) when a live
    replica exists."""
    found = leaders(zk_connect, names)
    if len(found) < want:
        return False
    for leader, replicas in found.values():
        if leader is None or leader == dead:
            if any(r != dead for r in replicas):
                return False
    return True


def metadata_ms(admin: AdminClient) -> float:
    return 1000 * statistics.median(
        timed(lambda: admin.list_topics(timeout=120))[0] for _ in range(3)
    )


def measure_peer(
    bootstrap: str, pids: list[int], partitions: int, idle_seconds: float = 10.0
) -> dict[str, Any]:
    """The part of a row a single-process peer can run (RF 1: creation until Metadata shows
    every partition led, Metadata for all topics, memory per partition, idle CPU); it has no
    storage node or controller to kill."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    prefix = f"scale-peer-{uuid.uuid4().hex[:6]}"
    rss_before = rss_bytes(pids)

    def led() -> bool:
        topics = admin.list_topics(timeout=60).topics.values()
        parts = [
            p for t in topics if (t.topic or "").startswith(prefix) for p in t.partitions.values()
        ]
        return len(parts) == partitions and all(p.leader >= 0 for p in parts)

    create_s, _names = timed(lambda: create_topics(admin, prefix, partitions, 1))
    create_s += wait_until(led, 300, "Metadata showing every partition led")
    return {
        "partitions": partitions,
        "rf": 1,
        "create_s": create_s,
        "metadata_all_ms": metadata_ms(admin),
        "rss_per_partition_b": (rss_bytes(pids) - rss_before) / partitions,
        "idle_cores": cpu_over(pids, idle_seconds),
    }


def measure(cluster: Any, partitions: int, rf: int, idle_seconds: float = 10.0) -> dict[str, Any]:
    """One row: ``partitions`` new partitions with replication factor ``rf`` on ``cluster``."""
    zk = cluster.zk_connect
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    prefix = f"scale-{rf}-{uuid.uuid4().hex[:6]}"
    rss_before = rss_by_role(cluster)
    storage = role_pids(cluster)["storage"]
    fds_before = open_fds(storage)
    create_s, names = timed(lambda: create_topics(admin, prefix, partitions, rf))
    create_s += wait_until(lambda: all_led(zk, names, partitions), 300, "every partition led")
    wait_until(
        lambda: (
            sum(
                len(t.partitions)
                for t in admin.list_topics(timeout=60).topics.values()
                if t.topic.startswith(prefix)
            )
            == partitions
        ),
        120,
        "Metadata showing every partition",
    )
    row: dict[str, Any] = {
        "partitions": partitions,
        "rf": rf,
        "create_s": create_s,
        "metadata_all_ms": metadata_ms(admin),
    }
    rss_after = rss_by_role(cluster)
    for role, after in rss_after.items():
        row[f"rss_per_partition_{role}_b"] = (after - rss_before.get(role, 0)) / partitions
    row["storage_fds_per_replica"] = (open_fds(storage) - fds_before) / (partitions * rf)
    all_pids = list(cluster.pids().values())
    row["idle_cores"] = cpu_over(all_pids, idle_seconds)
    row.update(_storage_death(cluster, zk, names, rf))
    row.update(_storage_restarts(cluster))
    row["controller_failover_s"] = _controller_failover(cluster, admin)
    return row


def _storage_death(cluster: Any, zk: str, names: list[str], rf: int) -> dict[str, float]:
    """kill -9 of storage-0: time until every partition it led is led by a live node again
    (with ``rf`` > 1); then its restart (recovery of its logs) until ready. Only the state
    znodes of the partitions it led are polled, through one session, and each drops out once
    led elsewhere: polling every partition took seconds per round at 10,000 partitions, coarser
    than what it measured."""
    led = sorted(tp for tp, (leader, _replicas) in leaders(zk, names).items() if leader == 0)
    with connected(zk, 30) as client:
        cluster.kill("storage", 0)
        cluster.wait_exit("storage", 0)
        waiting = set(led) if rf > 1 else set()

        def moved() -> bool:
            asked = {tp: client.get_async(layout.partition_state_path(*tp)) for tp in waiting}
            for tp, answer in asked.items():
                leader = layout.PartitionStateZk.from_json(answer.get()[0]).leader
                if leader not in (-1, 0):
                    waiting.discard(tp)
            return not waiting

        led_s = wait_until(moved, 300, "leaders re-elected")
    ready_s, _ = timed(lambda: cluster.start_process("storage", 0, timeout=600))
    out = {"storage_ready_after_kill9_s": ready_s}
    if rf > 1:
        out["all_led_after_kill9_s"] = led_s
    return out


def _storage_restarts(cluster: Any) -> dict[str, float]:
    """A clean stop (SIGTERM: controlled shutdown) then a start until ready."""
    cluster.kill("storage", 1, signal.SIGTERM)
    cluster.wait_exit("storage", 1, timeout=300)
    ready_s, _ = timed(lambda: cluster.start_process("storage", 1, timeout=600))
    return {"storage_ready_after_clean_stop_s": ready_s}


def _controller_failover(cluster: Any, admin: AdminClient) -> float:
    """kill -9 of the active controller: time until CreateTopics works again."""
    active = cluster.active_controller_index()
    if active is None:
        raise RuntimeError("no active controller")
    cluster.kill("controller", active)
    cluster.wait_exit("controller", active)
    name = f"scale-failover-{uuid.uuid4().hex[:6]}"

    def created() -> bool:
        try:
            admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=2, request_timeout=3)[
                name
            ].result(timeout=5)
            return True
        except Exception as exc:  # noqa: BLE001 - NOT_CONTROLLER/timeouts until the new one acts
            return "already exists" in str(exc).lower()

    failover_s = wait_until(created, 120, "CreateTopics after the controller's death", 0.1)
    cluster.start_process("controller", active, timeout=120)
    return failover_s
