"""``kafka-py perf produce|consume``: load generators like kafka-producer-perf-test and
kafka-consumer-perf-test. Progress goes to stderr every ``--reporting-interval`` ms; the final
result goes to stdout.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TextIO

from services.cli.common import CliError, UsageError, kafka_error_text, key_value

COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")
MB = 1024 * 1024
PERCENTILES = (0.5, 0.95, 0.99, 0.999)
ClientFactory = Callable[[dict[str, Any]], Any]
Clock = Callable[[], float]


# ---- statistics ---------------------------------------------------------------------------
def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank style, as Kafka's perf test: element ``int(p * n)`` of the sorted values."""
    if not sorted_values:
        return 0.0
    return float(sorted_values[min(int(p * len(sorted_values)), len(sorted_values) - 1)])


class ProduceStats:
    """Latencies of acknowledged records: a window for progress lines and the whole run."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.count = 0
        self.bytes = 0
        self.errors = 0
        self.first_error: str | None = None
        self.total_latency = 0.0
        self.max_latency = 0.0
        self.latencies = array("d")
        self._w_start = start
        self._w_count = 0
        self._w_bytes = 0
        self._w_latency = 0.0
        self._w_max = 0.0

    def record(self, latency_ms: float, nbytes: int) -> None:
        self.count += 1
        self.bytes += nbytes
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.latencies.append(latency_ms)
        self._w_count += 1
        self._w_bytes += nbytes
        self._w_latency += latency_ms
        self._w_max = max(self._w_max, latency_ms)

    def error(self, text: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = text

    def window_line(self, now: float) -> str:
        """Progress since the previous call, then start a new window."""
        elapsed = max(now - self._w_start, 1e-9)
        n = self._w_count
        line = (
            f"{n} records sent, {n / elapsed:.1f} records/sec "
            f"({self._w_bytes / MB / elapsed:.2f} MB/sec), "
            f"{self._w_latency / n if n else 0.0:.1f} ms avg latency, "
            f"{self._w_max:.1f} ms max latency."
        )
        self._w_start, self._w_count, self._w_bytes, self._w_latency, self._w_max = (
            now,
            0,
            0,
            0.0,
            0.0,
        )
        return line

    def summary(self, end: float) -> str:
        elapsed = max(end - self.start, 1e-9)
        ordered = sorted(self.latencies)
        p50, p95, p99, p999 = (percentile(ordered, p) for p in PERCENTILES)
        avg = self.total_latency / self.count if self.count else 0.0
        return (
            f"{self.count} records sent, {self.count / elapsed:.1f} records/sec "
            f"({self.bytes / MB / elapsed:.2f} MB/sec), {avg:.2f} ms avg latency, "
            f"{self.max_latency:.2f} ms max latency, {p50:.2f} ms 50th, {p95:.2f} ms 95th, "
            f"{p99:.2f} ms 99th, {p999:.2f} ms 99.9th."
        )


class Throttle:
    """Keeps the send rate at ``per_second`` (<= 0: unlimited)."""

    def __init__(self, per_second: float, start: float) -> None:
        self.per_second = per_second
        self.start = start

    def delay(self, sent: int, now: float) -> float:
        if self.per_second <= 0:
            return 0.0
        return max(0.0, self.start + sent / self.per_second - now)


def payload(size: int, seed: int | None = None) -> bytes:
    """Random upper-case letters, like kafka-producer-perf-test's generated payload."""
    rng = random.Random(seed)
    return bytes(rng.choices(range(ord("A"), ord("Z") + 1), k=size))


# ---- parsers ------------------------------------------------------------------------------
def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    perf = sub.add_parser(
        "perf",
        help="load tests (producer and consumer)",
        description="Producer and consumer load tests.",
    )
    kinds = perf.add_subparsers(dest="perf_kind", metavar="{produce,consume}")
    kinds.required = True

    p = kinds.add_parser("produce", help="like kafka-producer-perf-test")
    common(p, False)
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, required=True)
    p.add_argument("--record-size", type=int, required=True, metavar="BYTES")
    p.add_argument(
        "--throughput",
        type=float,
        default=-1.0,
        help="records/sec to aim for; -1 = as fast as possible",
    )
    p.add_argument("--acks", choices=("all", "-1", "0", "1"), default="all")
    p.add_argument(
        "--compression",
        "--compression-type",
        dest="compression",
        choices=COMPRESSION,
        default="none",
    )
    p.add_argument("--batch-size", type=int, help="producer batch.size in bytes")
    p.add_argument("--linger-ms", type=int, help="producer linger.ms")
    p.add_argument(
        "--producer-props",
        type=key_value,
        nargs="+",
        action="extend",
        metavar="K=V",
        help="any librdkafka producer property",
    )
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="MS")

    p = kinds.add_parser("consume", help="like kafka-consumer-perf-test")
    common(p, False)
    p.add_argument("--topic", required=True)
    p.add_argument("--messages", type=int, required=True)
    p.add_argument(
        "--timeout",
        type=int,
        default=10000,
        metavar="MS",
        help="give up when no record arrives for this long",
    )
    p.add_argument("--fetch-size", type=int, help="consumer fetch.max.bytes")
    p.add_argument("--consumer-props", type=key_value, nargs="+", action="extend", metavar="K=V")
    p.add_argument("--hide-header", action="store_true")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="MS")


# ---- produce ------------------------------------------------------------------------------
def produce_config(args: argparse.Namespace, base: dict[str, Any]) -> dict[str, Any]:
    conf = dict(base)
    conf.update(
        {
            "acks": "all" if args.acks == "-1" else args.acks,
            "compression.type": args.compression,
            "message.timeout.ms": 60000,
        }
    )
    if args.batch_size is not None:
        conf["batch.size"] = args.batch_size
    if args.linger_ms is not None:
        conf["linger.ms"] = args.linger_ms
    conf.update(dict(args.producer_props or []))
    return conf


