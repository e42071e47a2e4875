"""Independent full reads of every partition after the heal, with two different clients.

``confluent_read`` (librdkafka) and ``kafka_python_read`` each read every partition from its
beginning to the end offset (high watermark) they ask for themselves, and return a
``FinalRead``; a read that cannot finish within its timeout says so in ``error`` (with what it
got), which the checker reports as a liveness failure.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from tests.e2e.checker.history import TP, FinalRead


def confluent_read(
    bootstrap: str, tps: Sequence[TP], timeout: float = 60.0, *, isolation: str | None = None
) -> FinalRead:
    """``isolation``: ``"read_committed"`` / ``"read_uncommitted"`` (librdkafka's default,
    read_committed, when None); a read_committed read ends at the high watermark only when the
    last stable offset reaches it."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    name = "confluent-kafka" + (f" {isolation}" if isolation else "")
    out = FinalRead(name, {tp: [] for tp in tps})
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": "checker-final-read",  # required by the binding; no group protocol used
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
        "log_level": 2,
    }
    if isolation:
        config["isolation.level"] = isolation
    consumer = Consumer(config)
    deadline = time.monotonic() + timeout
    try:
        ends: dict[TP, int] = {}
        for tp in tps:
            while True:
                try:
                    ends[tp] = consumer.get_watermark_offsets(TopicPartition(*tp), timeout=10)[1]
                    break
                except Exception as exc:  # noqa: BLE001 - retried until the deadline
                    if time.monotonic() > deadline:
                        out.error = f"no end offset for {tp}: {exc}"
                        return out
                    time.sleep(0.5)
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in tps])
        nxt = dict.fromkeys(tps, 0)
        while any(nxt[tp] < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                out.error = f"read stopped short: next {nxt}, ends {ends}"
                return out
            for m in consumer.consume(5000, 0.5):
                if m.error() is not None:
                    continue  # EOF and transient errors; the loop ends on offsets
                tp = (m.topic(), m.partition())
                if m.offset() < ends[tp]:
                    out.records[tp].append((m.offset(), m.value()))
                nxt[tp] = max(nxt[tp], m.offset() + 1)
            # the position also moves past control records and compacted-away tails
            for pos in consumer.position([TopicPartition(t, p) for t, p in tps]):
                tp = (pos.topic, pos.partition)
                nxt[tp] = max(nxt[tp], pos.offset)
    finally:
        consumer.close()
    return out


def kafka_python_read(bootstrap: str, tps: Sequence[TP], timeout: float = 60.0) -> FinalRead:
    from kafka import KafkaConsumer, TopicPartition

    out = FinalRead("kafka-python", {tp: [] for tp in tps})
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    deadline = time.monotonic() + timeout
    try:
        parts = [TopicPartition(*tp) for tp in tps]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = {(tp.topic, tp.partition): o for tp, o in consumer.end_offsets(parts).items()}
        nxt = dict.fromkeys(tps, 0)
        while any(nxt[tp] < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                out.error = f"read stopped short: next {nxt}, ends {ends}"
                return out
            for tp_, msgs in consumer.poll(timeout_ms=500, max_records=5000).items():
                tp = (tp_.topic, tp_.partition)
                for m in msgs:
                    if m.offset < ends[tp]:
                        out.records[tp].append((m.offset, m.value))
                    nxt[tp] = max(nxt[tp], m.offset + 1)
            for part in parts:  # past control records and compacted-away tails too
                tp = (part.topic, part.partition)
                nxt[tp] = max(nxt[tp], consumer.position(part) or 0)
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the verdicts still run
        out.error = f"kafka-python read failed: {exc!r}"
    finally:
        consumer.close()
    return out
