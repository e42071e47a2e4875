"""`make bench` (recovery): a storage node holding 1 GB across 100 partitions, killed with
SIGKILL, back and serving. Needs no peer broker, so it runs on its own (``make bench-recovery``).

One local cluster (1 storage node, RF 1, Kafka's 1 GiB segments: each partition is one active
segment), 1 GB written in 16 KiB records. Three restarts are timed:

* ``kill -9, tail``: the recovery points were checkpointed, then 2% more was written and the
  node killed at once: only that unflushed tail is validated.
* ``kill -9, no checkpoint``: killed again and ``recovery-point-offset-checkpoint`` removed,
  so every partition is validated from offset 0 (what every kill -9 did before issue 12).
* ``clean stop``: SIGTERM, then restart: no recovery.

"Serving" is when one record produced to each of the 100 partitions (acks=1) has been
acknowledged. The node's registration in ZooKeeper first waits for the killed process's
session to expire (the local cluster's zookeeper.session.timeout.ms, 3 s): that wait is part
of "ready" after a kill. BENCH_SCALE scales the data size; BENCH_REPEAT (default 3) repeats
the three restarts (medians and ranges are reported: one run on a small shared machine is
noisy). Writes docs/benchmarks-recovery.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.run import _cell, machine
from services.cli.local_cluster import LocalCluster
from services.storage.log.checkpoint import RECOVERY_POINT_CHECKPOINT, read_offset_checkpoint

ROOT = Path(__file__).resolve().parent.parent
SCALE = float(os.environ.get("BENCH_SCALE", "1.0"))
REPEAT = max(1, int(os.environ.get("BENCH_REPEAT", "3")))
TOPIC = "recovery-bench"
PARTITIONS = 100
RECORD = 16 * 1024
RECORDS = int(1_000_000_000 * SCALE) // RECORD // PARTITIONS * PARTITIONS
TAIL_RECORDS = max(PARTITIONS, RECORDS // 50 // PARTITIONS * PARTITIONS)
CHECKPOINT_MS = 5000
STORAGE = 0


@dataclass
class Restart:
    scenario: str
    loaded_s: float  # restart -> every log opened ("logs loaded")
    load_ms: float  # time spent opening the logs (the node's own measure)
    registered_s: float  # restart -> /brokers/ids/<id> created
    ready_s: float  # restart -> /readyz 200
    serving_s: float  # restart -> one record acknowledged by every partition
    scanned_mb: float
    node_mb: float


def produce(bootstrap: str, count: int) -> float:
    """``bench.workloads produce`` in its own process; returns MB/s."""
    cmd = [sys.executable, "-m", "bench.workloads", "produce", "--bootstrap", bootstrap]
    cmd += ["--topic", TOPIC, "--partitions", str(PARTITIONS), "--size", str(RECORD)]
    cmd += ["--count", str(count), "--acks", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"produce failed: {out.stderr.strip().splitlines()[-1:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result["mb_per_s"]


def wait_serving(bootstrap: str, timeout: float = 120.0) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "1", "message.timeout.ms": int(timeout * 1000)}
    )
    failed: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    for p in range(PARTITIONS):
        producer.produce(TOPIC, b"ping", partition=p, on_delivery=on_delivery)
    if producer.flush(timeout) or failed:
        raise SystemExit(f"the node did not serve every partition: {failed[:3]}")


def node_events(cluster: LocalCluster, skip: int) -> list[dict[str, Any]]:
    out = []
    for line in cluster.log_path("storage", STORAGE).read_text().splitlines()[skip:]:
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def log_lines(cluster: LocalCluster) -> int:
    return len(cluster.log_path("storage", STORAGE).read_text().splitlines())


def event_time(events: list[dict[str, Any]], name: str) -> float:
    for e in reversed(events):
        if e.get("event") == name:
            return datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
    raise SystemExit(f"the restarted node never logged {name!r}")


def restart(cluster: LocalCluster, scenario: str, node_bytes: int) -> Restart:
    skip = log_lines(cluster)
    t0 = time.time()
    cluster.start_process("storage", STORAGE, timeout=180)
    ready = time.time()
    wait_serving(cluster.bootstrap)
    serving = time.time()
    events = node_events(cluster, skip)
    loaded = [e for e in events if e.get("event") == "logs loaded"][-1]
    scanned = sum(e["bytes_scanned"] for e in events if e.get("event") == "log_recovered")
    return Restart(
        scenario,
        event_time(events, "logs loaded") - t0,
        float(loaded["ms"]),
        event_time(events, "registered") - t0,
        ready - t0,
        serving - t0,
        scanned / 1e6,
        node_bytes / 1e6,
    )


def node_bytes(cluster: LocalCluster) -> int:
    return sum(p.stat().st_size for p in cluster.storage_dir(STORAGE).glob(f"{TOPIC}-*/*.log"))


def wait_checkpointed(cluster: LocalCluster, want: int, timeout: float = 300.0) -> None:
    """Until the node's recovery-point checkpoint has every partition at ``want`` or beyond."""
    path = cluster.storage_dir(STORAGE) / RECOVERY_POINT_CHECKPOINT
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        points = read_offset_checkpoint(path) if path.exists() else {}
        if all(points.get((TOPIC, p), 0) >= want for p in range(PARTITIONS)):
            return
        time.sleep(0.5)
    raise SystemExit("the recovery points were never checkpointed")


