"""Client workloads run in their own process (so client CPU is not counted as broker CPU).

Each prints one JSON line with its measurements. Usage:
    python -m bench.workloads produce  --bootstrap H:P --topic T --size 1024 --count N --acks 1
    python -m bench.workloads produce  ... --idempotent      (enable.idempotence, acks=all)
    python -m bench.workloads produce  ... --per-transaction 100   (transactional, commits)
    python -m bench.workloads consume  --bootstrap H:P --topic T --count N
    python -m bench.workloads latency  --bootstrap H:P --topic T --rate 1000 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

STATS_INTERVAL_MS = 100
PRODUCER_TUNING = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "queue.buffering.max.messages": 1_000_000,
}


def _produce_requests(stats_json: str) -> tuple[int, int]:
    """(Produce requests, bytes sent) to every broker, from librdkafka's statistics. The bytes
    are every request's, Produce all but a few hundred of them."""
    brokers = json.loads(stats_json).get("brokers", {}).values()
    return (
        sum(b.get("req", {}).get("Produce", 0) for b in brokers),
        sum(b.get("txbytes", 0) for b in brokers),
    )


def _wait_for_go(args: argparse.Namespace) -> None:
    """With ``--ready-go``: say ``ready`` on stdout once the client exists, and start when a line
    arrives on stdin, so that a phase's processes start their work together (bench/scale: 32
    interpreters starting on 2 cores would otherwise spread the phase's start over seconds)."""
    if args.ready_go:
        print("ready", flush=True)
        sys.stdin.readline()


def produce(args: argparse.Namespace) -> dict[str, float]:
    requests = sent_bytes = 0

    def on_stats(stats_json: str) -> None:
        nonlocal requests, sent_bytes
        n, sent = _produce_requests(stats_json)
        requests, sent_bytes = max(requests, n), max(sent_bytes, sent)

    per_txn = args.per_transaction
    config = {
        "bootstrap.servers": args.bootstrap,
        "acks": args.acks,
        "statistics.interval.ms": STATS_INTERVAL_MS,
        "stats_cb": on_stats,
        **PRODUCER_TUNING,
    }
    if args.idempotent or per_txn:
        config.update({"enable.idempotence": True, "acks": "all"})
    if per_txn:
        config["transactional.id"] = f"bench-{args.topic}"
    producer = Producer(config)
    if per_txn:
        producer.init_transactions(60)
    payload = os.urandom(args.size)
    errors = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    _wait_for_go(args)
    started = time.time()  # wall clock: a phase's processes are timed together (bench/scale)
    start = time.perf_counter()
    for i in range(args.count):
        if per_txn and i % per_txn == 0:
            if i:
                producer.commit_transaction(60)
            producer.begin_transaction()
        while True:
            try:
                producer.produce(
                    args.topic, payload, partition=i % args.partitions, on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.005)
        if i % 1000 == 0:
            producer.poll(0)
    if per_txn:
        producer.commit_transaction(120)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    ended = time.time()
    if remaining or errors:
        raise SystemExit(f"produce failed: {errors} errors, {remaining} undelivered")
    producer.poll(2 * STATS_INTERVAL_MS / 1000)  # (untimed) statistics that count every request
    mb = args.count * args.size / 1e6
    return {
        "seconds": elapsed,
        "records_per_s": args.count / elapsed,
        "mb_per_s": mb / elapsed,
        "mb": mb,
        "requests": requests,
        "request_bytes": sent_bytes / requests if requests else 0.0,
        "started": started,
        "ended": ended,
    }


def consume(args: argparse.Namespace) -> dict[str, float]:
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    consumer.assign([TopicPartition(args.topic, p, 0) for p in range(args.partitions)])
    _wait_for_go(args)
    got = 0
    nbytes = 0
    errors = 0
    started = time.time()
    start = time.perf_counter()
    deadline = start + 300
    while got < args.count and time.perf_counter() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            err = msg.error()
            if err is not None:
                if err.fatal():
                    raise KafkaException(err)
                errors += 1  # e.g. a fetch answered REQUEST_TIMED_OUT: the client fetches again
                continue
            got += 1
            nbytes += len(msg.value() or b"")
    elapsed = time.perf_counter() - start
    ended = time.time()
    consumer.close()
    if got < args.count:
        raise SystemExit(f"consume got {got} of {args.count}")
    return {
        "seconds": elapsed,
        "records_per_s": got / elapsed,
        "mb_per_s": nbytes / 1e6 / elapsed,
        "mb": nbytes / 1e6,
        "errors": errors,
        "started": started,
        "ended": ended,
    }


def _assign_at_end(consumer: Consumer, topic: str, partitions: int) -> None:
    """Assign every partition at its current log end (resolved here, so that nothing produced
    afterwards is missed), then let the consumer connect and start fetching."""
    parts = []
    for p in range(partitions):
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        parts.append(TopicPartition(topic, p, high))
    consumer.assign(parts)
    warm_until = time.monotonic() + 1.0
    while time.monotonic() < warm_until:
        consumer.poll(0.05)  # nothing to take yet: the topic has no new records


def latency(args: argparse.Namespace) -> dict[str, float]:
    """Produce at a fixed rate (acks=all, no linger) and time each record to its consumer.

    Each record is timed as soon as the consumer client hands it over: one ``poll`` per record.
    (``consume(n, timeout)`` would wait until n records or the timeout, adding up to that
    timeout to every record's latency at this rate.)"""
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": "bench-latency",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 500,
            "fetch.min.bytes": 1,
        }
    )
    _assign_at_end(consumer, args.topic, args.partitions)
    total = int(args.rate * args.seconds)
    lat: list[float] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set() and len(lat) < total:
            msg = consumer.poll(0.1)
            if msg is None or msg.error():
                continue
            sent = int.from_bytes((msg.value() or b"")[:8], "big") / 1e9
            lat.append(time.time() - sent)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": 0})
    pad = b"x" * max(0, args.size - 8)
    start = time.perf_counter()
    for i in range(total):
        target = start + i / args.rate
        while (now := time.perf_counter()) < target:
            time.sleep(min(0.001, target - now))
        producer.produce(
            args.topic, time.time_ns().to_bytes(8, "big") + pad, partition=i % args.partitions
        )
        producer.poll(0)
    producer.flush(30)
    thread.join(30)
    done.set()
    consumer.close()
    if len(lat) < total * 0.99:
        raise SystemExit(f"latency run received {len(lat)} of {total}")
    q = statistics.quantiles(lat, n=100)
    return {"p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000, "records": len(lat)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["produce", "consume", "latency"])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--acks", default="1")
    p.add_argument("--idempotent", action="store_true")
    p.add_argument("--per-transaction", type=int, default=0, help="records per transaction")
    p.add_argument("--rate", type=float, default=1000)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--ready-go", action="store_true", help="start on a line on stdin")
    args = p.parse_args()
    result = {"produce": produce, "consume": consume, "latency": latency}[args.mode](args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
