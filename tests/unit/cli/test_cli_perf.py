"""perf produce/consume: statistics, throttling and output lines."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from confluent_kafka import KafkaError

from services.cli import perf
from services.cli.common import CliError
from services.cli.main import build_parser


def test_percentile_picks_the_kafka_rank() -> None:
    values = [float(v) for v in range(1, 1001)]
    assert perf.percentile(values, 0.5) == 501.0
    assert perf.percentile(values, 0.999) == 1000.0
    assert perf.percentile([], 0.5) == 0.0
    assert perf.percentile([4.0], 0.99) == 4.0


def test_stats_window_and_summary() -> None:
    stats = perf.ProduceStats(start=100.0)
    for ms in (1.0, 2.0, 3.0, 10.0):
        stats.record(ms, 1024 * 1024)
    assert stats.window_line(102.0) == (
        "4 records sent, 2.0 records/sec (2.00 MB/sec), 4.0 ms avg latency, 10.0 ms max latency."
    )
    stats.record(4.0, 1024 * 1024)
    assert stats.window_line(103.0).startswith("1 records sent, 1.0 records/sec")
    assert stats.summary(105.0) == (
        "5 records sent, 1.0 records/sec (1.00 MB/sec), 4.00 ms avg latency, 10.00 ms max latency, "
        "3.00 ms 50th, 10.00 ms 95th, 10.00 ms 99th, 10.00 ms 99.9th."
    )


def test_throttle() -> None:
    t = perf.Throttle(100.0, start=10.0)
    assert t.delay(50, now=10.0) == pytest.approx(0.5)
    assert t.delay(50, now=11.0) == 0.0
    assert perf.Throttle(-1, 0.0).delay(10**6, 0.0) == 0.0


def test_payload_is_upper_case_letters() -> None:
    data = perf.payload(1000, seed=1)
    assert len(data) == 1000 and set(data) <= set(range(65, 91))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001  # every reading advances 1 ms
        return self.now


class FakeProducer:
    def __init__(self, conf: dict[str, Any], fail_every: int = 0) -> None:
        self.conf = conf
        self.pending: list[Any] = []
        self.count = 0
        self.fail_every = fail_every

    def produce(self, topic: str, value: bytes, on_delivery: Any) -> None:
        assert len(value) == 100
        self.count += 1
        self.pending.append((self.count, on_delivery))

    def poll(self, timeout: float = 0) -> int:
        for n, cb in self.pending:
            fail = self.fail_every and n % self.fail_every == 0
            cb(KafkaError(KafkaError.REQUEST_TIMED_OUT) if fail else None, None)
        self.pending.clear()
        return 0

    def flush(self, timeout: float = 0) -> int:
        return self.poll()

    def __len__(self) -> int:
        return len(self.pending)


def _produce_args(*extra: str) -> Any:
    return build_parser().parse_args(
        ["perf", "produce", "--topic", "t", "--num-records", "50", "--record-size", "100", *extra]
    )


def test_run_produce_reports_progress_and_summary() -> None:
    out, err = io.StringIO(), io.StringIO()
    made: list[FakeProducer] = []
    args = _produce_args(
        "--acks",
        "1",
        "--compression",
        "zstd",
        "--batch-size",
        "1000",
        "--linger-ms",
        "7",
        "--reporting-interval",
        "20",
    )
    code = perf.run_produce(
        args, {}, out, err, lambda c: made.append(FakeProducer(c)) or made[-1], Clock()
    )
    assert code == 0
    conf = made[0].conf
    assert (conf["acks"], conf["compression.type"], conf["batch.size"], conf["linger.ms"]) == (
        "1",
        "zstd",
        1000,
        7,
    )
    summary = out.getvalue().strip()
    assert re.fullmatch(
        r"50 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
        r"[\d.]+ ms max latency, [\d.]+ ms 50th, [\d.]+ ms 95th, [\d.]+ ms 99th, "
        r"[\d.]+ ms 99.9th\.",
        summary,
    ), summary
    progress = err.getvalue().splitlines()
    assert progress and all(
        re.match(r"\d+ records sent, .* ms max latency\.$", p) for p in progress
    )


def test_run_produce_delivery_errors_fail() -> None:
    with pytest.raises(CliError, match="5 of 50 records failed: REQUEST_TIMED_OUT"):
        perf.run_produce(
            _produce_args(),
            {},
            io.StringIO(),
            io.StringIO(),
            lambda c: FakeProducer(c, fail_every=10),
            Clock(),
        )


def test_consume_summary_row() -> None:
    row = perf.consume_summary(0.0, 2.0, 4 * 1024 * 1024, 1000).split(", ")
    assert row[2:] == ["4.0000", "2.0000", "1000", "500.0000", "0", "2000", "2.0000", "500.0000"]
    assert len(perf.CONSUME_HEADER.split(", ")) == len(row)
