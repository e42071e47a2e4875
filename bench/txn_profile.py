"""Where a transaction's CPU goes: the bench's transactional workload (confluent-kafka, 1 KiB
records, 100 per transaction, commit) against a local kafka-py cluster, with the CPU of each
service process measured from /proc before and after.

    python -m bench.txn_profile [--count 20000] [--profile-dir DIR] [--peer tansu]

``--profile-dir`` also runs every service under cProfile (``KAFKAPY_PROFILE_DIR``) and prints
each one's top functions when the cluster has stopped (cProfile's own cost is then included in
the CPU figures: compare runs with and without it only to each other).
"""

from __future__ import annotations

import argparse
import json
import pstats
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.cpu import cpu_seconds
from bench.peers import KafkaPyPeer, TansuPeer
from bench.prom import counters
from bench.run import PARTITIONS, ROOT, create_topic
from services.common.profiling import ENV as PROFILE_ENV

PER_TXN = 100


def _cpu_by_service(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds([pid]) for name, pid in pids.items()}


def _print_counters(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], txns: float
) -> None:
    print("\ncounters per transaction (>= 0.5):")
    for name, samples in sorted(after.items()):
        for key, value in sorted(samples.items()):
            delta = (value - before.get(name, {}).get(key, 0.0)) / txns
            if delta >= 0.5:
                print(f"  {name:26s} {delta:8.2f}  {key}")


def _print_profiles(directory: Path, top: int) -> None:
    for prof in sorted(directory.glob("*.prof")):
        print(f"\n=== {prof.name} (top {top} by own time)")
        pstats.Stats(str(prof)).sort_stats("tottime").print_stats(top)


def _workload(bootstrap: str, topic: str, count: int) -> list[str]:
    return [
        sys.executable, "-m", "bench.workloads", "produce", "--bootstrap", bootstrap,
        "--topic", topic, "--partitions", str(PARTITIONS), "--size", "1024",
        "--count", str(count), "--per-transaction", str(PER_TXN),
    ]  # fmt: skip


def _measure_tansu(count: int) -> None:
    """The same workload against Tansu (memory storage), for a same-run comparison."""
    peer = TansuPeer()
    peer.start()
    try:
        topic = f"bench-txn-{uuid.uuid4().hex[:6]}"
        create_topic(peer.bootstrap, topic)
        subprocess.run(
            _workload(peer.bootstrap, topic, 1000), check=True, capture_output=True, cwd=ROOT
        )
        before = cpu_seconds(peer.pids())
        out = subprocess.run(
            _workload(peer.bootstrap, topic, count),
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=900,
        )
        cpu = cpu_seconds(peer.pids()) - before
    finally:
        peer.stop()
    result = json.loads(out.stdout.strip().splitlines()[-1])
    txns = count / PER_TXN
    print(f"Tansu: {result['records_per_s']:.0f} msg/s, {cpu / txns * 1000:.1f} ms CPU per txn")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=20_000, help="records (100 per transaction)")
    p.add_argument("--profile-dir", type=Path, default=None)
    p.add_argument("--top", type=int, default=25)
    p.add_argument(
        "--peer", choices=("kafka-py", "tansu"), default="kafka-py", help="broker to measure"
    )
    args = p.parse_args()
    if args.peer == "tansu":
        _measure_tansu(args.count)
        return
    peer = KafkaPyPeer()
    if args.profile_dir is not None:
        shutil.rmtree(args.profile_dir, ignore_errors=True)
        peer.cluster.env[PROFILE_ENV] = str(args.profile_dir.resolve())
    peer.start()
    try:
        topic = f"bench-txn-{uuid.uuid4().hex[:6]}"
        create_topic(peer.bootstrap, topic)
        # one short transactional run first (not measured): creates __transaction_state and
        # loads its shards, as on a cluster that has served transactions before
        subprocess.run(
            _workload(peer.bootstrap, topic, 1000),
            check=True,
            capture_output=True,
            cwd=ROOT,
            timeout=300,
        )
        pids = peer.cluster.pids()
        admin = {
            p.name: p.admin_port
            for p in peer.cluster.processes()
            if p.admin_port and p.role != "controller"
        }
        counters_before = counters(admin)
        before = _cpu_by_service(pids)
        started = time.perf_counter()
        out = subprocess.run(
            _workload(peer.bootstrap, topic, args.count),
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=900,
        )
        wall = time.perf_counter() - started
        after = _cpu_by_service(pids)
        counters_after = counters(admin)
    finally:
        peer.stop()
    result = json.loads(out.stdout.strip().splitlines()[-1])
    txns = args.count / PER_TXN
    used = {name: after[name] - before.get(name, 0.0) for name in after}
    total = sum(used.values())
    print(f"{result['records_per_s']:.0f} msg/s, {txns:.0f} transactions in {wall:.1f} s")
    print(f"broker CPU {total:.2f} s = {total / txns * 1000:.1f} ms per transaction")
    for name, cpu in sorted(used.items(), key=lambda kv: -kv[1]):
        print(f"  {name:28s} {cpu:7.2f} s  {cpu / txns * 1000:6.2f} ms/txn")
    _print_counters(counters_before, counters_after, txns)
    if args.profile_dir is not None:
        _print_profiles(args.profile_dir, args.top)


if __name__ == "__main__":
    main()
