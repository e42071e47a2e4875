"""kafka-python 3.x round trips: KafkaProducer with its defaults (idempotent, acks=all) and
compression variants; KafkaConsumer(group_id=None) with assign() + seek_to_beginning().

kafka-python's send() refuses null header values and records whose key and value are both null
(client-side checks), so its records avoid those two shapes.

10,000 records with the producer's pure defaults, plus 2,000 per compression codec. kafka-python
compresses snappy/lz4/zstd only through optional modules (python-snappy, lz4, zstandard); codecs
whose module is not installed are skipped with that reason (a client-side limitation).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import codec as kp_codec
from kafka_support import (
    ApiUsage,
    ReadRecord,
    Rec,
    TopicFactory,
    assert_partition_logs,
    make_records,
)

pytestmark = pytest.mark.integration

PER_CODEC = 2_000
DEFAULTS_COUNT = 10_000
KP_SHAPES = {"null_header_values": False, "null_key_and_value": False}
_CODEC_AVAILABLE = {
    "gzip": kp_codec.has_gzip,
    "snappy": kp_codec.has_snappy,
    "lz4": kp_codec.has_lz4,
    "zstd": kp_codec.has_zstd,
}


def _produce(bootstrap: str, topic: str, records: Sequence[Rec], **config: object) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    try:
        assert producer.config["enable_idempotence"] is True
        assert producer.config["acks"] == -1
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                headers=list(r.headers),
                partition=r.partition,
                timestamp_ms=r.timestamp,
            )
            for r in records
        ]
        producer.flush(timeout=60)
        metas = [f.get(timeout=30) for f in futures]
    finally:
        producer.close(timeout=10)
    per_part: dict[int, list[int]] = {}
    for r, m in zip(records, metas, strict=True):
        assert m.partition == r.partition
        per_part.setdefault(m.partition, []).append(m.offset)
    for p, offs in per_part.items():
        assert offs == list(range(len(offs))), f"partition {p}: acknowledged offsets not 0..n-1"


def _consume(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int],
    expected: int,
    timeout: float = 60.0,
    start: dict[int, int] | None = None,
) -> dict[int, list[ReadRecord]]:
    """Read ``expected`` records; from the beginning, or from ``start`` offsets (seek)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    out: dict[int, list[ReadRecord]] = {p: [] for p in partitions}
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        if start is None:
            consumer.seek_to_beginning()
        else:
            for tp in tps:
                consumer.seek(tp, start[tp.partition])
        total = 0
        deadline = time.monotonic() + timeout
        while total < expected:
            assert time.monotonic() < deadline, f"read {total}/{expected} within {timeout}s"
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                for m in msgs:
                    rec = Rec(m.partition, m.key, m.value, tuple(m.headers), m.timestamp)
                    out[tp.partition].append(ReadRecord(m.offset, m.timestamp_type, rec))
                    total += 1
        # nothing beyond what was produced
        ends = consumer.end_offsets(tps)
        for tp in tps:
            first = (start or {}).get(tp.partition, 0)
            assert ends[tp] == first + len(out[tp.partition]), f"{tp}: end offset {ends[tp]}"
        assert not any(consumer.poll(timeout_ms=300).values())
    finally:
        consumer.close()
    return out


def test_kafka_python_defaults_round_trip(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage
) -> None:
    name = topic()
    records = make_records("kp-defaults", DEFAULTS_COUNT, **KP_SHAPES)
    with api_usage.record("kafka-python"):
        _produce(bootstrap, name, records)
        got = _consume(bootstrap, name, [0, 1, 2], len(records))
    assert_partition_logs(records, got)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_compressed_round_trip(
    bootstrap: str, topic: TopicFactory, api_usage, codec: str
) -> None:
    if not _CODEC_AVAILABLE[codec]():
        pytest.skip(f"kafka-python has no {codec} module installed (client-side limitation)")
    name = topic()
    records = make_records(f"kp-{codec}", PER_CODEC, **KP_SHAPES)
    with api_usage.record("kafka-python"):
        _produce(bootstrap, name, records, compression_type=codec, linger_ms=5)
        got = _consume(bootstrap, name, [0, 1, 2], len(records))
    assert_partition_logs(records, got)

    # seek into the middle of a compressed batch: the broker returns the whole batch, the
    # client skips what precedes the position
    p1 = [r for r in records if r.partition == 1]
    k = len(p1) // 2 + 1
    with api_usage.record("kafka-python"):
        tail = _consume(bootstrap, name, [1], len(p1) - k, start={1: k})[1]
    assert [rr.offset for rr in tail] == list(range(k, len(p1)))
    assert [rr.rec for rr in tail] == p1[k:]
