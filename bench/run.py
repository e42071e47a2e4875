"""`make bench`: kafka-py side by side with Tansu, same client (confluent-kafka), same workload.

Prints one table (both columns and the ratio) and writes it to docs/benchmarks.md with the
machine description. BENCH_SCALE (default 1.0) scales record counts. BENCH_REPEAT (default 1)
runs both brokers that many times, alternating, and reports medians (with min-max ranges):
on a small shared machine one run of each is noisy.

For quick measurements of a few rows: BENCH_ONLY (comma-separated scenario keys, e.g.
``BENCH_ONLY=p100_a1``: the 100 B acks=1 row, with the in-run gRPC floor after each kafka-py
run; a scenario that reads another's topic brings that one along) and BENCH_PEERS
(``kafka-py`` or ``Tansu``; default both). Either knob prints the table and leaves
docs/benchmarks.md as it is.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench import grpc_floor
from bench.cpu import cpu_seconds
from bench.peers import KafkaPyPeer, Peer, TansuPeer

PARTITIONS = 6
SCALE = float(os.environ.get("BENCH_SCALE", "1.0"))
REPEAT = max(1, int(os.environ.get("BENCH_REPEAT", "1")))
ONLY = {k for k in os.environ.get("BENCH_ONLY", "").split(",") if k}
PEERS = {k for k in os.environ.get("BENCH_PEERS", "").split(",") if k}
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Scenario:
    key: str
    title: str
    mode: str
    args: list[str]
    reuse_topic_of: str | None = None


SCENARIOS = [
    Scenario(
        "p1k_a1",
        "produce 1 KiB, acks=1",
        "produce",
        ["--size", "1024", "--count", str(int(200_000 * SCALE)), "--acks", "1"],
    ),
    Scenario(
        "c1k",
        "consume 1 KiB",
        "consume",
        ["--count", str(int(200_000 * SCALE))],
        reuse_topic_of="p1k_a1",
    ),
    Scenario(
        "p1k_aall",
        "produce 1 KiB, acks=all",
        "produce",
        ["--size", "1024", "--count", str(int(200_000 * SCALE)), "--acks", "all"],
    ),
    Scenario(
        "p100_a1",
        "produce 100 B, acks=1",
        "produce",
        ["--size", "100", "--count", str(int(500_000 * SCALE)), "--acks", "1"],
    ),
    Scenario(
        "p100_aall",
        "produce 100 B, acks=all",
        "produce",
        ["--size", "100", "--count", str(int(500_000 * SCALE)), "--acks", "all"],
    ),
    Scenario(
        "p1k_idem",
        "produce 1 KiB, idempotent",
        "produce",
        ["--size", "1024", "--count", str(int(50_000 * SCALE)), "--idempotent"],
    ),
    Scenario(
        "p1k_txn",
        "produce 1 KiB, transactions of 100, commit",
        "produce",
        ["--size", "1024", "--count", str(int(50_000 * SCALE)), "--per-transaction", "100"],
    ),
    Scenario(
        "lat",
        "end-to-end latency, 1,000 msg/s x 1 KiB",
        "latency",
        ["--size", "1024", "--rate", "1000", "--seconds", str(max(5, int(10 * SCALE)))],
    ),
]


def selected(scenarios: list[Scenario], only: set[str]) -> list[Scenario]:
    """The scenarios named in ``only`` (all when empty), with those whose topics they read."""
    if not only:
        return scenarios
    unknown = only - {sc.key for sc in scenarios}
    if unknown:
        raise SystemExit(f"BENCH_ONLY: no scenario {', '.join(sorted(unknown))}")
    keep = set(only)
    keep |= {sc.reuse_topic_of for sc in scenarios if sc.key in only and sc.reuse_topic_of}
    return [sc for sc in scenarios if sc.key in keep]


@dataclass
class Result:
    values: dict[str, dict[str, float]] = field(default_factory=dict)


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, PARTITIONS, 1)], operation_timeout=30)[name]
    fut.result(60)
    time.sleep(1.0)  # let metadata settle on both peers alike


def run_workload(peer: Peer, sc: Scenario, topic: str) -> dict[str, float]:
    cmd = [
        sys.executable,
        "-m",
        "bench.workloads",
        sc.mode,
        "--bootstrap",
        peer.bootstrap,
        "--topic",
        topic,
        "--partitions",
        str(PARTITIONS),
        *sc.args,
    ]
    before = cpu_seconds(peer.pids())
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    after = cpu_seconds(peer.pids())
    if out.returncode != 0:
        raise RuntimeError(f"{peer.name} {sc.key}: {out.stderr.strip().splitlines()[-1:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    result["cpu_s"] = after - before
    if "mb" in result and result["mb"] > 0:
        result["cpu_s_per_gb"] = result["cpu_s"] / (result["mb"] / 1000)
    if result.get("requests"):
        result["cpu_us_per_request"] = result["cpu_s"] / result["requests"] * 1e6
    return result


# Produced and consumed before anything is measured, on a topic of its own: enough for the
# consumer's largest fetches (max.partition.fetch.bytes 10 MiB x 6 partitions), so that each
# broker has sized its buffers, as a broker that has been serving for a while has. The topic
# is read three times: one read does not take a fresh kafka-py gateway to its peak heap (it
# still page-faults through the next two; docs/performance.md, "Consume").
WARM_UP_READS = 3
WARM_UP = [
    Scenario("warm_p", "warm-up produce", "produce", ["--size", "1024", "--count", "100000"]),
    *[
        Scenario("warm_c", "warm-up consume", "consume", ["--count", "100000"], "warm_p")
        for _ in range(WARM_UP_READS)
    ],
]


def warm_up(peer: Peer) -> None:
    topic = f"bench-warm-up-{uuid.uuid4().hex[:6]}"
    create_topic(peer.bootstrap, topic)
    print(f"  {peer.name}: warm-up (not measured) ...", file=sys.stderr, flush=True)
    for sc in WARM_UP:
        run_workload(peer, sc, topic)
    os.sync()  # measure from clean page cache, not while the kernel writes back the warm-up


def with_grpc_floor(results: dict[str, dict[str, float]]) -> None:
    """The bare gRPC round trip at the size and rate of this run's 100 B acks=1 Produce
    requests (bench/grpc_floor.py), and the broker's CPU per request over it."""
    run = results.get("p100_a1", {})
    if not run.get("requests") or not run.get("request_bytes") or not run.get("seconds"):
        return
    print("  kafka-py: bare gRPC floor ...", file=sys.stderr, flush=True)
    requests = int(run["requests"])
    floor = grpc_floor.measure(int(run["request_bytes"]), requests / run["seconds"], requests)
    results["floor"] = floor
    run["cpu_over_floor"] = run["cpu_us_per_request"] / floor["cpu_us_per_request"]