def run_produce(
    args: argparse.Namespace,
    base: dict[str, Any],
    out: TextIO,
    err: TextIO,
    producer_factory: ClientFactory | None = None,
    clock: Clock = time.monotonic,
) -> int:
    from confluent_kafka import KafkaException

    if args.num_records < 1 or args.record_size < 0:
        raise UsageError("--num-records must be at least 1 and --record-size not negative")
    if producer_factory is None:
        from confluent_kafka import Producer

        producer_factory = Producer
    producer = producer_factory(produce_config(args, base))
    value = payload(args.record_size)
    interval = args.reporting_interval / 1000.0
    start = clock()
    stats = ProduceStats(start)
    throttle = Throttle(args.throughput, start)
    next_report = start + interval

    def report(now: float) -> float:
        print(stats.window_line(now), file=err, flush=True)
        return now + interval

    for i in range(args.num_records):
        sent_at = clock()

        def on_delivery(e: Any, _msg: Any, sent_at: float = sent_at) -> None:
            if e is None:
                stats.record((clock() - sent_at) * 1000.0, args.record_size)
            else:
                stats.error(kafka_error_text(Exception(e)))

        while True:
            try:
                producer.produce(args.topic, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:
                raise CliError(kafka_error_text(exc)) from None
        producer.poll(0)
        now = clock()
        if (wait := throttle.delay(i + 1, now)) > 0:
            producer.poll(wait)
            now = clock()
        if now >= next_report:
            next_report = report(now)
    while len(producer) > 0:
        producer.poll(0.1)
        if (now := clock()) >= next_report:
            next_report = report(now)
    producer.flush(30)
    print(stats.summary(clock()), file=out, flush=True)
    if stats.errors:
        raise CliError(f"{stats.errors} of {args.num_records} records failed: {stats.first_error}")
    return 0


# ---- consume ------------------------------------------------------------------------------
def consume_config(args: argparse.Namespace, base: dict[str, Any]) -> dict[str, Any]:
    conf = dict(base)
    conf.update(
        {
            "group.id": f"kafka-py-perf-consumer-{random.randrange(1 << 30)}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        }
    )
    if args.fetch_size is not None:
        conf["fetch.max.bytes"] = args.fetch_size
    conf.update(dict(args.consumer_props or []))
    return conf


def _ts(epoch: float) -> str:
    return (
        datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S:")
        + f"{int(epoch * 1000) % 1000:03d}"
    )


def consume_summary(start_wall: float, end_wall: float, nbytes: int, count: int) -> str:
    """The result row of kafka-consumer-perf-test (no rebalance: assignment is direct)."""
    elapsed = max(end_wall - start_wall, 1e-9)
    mb = nbytes / MB
    return (
        f"{_ts(start_wall)}, {_ts(end_wall)}, {mb:.4f}, {mb / elapsed:.4f}, {count}, "
        f"{count / elapsed:.4f}, 0, {int(elapsed * 1000)}, {mb / elapsed:.4f}, {count / elapsed:.4f}"
    )


CONSUME_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def run_consume(
    args: argparse.Namespace,
    base: dict[str, Any],
    out: TextIO,
    err: TextIO,
    consumer_factory: ClientFactory | None = None,
) -> int:
    from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

    if args.messages < 1:
        raise UsageError("--messages must be at least 1")
    if consumer_factory is None:
        from confluent_kafka import Consumer

        consumer_factory = Consumer
    consumer = consumer_factory(consume_config(args, base))
    count = nbytes = 0
    try:
        try:
            md = consumer.list_topics(args.topic, timeout=args.request_timeout_ms / 1000.0)
        except KafkaException as exc:
            raise CliError(kafka_error_text(exc)) from None
        tmd = md.topics.get(args.topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            raise CliError(f"topic '{args.topic}' is not available")
        consumer.assign(
            [TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in sorted(tmd.partitions)]
        )
        start_wall = time.time()
        start = last = w_start = time.monotonic()
        w_count = w_bytes = 0
        interval = args.reporting_interval / 1000.0
        timed_out = False
        while count < args.messages:
            batch = consumer.consume(num_messages=min(500, args.messages - count), timeout=0.2)
            now = time.monotonic()
            for msg in batch:
                if (error := msg.error()) is not None:
                    if error.fatal():
                        raise CliError(kafka_error_text(Exception(error)))
                    continue
                size = len(msg.value() or b"") + len(msg.key() or b"")
                count += 1
                nbytes += size
                w_count += 1
                w_bytes += size
                last = now
            if now - w_start >= interval:
                el = now - w_start
                print(
                    f"{w_count} messages consumed, {w_count / el:.1f} msg/sec "
                    f"({w_bytes / MB / el:.2f} MB/sec)",
                    file=err,
                    flush=True,
                )
                w_start, w_count, w_bytes = now, 0, 0
            if (now - last) * 1000 >= args.timeout:
                timed_out = True
                break
        end_wall = start_wall + (last - start)
    finally:
        consumer.close()
    if not args.hide_header:
        print(CONSUME_HEADER, file=out)
    print(consume_summary(start_wall, end_wall, nbytes, count), file=out, flush=True)
    if timed_out:
        raise CliError(
            f"only {count} of {args.messages} messages consumed: no record for {args.timeout} ms"
        )
    return 0


def run(args: argparse.Namespace, base: dict[str, Any]) -> int:
    if args.perf_kind == "produce":
        return run_produce(args, base, sys.stdout, sys.stderr)
    return run_consume(args, base, sys.stdout, sys.stderr)
