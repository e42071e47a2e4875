"""Many client processes at once (confluent-kafka, bench/workloads.py): aggregate throughput and
broker CPU per GB, and replication's cost (RF 3 acks=all against RF 1 acks=1)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.cpu import cpu_seconds
from bench.prom import counters, summed
from bench.scale.procs import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _spawn(
    mode: str, bootstrap: str, topic: str, partitions: int, *args: str
) -> subprocess.Popen[str]:
    """A workload process that waits, client created, for ``Phase.run``'s go (``--ready-go``)."""
    cmd = [sys.executable, "-m", "bench.workloads", mode, "--bootstrap", bootstrap]
    cmd += ["--topic", topic, "--partitions", str(partitions), "--ready-go", *args]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _gather(procs: list[subprocess.Popen[str]]) -> list[dict[str, float]]:
    results = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"workload failed: {err.strip().splitlines()[-1:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _all_ready(procs: list[subprocess.Popen[str]]) -> None:
    """Wait for every process's ``ready`` line (a process that died instead is reported by
    ``_gather``)."""
    for p in procs:
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            _gather([p])
            raise RuntimeError(f"workload {p.args!r} exited before it was ready")


def _go(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()


EXCHANGE = 'kafkapy_storage_exchange_{}_total{{direction="in"}}'


class Phase:
    """Broker readings over one phase: CPU-seconds by role and, given the storage nodes' admin
    ports, Exchange calls and stream messages received (gateway -> storage and followers)."""

    def __init__(self, pids: dict[str, list[int]], storage_admin: dict[str, int]) -> None:
        self.pids = pids
        self.storage_admin = storage_admin
        self.cpu: dict[str, float] = {}
        self.exchange_calls = self.exchange_messages = 0.0

    def run(self, procs: list[subprocess.Popen[str]]) -> tuple[list[dict[str, float]], float]:
        """The processes' results and the phase's wall time: they are started together once
        every one is ready (interpreter and client up: 32 processes starting on 2 cores would
        otherwise weigh on the larger rows only), and timed from the first one's start of work
        to the last one's end."""
        try:
            _all_ready(procs)
            before = {role: cpu_seconds(p) for role, p in self.pids.items()}
            scraped = counters(self.storage_admin)
            _go(procs)
            results = _gather(procs)
        finally:
            for p in procs:  # none is left behind when one failed
                if p.poll() is None:
                    p.kill()
                    p.wait()
        wall = max(r["ended"] for r in results) - min(r["started"] for r in results)
        self.cpu = {role: cpu_seconds(p) - before[role] for role, p in self.pids.items()}
        after = counters(self.storage_admin)
        for what in ("calls", "messages"):
            key = EXCHANGE.format(what)
            setattr(self, f"exchange_{what}", summed(after, key) - summed(scraped, key))
        return results, wall

    def cpu_split(self) -> str:
        """Each role's share of the broker CPU, largest first."""
        total = sum(self.cpu.values()) or 1.0
        ranked = sorted(self.cpu.items(), key=lambda kv: -kv[1])
        return " ".join(f"{role} {100 * v / total:.0f}%" for role, v in ranked if v / total >= 0.01)

    def calls_per_message(self) -> float | str:
        if not self.storage_admin:
            return "n/a"
        return self.exchange_calls / max(1.0, self.exchange_messages)


def create_topic(bootstrap: str, partitions: int, rf: int) -> str:
    name = f"scale-clients-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf)], operation_timeout=60)[name].result(90)

    def led() -> bool:  # the broker's Metadata shows every partition with a leader
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        parts = topic.partitions if topic is not None and topic.error is None else {}
        return len(parts) == partitions and all(p.leader >= 0 for p in parts.values())

    wait_until(led, 60, f"every partition of {name} led in Metadata", 0.05)
    return name


def delete_topic(bootstrap: str, name: str) -> None:
    """Drop a workload's topic once measured, so that the next workload's broker does not carry
    its data (the peer keeps records in memory; kafka-py's page cache)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name], operation_timeout=60)[name].result(90)


def many_clients(
    bootstrap: str,
    pids: dict[str, list[int]],
    producers: int,
    consumers: int,
    partitions: int,
    size: int,
    records_each: int,
    acks: str,
    storage_admin: dict[str, int] | None = None,
) -> dict[str, Any]:
    """``producers`` processes write ``records_each`` records each, then ``consumers`` processes
    each read everything; aggregate MB/s over the phase's wall time, broker CPU-s per GB and
    its split by role (``pids`` by role), and with ``storage_admin`` (the storage nodes' admin
    ports) the Exchange calls per stream message the storage nodes received."""
    topic = create_topic(bootstrap, partitions, 1)
    args = ["--size", str(size), "--count", str(records_each), "--acks", acks]
    produce = Phase(pids, storage_admin or {})
    produced, p_wall = produce.run(
        [_spawn("produce", bootstrap, topic, partitions, *args) for _ in range(producers)]
    )
    total = records_each * producers
    consume = Phase(pids, storage_admin or {})
    consumed, c_wall = consume.run(
        [
            _spawn("consume", bootstrap, topic, partitions, "--count", str(total))
            for _ in range(consumers)
        ]
    )
    delete_topic(bootstrap, topic)
    p_mb = sum(r["mb"] for r in produced)
    c_mb = sum(r["mb"] for r in consumed)
    return {
        "producers": producers,
        "consumers": consumers,
        "size": size,
        "acks": acks,
        "produce_mb_per_s": p_mb / p_wall,
        "produce_cpu_s_per_gb": sum(produce.cpu.values()) / (p_mb / 1000),
        "produce_exchange_calls_per_msg": produce.calls_per_message(),
        "produce_cpu_by_role": produce.cpu_split(),
        "consume_mb_per_s": c_mb / c_wall,
        "consume_cpu_s_per_gb": sum(consume.cpu.values()) / (c_mb / 1000),
        "consume_exchange_calls_per_msg": consume.calls_per_message(),
        "consume_cpu_by_role": consume.cpu_split(),
        "records_consumed": sum(int(r["mb"] * 1e6 / size) for r in consumed),
        "consumer_errors": sum(r.get("errors", 0) for r in consumed),
    }


def beside_peer(ours: dict[str, Any], theirs: dict[str, Any], peer: str) -> dict[str, Any]:
    """One row of a many-client workload: kafka-py's readings, the peer's throughput and CPU
    per GB beside each (``<peer>_...``), and kafka-py's throughput as a multiple of the peer's."""
    row: dict[str, Any] = {}
    prefix = peer.lower()
    for key, value in ours.items():
        row[key] = value
        if key.endswith(("_mb_per_s", "_cpu_s_per_gb")):
            row[f"{prefix}_{key}"] = theirs[key]
        if key.endswith("_mb_per_s"):
            row[f"{key.removesuffix('_mb_per_s')}_x_peer"] = value / theirs[key]
    row[f"{prefix}_records_consumed"] = theirs["records_consumed"]
    return row


ISR_SHRINKS = "kafka_server_replicamanager_isrshrinks_total"


def replication(
    bootstrap: str,
    pids: dict[str, list[int]],
    producers: int,
    partitions: int,
    size: int,
    records: int,
    storage_admin: dict[str, int],
) -> dict[str, Any]:
    """``producers`` processes write ``records`` records in all, RF 1 acks=1 then RF 3 acks=all
    (a topic each, same cluster, same run): aggregate MB/s, broker CPU-s per GB, RF 3's
    throughput as a share of RF 1's, and the ISR shrinks the storage nodes (``storage_admin``:
    their admin ports) counted under each load."""
    out: dict[str, Any] = {
        "producers": producers,
        "partitions": partitions,
        "size": size,
        "records": records,
    }
    each = max(1, records // producers)
    for rf, acks in ((1, "1"), (3, "all")):
        topic = create_topic(bootstrap, partitions, rf)
        args = ["--size", str(size), "--count", str(each), "--acks", acks]
        shrinks = summed(counters(storage_admin), ISR_SHRINKS, required=True)
        phase = Phase(pids, {})
        produced, wall = phase.run(
            [_spawn("produce", bootstrap, topic, partitions, *args) for _ in range(producers)]
        )
        mb = sum(r["mb"] for r in produced)
        out[f"rf{rf}_mb_per_s"] = mb / wall
        out[f"rf{rf}_cpu_s_per_gb"] = sum(phase.cpu.values()) / (mb / 1000)
        out[f"rf{rf}_isr_shrinks"] = (
            summed(counters(storage_admin), ISR_SHRINKS, required=True) - shrinks
        )
        delete_topic(bootstrap, topic)
    out["rf3_all_over_rf1_1"] = out["rf3_mb_per_s"] / out["rf1_mb_per_s"]
    return out