def _print_floor_run(run: dict[str, dict[str, float]]) -> None:
    """One kafka-py run's 100 B acks=1 CPU per request against its floor (stderr)."""
    p100, floor = run.get("p100_a1", {}), run.get("floor", {})
    if "cpu_over_floor" in p100:
        print(
            f"  kafka-py: 100 B acks=1 {p100['requests']:.0f} requests of "
            f"{p100['request_bytes']:,.0f} B, broker CPU {p100['cpu_us_per_request']:.0f} µs "
            f"per request; floor {floor['cpu_us_per_request']:.0f} µs "
            f"(client {floor['client_cpu_us_per_request']:.0f}, server "
            f"{floor['server_cpu_us_per_request']:.0f}); {p100['cpu_over_floor']:.2f}x",
            file=sys.stderr,
            flush=True,
        )


def bench_peer(peer: Peer) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    topics: dict[str, str] = {}
    peer.start()
    try:
        warm_up(peer)
        for sc in selected(SCENARIOS, ONLY):
            topic = (
                topics[sc.reuse_topic_of]
                if sc.reuse_topic_of
                else f"bench-{sc.key}-{uuid.uuid4().hex[:6]}"
            )
            if not sc.reuse_topic_of:
                create_topic(peer.bootstrap, topic)
            topics[sc.key] = topic
            print(f"  {peer.name}: {sc.title} ...", file=sys.stderr, flush=True)
            try:
                results[sc.key] = run_workload(peer, sc, topic)
            except Exception as exc:  # one failed scenario is reported, the rest still runs
                print(f"  {peer.name}: {sc.title} FAILED: {exc}", file=sys.stderr)
                results[sc.key] = {}
    finally:
        peer.stop()
    return results


