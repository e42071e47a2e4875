"""Many client processes at once (confluent-kafka, bench/workloads.py): aggregate throughput and
broker CPU per GB, and replication's cost (RF 3 acks=all against RF 1 acks=1)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
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
    cmd = [sys.executable, "-m", "bench.workloads", mode, "--bootstrap", bootstrap]
    cmd += ["--topic", topic, "--partitions", str(partitions), *args]
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _gather(procs: list[subprocess.Popen[str]]) -> list[dict[str, float]]:
    results = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"workload failed: {err.strip().splitlines()[-1:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


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
        before = {role: cpu_seconds(p) for role, p in self.pids.items()}
        scraped = counters(self.storage_admin)
        t0 = time.perf_counter()
        results = _gather(procs)
        wall = time.perf_counter() - t0
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


ISR_SHRINKS = "kafka_server_replicamanager_isrshrinks_total"


def replication_ratio(
    bootstrap: str, partitions: int, size: int, records: int, storage_admin: dict[str, int]
) -> dict[str, Any]:
    """One producer: RF 3 acks=all throughput as a share of RF 1 acks=1, same run, and the ISR
    shrinks the storage nodes (``storage_admin``: their admin ports) wrote under that load."""
    out: dict[str, Any] = {"partitions": partitions, "size": size, "records": records}
    for rf, acks in ((1, "1"), (3, "all")):
        topic = create_topic(bootstrap, partitions, rf)
        args = ["--size", str(size), "--count", str(records), "--acks", acks]
        shrinks = summed(counters(storage_admin), ISR_SHRINKS, required=True)
        (r,) = _gather([_spawn("produce", bootstrap, topic, partitions, *args)])
        out[f"rf{rf}_mb_per_s"] = r["mb_per_s"]
        out[f"rf{rf}_isr_shrinks"] = (
            summed(counters(storage_admin), ISR_SHRINKS, required=True) - shrinks
        )
    out["rf3_all_over_rf1_1"] = out["rf3_mb_per_s"] / out["rf1_mb_per_s"]
    return out
