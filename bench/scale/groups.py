"""Many consumer groups committing offsets: commit latency and rate, coordinator CPU, and the
time a coordinator's shards take to come back after its kill -9 (replay of __consumer_offsets).

The commits are sent over ``connections`` client connections (one admin client each, the groups
dealt round-robin), as groups' own consumers would each send theirs: a Kafka broker answers one
request of a connection at a time, and kafka-py's gateway runs at most
``kafkapy.connection.max.inflight.requests`` (128) of one connection at once, so a single
connection carrying every group's commit measures that cap, not the coordinators."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.cpu import cpu_seconds
from bench.scale.procs import percentile, role_pids, wait_until


def send_commits(
    admins: list[AdminClient],
    groups: list[str],
    topic: str,
    parts: int,
    offset: int,
    request_timeout: float = 60,
) -> list[tuple[Future[Any], float]]:
    """Every group's AlterConsumerGroupOffsets of ``offset`` for partitions 0..``parts``-1,
    group i through ``admins[i % len(admins)]``, all sent at once: each one's future and the
    ``time.perf_counter()`` it was sent at."""
    sent = []
    for i, g in enumerate(groups):
        start = time.perf_counter()
        tps = [TopicPartition(topic, p, offset) for p in range(parts)]
        (fut,) = (
            admins[i % len(admins)]
            .alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g, tps)], request_timeout=request_timeout
            )
            .values()
        )
        sent.append((fut, start))
    return sent


def _commit_round(
    admins: list[AdminClient], groups: list[str], topic: str, parts: int, offset: int
) -> list[float]:
    """Every group commits ``offset`` for partitions 0..``parts``-1 (``send_commits``); each
    commit's latency."""
    latencies: list[float] = []
    futures = []
    for fut, start in send_commits(admins, groups, topic, parts, offset):
        fut.add_done_callback(lambda _f, s=start: latencies.append(time.perf_counter() - s))
        futures.append(fut)
    for fut in futures:
        res = fut.result(timeout=120)
        bad = [tp for tp in res.topic_partitions if tp.error is not None]
        if bad:
            raise RuntimeError(f"commit failed: {bad[0].error}")
    return latencies


def _committed(admin: AdminClient, group: str) -> dict[int, int]:
    (fut,) = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=10
    ).values()
    return {tp.partition: tp.offset for tp in fut.result(timeout=15).topic_partitions}


def commit_load(
    bootstrap: str,
    coordinators: list[int],
    groups: int,
    partitions: int,
    rounds: int = 3,
    interval: float = 1.0,
    connections: int = 8,
) -> tuple[dict[str, Any], Callable[[], bool]]:
    """Every group commits all ``partitions`` once per ``interval`` (a round starts as soon as
    the last one ended when that took longer), ``rounds`` times, over ``connections`` client
    connections: the row's commit readings (``coordinators``: the pids whose CPU is counted)
    and a check that a sample of the groups reads its commits back. A broker of any kind:
    kafka-py or the peer."""
    admins = [
        AdminClient({"bootstrap.servers": bootstrap})
        for _ in range(max(1, min(connections, groups)))
    ]
    admin = admins[0]
    topic = f"scale-groups-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=60)[topic].result(90)
    names = [f"scale-group-{i}-{uuid.uuid4().hex[:4]}" for i in range(groups)]
    # untimed: __consumer_offsets is created and its shards loaded by one connection's commits
    # (librdkafka gave up the coordinator lookup of some of them while the topic was being
    # placed and never sent them, failing after 60 s; fixed by the gateway's bounded
    # FindCoordinator wait, D84; bench/scale/first_commits.py reproduces it)
    _commit_round(admins[:1], names, topic, partitions, 0)
    cpu_before = cpu_seconds(coordinators)
    start = time.perf_counter()
    latencies: list[float] = []
    round_s: list[float] = []
    for r in range(1, rounds + 1):
        began = time.perf_counter()
        latencies += _commit_round(admins, names, topic, partitions, r)
        round_s.append(time.perf_counter() - began)
        if r < rounds:
            time.sleep(max(0.0, began + interval - time.perf_counter()))
    elapsed = time.perf_counter() - start
    cpu = cpu_seconds(coordinators) - cpu_before
    want = {p: rounds for p in range(partitions)}
    sample = names[:: max(1, groups // 20)]
    assert all(_committed(admin, g) == want for g in sample), "committed offsets read back wrong"

    def readable() -> bool:
        try:
            return all(_committed(admin, g) == want for g in sample)
        except Exception:  # noqa: BLE001 - NOT_COORDINATOR / load in progress after a kill
            return False

    commits = groups * rounds
    row = {
        "groups": groups,
        "partitions_per_group": partitions,
        "client_connections": len(admins),
        "group_commits_per_s": commits / elapsed,
        "partition_commits_per_s": commits * partitions / elapsed,
        "commit_p50_ms": 1000 * percentile(latencies, 0.5),
        "commit_p99_ms": 1000 * percentile(latencies, 0.99),
        "round_max_s": max(round_s),
        "coordinator_cores": cpu / elapsed,
        "coordinator_cpu_ms_per_commit": 1000 * cpu / commits,
    }
    return row, readable


def measure(
    cluster: Any, groups: int, partitions: int, rounds: int = 3, interval: float = 1.0
) -> dict[str, Any]:
    """``commit_load`` on ``cluster``'s group coordinators, then a coordinator's kill -9: the
    time until every sampled group's offsets read back (its shards replayed elsewhere, or when
    it is back)."""
    coordinators = role_pids(cluster).get("group_coordinator", [])
    row, readable = commit_load(
        cluster.bootstrap, coordinators, groups, partitions, rounds, interval
    )
    cluster.kill("group_coordinator", 0)
    cluster.wait_exit("group_coordinator", 0)
    failover_s = wait_until(readable, 300, "every group's offsets readable after the kill", 0.1)
    cluster.start_process("group_coordinator", 0, timeout=120)
    return {**row, "coordinator_failover_s": failover_s}
