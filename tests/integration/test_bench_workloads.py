"""`make bench`'s client workloads against the real cluster: what they print is what happened.

The benchmark itself is too slow for the suite; its workloads are run here with small counts,
the way bench/run.py runs them (their own process, one JSON line out). Timings are not asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from bench import grpc_floor
from bench.run import SCENARIOS, later_sections, selected, single_client_section, table
from bench.workloads import _produce_requests
from services.cli.local_cluster import LocalCluster
from tests.integration.kafka_support import consume_confluent, gateway_requests

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3


def run(mode: str, bootstrap: str, topic: str, *args: str) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench.workloads", mode, "--bootstrap", bootstrap]
    cmd += ["--topic", topic, "--partitions", str(PARTITIONS), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def end_offsets(bootstrap: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-test"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def produce_requests_served(cluster: LocalCluster) -> int:
    return sum(gateway_requests(cluster, "Produce").values())


def test_produce_counts_its_requests_and_consume_reads_them(
    cluster: LocalCluster, topic: Callable[..., str]
) -> None:
    bootstrap = cluster.bootstrap
    name = topic(PARTITIONS, replication_factor=1)
    served_before = produce_requests_served(cluster)
    produced = run("produce", bootstrap, name, "--size", "100", "--count", "3000", "--acks", "1")
    assert produced["mb"] == pytest.approx(0.3)
    # the client's count is the gateway's: every Produce request, nothing else
    assert produced["requests"] == produce_requests_served(cluster) - served_before
    assert produced["requests"] >= PARTITIONS  # librdkafka: one partition per request
    assert end_offsets(bootstrap, name) == [1000, 1000, 1000]

    consumed = run("consume", bootstrap, name, "--count", "3000")
    assert consumed["mb"] == pytest.approx(0.3)


def test_transactional_produce_commits_every_record(
    bootstrap: str, topic: Callable[..., str]
) -> None:
    """100 records per transaction, the last one partial: read_committed sees every record,
    and each partition holds a commit marker per transaction that wrote to it."""
    name = topic(PARTITIONS, replication_factor=1)
    count = 1050
    result = run(
        "produce",
        bootstrap,
        name,
        "--size",
        "64",
        "--count",
        str(count),
        "--per-transaction",
        "100",
    )
    assert result["records_per_s"] > 0
    got = consume_confluent(
        bootstrap,
        name,
        list(range(PARTITIONS)),
        count,
        extra_config={"isolation.level": "read_committed"},
    )
    assert sum(len(recs) for recs in got.values()) == count
    assert end_offsets(bootstrap, name) == [350 + 11] * PARTITIONS


def test_idempotent_produce(bootstrap: str, topic: Callable[..., str]) -> None:
    name = topic(PARTITIONS, replication_factor=1)
    run("produce", bootstrap, name, "--size", "64", "--count", "300", "--idempotent")
    assert end_offsets(bootstrap, name) == [100] * PARTITIONS


def test_latency_times_every_record(bootstrap: str, topic: Callable[..., str]) -> None:
    name = topic(PARTITIONS, replication_factor=1)
    result = run("latency", bootstrap, name, "--size", "64", "--rate", "200", "--seconds", "1")
    assert result["records"] >= 198
    assert 0 < result["p50_ms"] <= result["p99_ms"]


def test_produce_requests_sum_every_broker_of_librdkafka_statistics() -> None:
    stats = {
        "brokers": {
            "127.0.0.1:9092/0": {"req": {"Produce": 7, "Metadata": 2}, "txbytes": 7_100},
            "127.0.0.1:9093/1": {"req": {"Produce": 5}, "txbytes": 5_000},
            "GroupCoordinator": {"req": {}},
        }
    }
    assert _produce_requests(json.dumps(stats)) == (12, 12_100)
    assert _produce_requests("{}") == (0, 0)


def test_the_grpc_floor_times_real_round_trips_between_two_processes() -> None:
    """bench/grpc_floor.py: the calls are made (at about the rate asked) and both processes'
    CPU is counted; the floor row and the ratio row have no peer cell."""
    floor = grpc_floor.measure(size=1_000, rate=500.0, count=300)
    assert floor["client_cpu_us_per_request"] > 0 and floor["server_cpu_us_per_request"] >= 0
    assert floor["cpu_us_per_request"] == pytest.approx(
        floor["client_cpu_us_per_request"] + floor["server_cpu_us_per_request"]
    )
    assert 0 < floor["requests_per_s"] <= 500 * 1.05  # paced, never faster than asked
    ours = [{"p100_a1": {"cpu_over_floor": 2.0}, "floor": {"cpu_us_per_request": 400.0}}]
    lines = table(ours, [{}]).splitlines()
    assert next(line for line in lines if line.startswith("| bare gRPC")).endswith(
        "| 400 | n/a | - |"
    )
    assert next(line for line in lines if "/ gRPC floor" in line).endswith("| 2.00 | n/a | - |")


def test_table_shows_both_brokers_the_ratio_and_failed_cells() -> None:
    ours = [{"p100_a1": {"requests": 1200.0, "cpu_us_per_request": 900.0}}]
    theirs = [{"p100_a1": {"requests": 800.0, "cpu_us_per_request": 300.0}}]
    lines = table(ours, theirs).splitlines()
    row = next(line for line in lines if "CPU per Produce request, 100 B" in line)
    assert row.split("|")[2:5] == [" 900 ", " 300 ", " 3.00 "]
    assert any("| failed | failed | - |" in line for line in lines)  # rows nobody measured


def test_the_single_client_table_is_rewritten_and_the_sections_after_it_kept(
    tmp_path: Path,
) -> None:
    doc = tmp_path / "benchmarks.md"
    assert later_sections(doc) == ""  # no file yet
    doc.write_text("# Benchmarks\n\nold table\n\n## Scale\n\nscale rows\n<!-- scale:end -->\n")
    new = single_client_section("| new table |", "5 runs") + later_sections(doc)
    assert "old table" not in new and "| new table |" in new
    assert new.endswith("\n## Scale\n\nscale rows\n<!-- scale:end -->\n")


def test_bench_only_keeps_the_named_rows_and_the_topics_they_read() -> None:
    assert [sc.key for sc in selected(SCENARIOS, {"p100_a1"})] == ["p100_a1"]
    assert [sc.key for sc in selected(SCENARIOS, {"c1k"})] == ["p1k_a1", "c1k"]
    assert selected(SCENARIOS, set()) == SCENARIOS
    with pytest.raises(SystemExit, match="no scenario p100"):
        selected(SCENARIOS, {"p100"})
    run = {"p100_a1": {"records_per_s": 5.0e5}}
    assert table([run], [], only_measured=True).splitlines()[2:] == [
        "| produce 100 B acks=1 (msg/s) | 500,000 | failed | - |"
    ]