FLOOR_TITLE = "bare gRPC round trip, 100 B acks=1 request size and rate: client + server CPU (µs)"
ROWS = [
    ("p1k_a1", "mb_per_s", "produce 1 KiB acks=1 (MB/s)", True),
    ("p1k_a1", "records_per_s", "produce 1 KiB acks=1 (msg/s)", True),
    ("p1k_aall", "mb_per_s", "produce 1 KiB acks=all (MB/s)", True),
    ("p100_a1", "records_per_s", "produce 100 B acks=1 (msg/s)", True),
    ("p100_aall", "records_per_s", "produce 100 B acks=all (msg/s)", True),
    ("p1k_idem", "records_per_s", "produce 1 KiB idempotent (msg/s)", True),
    ("p1k_txn", "records_per_s", "produce 1 KiB, 100 per transaction (msg/s)", True),
    ("c1k", "mb_per_s", "consume 1 KiB (MB/s)", True),
    ("c1k", "records_per_s", "consume 1 KiB (msg/s)", True),
    ("lat", "p50_ms", "e2e latency p50 (ms)", False),
    ("lat", "p99_ms", "e2e latency p99 (ms)", False),
    ("p1k_a1", "cpu_s_per_gb", "broker CPU-s per GB produced (1 KiB)", False),
    ("c1k", "cpu_s_per_gb", "broker CPU-s per GB consumed (1 KiB)", False),
    ("p1k_a1", "requests", "Produce requests sent, 1 KiB acks=1", False),
    ("p100_a1", "requests", "Produce requests sent, 100 B acks=1", False),
    ("p1k_a1", "cpu_us_per_request", "broker CPU per Produce request, 1 KiB acks=1 (µs)", False),
    ("p100_a1", "cpu_us_per_request", "broker CPU per Produce request, 100 B acks=1 (µs)", False),
    ("p100_a1", "request_bytes", "bytes per Produce request, 100 B acks=1", False),
    ("floor", "cpu_us_per_request", FLOOR_TITLE, False),
    ("p100_a1", "cpu_over_floor", "broker CPU per 100 B request / gRPC floor (goal ≤ 1.5)", False),
]
OWN_ONLY = {"floor", "cpu_over_floor"}  # rows the peer has no counterpart for


def fmt(v: float | None) -> str:
    if v is None:
        return "failed"
    return f"{v:,.0f}" if v >= 100 else f"{v:,.2f}"


Runs = list[dict[str, dict[str, float]]]


def _values(runs: Runs, key: str, metric: str) -> list[float]:
    return [r[key][metric] for r in runs if metric in r.get(key, {})]


def _cell(values: list[float]) -> str:
    if not values:
        return "failed"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"


