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


def _phase(
    pids: list[int], procs: list[subprocess.Popen[str]]
) -> tuple[list[dict[str, float]], float, float]:
    cpu0, t0 = cpu_seconds(pids), time.perf_counter()
    results = _gather(procs)
    return results, time.perf_counter() - t0, cpu_seconds(pids) - cpu0


def create_topic(bootstrap: str, partitions: int, rf: int) -> str:
    name = f"scale-clients-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf)], operation_timeout=60)[name].result(90)
    time.sleep(1.0)  # metadata settles on every gateway/peer alike
    return name


def many_clients(
    bootstrap: str,
    pids: list[int],
    producers: int,
    consumers: int,
    partitions: int,
    size: int,
    records_each: int,
    acks: str,
) -> dict[str, Any]:
    """``producers`` processes write ``records_each`` records each, then ``consumers`` processes
    each read everything; aggregate MB/s over the phase's wall time and broker CPU-s per GB."""
    topic = create_topic(bootstrap, partitions, 1)
    args = ["--size", str(size), "--count", str(records_each), "--acks", acks]
    produced, p_wall, p_cpu = _phase(
        pids, [_spawn("produce", bootstrap, topic, partitions, *args) for _ in range(producers)]
    )
    total = records_each * producers
    consumed, c_wall, c_cpu = _phase(
        pids,
        [
            _spawn("consume", bootstrap, topic, partitions, "--count", str(total))
            for _ in range(consumers)
        ],
    )
    p_mb = sum(r["mb"] for r in produced)
    c_mb = sum(r["mb"] for r in consumed)
    return {
        "producers": producers,
        "consumers": consumers,
        "size": size,
        "acks": acks,
        "produce_mb_per_s": p_mb / p_wall,
        "produce_cpu_s_per_gb": p_cpu / (p_mb / 1000),
        "consume_mb_per_s": c_mb / c_wall,
        "consume_cpu_s_per_gb": c_cpu / (c_mb / 1000),
        "records_consumed": sum(int(r["mb"] * 1e6 / size) for r in consumed),
    }


def replication_ratio(bootstrap: str, partitions: int, size: int, records: int) -> dict[str, Any]:
    """One producer: RF 3 acks=all throughput as a share of RF 1 acks=1, same run."""
    out: dict[str, Any] = {}
    for rf, acks in ((1, "1"), (3, "all")):
        topic = create_topic(bootstrap, partitions, rf)
        args = ["--size", str(size), "--count", str(records), "--acks", acks]
        (r,) = _gather([_spawn("produce", bootstrap, topic, partitions, *args)])
        out[f"rf{rf}_mb_per_s"] = r["mb_per_s"]
    out["rf3_all_over_rf1_1"] = out["rf3_mb_per_s"] / out["rf1_mb_per_s"]
    return out