def table(rows: list[Restart]) -> str:
    head = (
        "| restart | data on the node | rescanned | logs opened in | logs loaded | registered "
        "| ready | serving all 100 partitions |\n|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for scenario in dict.fromkeys(r.scenario for r in rows):
        mine = [r for r in rows if r.scenario == scenario]

        def cell(get: Callable[[Restart], float], unit: str, mine: list[Restart] = mine) -> str:
            return f"{_cell([get(r) for r in mine])} {unit}"

        lines.append(
            f"| {scenario} | {cell(lambda r: r.node_mb, 'MB')} | "
            f"{cell(lambda r: r.scanned_mb, 'MB')} | {cell(lambda r: r.load_ms / 1000, 's')} | "
            f"{cell(lambda r: r.loaded_s, 's')} | {cell(lambda r: r.registered_s, 's')} | "
            f"{cell(lambda r: r.ready_s, 's')} | {cell(lambda r: r.serving_s, 's')} |\n"
        )
    return head + "".join(lines)


def main() -> None:
    print(
        f"kafka-py recovery benchmark: {RECORDS * RECORD / 1e9:.2f} GB in {PARTITIONS} "
        "partitions on one storage node, kill -9, restart",
        file=sys.stderr,
    )
    data = Path(tempfile.mkdtemp(prefix="kafka-py-recovery-bench-"))
    cluster = LocalCluster(
        data,
        storage_nodes=1,
        controllers=1,
        group_coordinators=0,
        gateway_port=0,
        zk_port=0,
        extra={"storage": ["--log.flush.offset.checkpoint.interval.ms", str(CHECKPOINT_MS)]},
    )
    rows: list[Restart] = []
    load_before = os.getloadavg()[0]
    try:
        cluster.start(timeout=120)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)
        del admin  # (a live client would keep reconnecting once the cluster is stopped)
        wait_serving(cluster.bootstrap)
        mb_s = produce(cluster.bootstrap, RECORDS)
        per_partition = 1 + RECORDS // PARTITIONS  # every wait_serving adds one per partition
        print(f"wrote {RECORDS * RECORD / 1e9:.2f} GB at {mb_s:.0f} MB/s", file=sys.stderr)
        for _ in range(REPEAT):
            wait_checkpointed(cluster, per_partition)
            produce(cluster.bootstrap, TAIL_RECORDS)
            per_partition += TAIL_RECORDS // PARTITIONS
            cluster.kill("storage", STORAGE, signal.SIGKILL)
            rows.append(restart(cluster, "kill -9, tail", node_bytes(cluster)))

            cluster.kill("storage", STORAGE, signal.SIGKILL)
            (cluster.storage_dir(STORAGE) / RECOVERY_POINT_CHECKPOINT).unlink()
            rows.append(restart(cluster, "kill -9, no checkpoint", node_bytes(cluster)))

            cluster.kill("storage", STORAGE, signal.SIGTERM)
            cluster.wait_exit("storage", STORAGE, timeout=120)
            rows.append(restart(cluster, "clean stop", node_bytes(cluster)))
            per_partition += 3
    finally:
        cluster.stop()
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(data, ignore_errors=True)
    tbl = table(rows)
    print(tbl)
    doc = ROOT / "docs" / "benchmarks-recovery.md"
    doc.write_text(
        "# Crash recovery benchmark\n\n"
        "Generated by `make bench-recovery` (bench/recovery.py, also run by `make bench`). "
        "A local cluster with one storage node (RF 1, 1 GiB segments: every partition is one "
        f"active segment), {RECORDS * RECORD / 1e9:.2f} GB written in {RECORD // 1024} KiB "
        f"records over {PARTITIONS} partitions, log.flush.offset.checkpoint.interval.ms "
        f"{CHECKPOINT_MS}, log.recovery.flush.interval.ms at its default. Rows: killed with "
        "SIGKILL right after 2% more was written (the checkpointed recovery points lag by that "
        "tail); killed again with recovery-point-offset-checkpoint removed (every partition "
        "validated from offset 0, as every kill -9 was before); stopped with SIGTERM. Times "
        "are from the restart: logs opened (the node's own measure of its log loading), "
        "logs loaded (the same, counted from the process start: Python start-up and the "
        "ZooKeeper connection come first), registered in ZooKeeper (after a kill it first waits for the dead process's session "
        "to expire: zookeeper.session.timeout.ms is 3 s in the local cluster), /readyz 200, "
        "and one record acknowledged by each of the 100 partitions.\n\n"
        f"Machine: {machine()}\n\nDate: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"scale {SCALE}, {REPEAT} kill/restart cycle(s): median (min-max); load average "
        f"(1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (other "
        f"work on the machine slows every restart alike)\n\n{tbl}"
    )
    print(f"\nwritten to {doc.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