def table(ours: Runs, peer: Runs, only_measured: bool = False) -> str:
    """The table; ``only_measured`` leaves out the rows neither broker has a value for."""
    lines = ["| metric | kafka-py | Tansu | kafka-py / Tansu |", "|---|---:|---:|---:|"]
    for key, metric, title, _higher_better in ROWS:
        a = _values(ours, key, metric)
        b = _values(peer, key, metric)
        if only_measured and not a and not b:
            continue
        ratio = "-"
        if a and b and statistics.median(b):
            ratio = f"{statistics.median(a) / statistics.median(b):.2f}"
        theirs = "n/a" if {key, metric} & OWN_ONLY else _cell(b)
        lines.append(f"| {title} | {_cell(a)} | {theirs} | {ratio} |")
    return "\n".join(lines)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import confluent_kafka

    return (
        f"{os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB RAM, {platform.platform()}, "
        f"Python {platform.python_version()}, confluent-kafka {confluent_kafka.version()[0]} "
        f"(librdkafka {confluent_kafka.libversion()[0]})"
    )


def main() -> None:
    print(
        f"kafka-py benchmark (scale {SCALE}, {REPEAT} run(s)); {PARTITIONS} partitions, RF 1, "
        "confluent-kafka client",
        file=sys.stderr,
    )
    ours: Runs = []
    theirs: Runs = []
    for _ in range(REPEAT):  # alternating, so slow phases of a shared machine hit both alike
        if not PEERS or KafkaPyPeer.name in PEERS:
            ours.append(bench_peer(KafkaPyPeer()))
            with_grpc_floor(ours[-1])
            _print_floor_run(ours[-1])
        if not PEERS or TansuPeer.name in PEERS:
            theirs.append(bench_peer(TansuPeer()))
    tbl = table(ours, theirs, only_measured=bool(ONLY or PEERS))
    print(tbl)
    if ONLY or PEERS:
        print("\nBENCH_ONLY / BENCH_PEERS: docs/benchmarks.md left as it is", file=sys.stderr)
        return
    runs = (
        "one run of each"
        if REPEAT == 1
        else (f"{REPEAT} alternating runs of each: median (min-max)")
    )
    doc = ROOT / "docs" / "benchmarks.md"
    doc.write_text(
        single_client_section(tbl, runs) + later_sections(doc),
    )
    print(f"\nwritten to {doc.relative_to(ROOT)}", file=sys.stderr)


def later_sections(doc: Path) -> str:
    """What follows the single-client table in ``doc`` (the scale suite's section and any
    hand-written ones, from the first ``## `` heading on), kept as it is."""
    try:
        text = doc.read_text()
    except FileNotFoundError:
        return ""
    at = text.find("\n## ")
    return "\n" + text[at + 1 :] if at >= 0 else ""


def single_client_section(tbl: str, runs: str) -> str:
    return (
        "# Benchmarks\n\n"
        "Generated by `make bench` (bench/run.py). Same client (confluent-kafka), same workload, same run, "
        "kafka-py's local cluster (1 gateway, 3 storage nodes, 2 controllers, 2 group coordinators, ZooKeeper) against Tansu "
        "(memory storage). Each broker first serves a warm-up that is not measured (100,000 "
        "1 KiB records produced on a topic of its own, then read three times). "
        "Broker CPU is summed over every process of each broker from /proc. "
        "End-to-end latency: 1 KiB records produced at 1,000/s (acks=all, linger 0), each timed "
        "when the consumer's poll returns it. Produce requests are counted by the client "
        "(librdkafka's statistics); broker CPU per request is the run's broker CPU divided by "
        "that count (docs/performance.md: why it decides the 100 B rows). The bare gRPC floor "
        "(bench/grpc_floor.py), measured after each kafka-py run with nothing else running: "
        "one message of that run's average 100 B acks=1 request size out and a 64-byte answer "
        "back, at that run's request rate, between two processes with the services' gRPC "
        "options under uvloop; the CPU of both per round trip is what the gateway-to-storage "
        "transport alone costs a Produce request.\n\n"
        f"Machine: {machine()}\n\nDate: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"scale {SCALE}, {runs}\n\n"
        f"{tbl}\n"
    )


if __name__ == "__main__":
    main()
