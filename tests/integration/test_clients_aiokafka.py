"""aiokafka round trips: AIOKafkaProducer(enable_idempotence=True) and
AIOKafkaConsumer(group_id=None) with assign() + seek_to_beginning().

2,000 records per codec (10,000 in total) over 3 partitions with the full record shape mix,
except records whose key and value are both null: aiokafka's send() refuses them (client check).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
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


async def _produce(bootstrap: str, topic: str, records: Sequence[Rec], codec: str) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        max_batch_size=64 * 1024,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers),
            )
            for r in records
        ]
        metas = await asyncio.wait_for(asyncio.gather(*futures), 60)
    finally:
        await producer.stop()
    per_part: dict[int, list[int]] = {}
    for r, m in zip(records, metas, strict=True):
        assert m.partition == r.partition
        per_part.setdefault(m.partition, []).append(m.offset)
    for p, offs in per_part.items():
        assert offs == list(range(len(offs))), f"partition {p}: acknowledged offsets not 0..n-1"


async def _consume(
    bootstrap: str, topic: str, partitions: Sequence[int], expected: int, limit_s: float = 60.0
) -> dict[int, list[ReadRecord]]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    out: dict[int, list[ReadRecord]] = {p: [] for p in partitions}
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        total = 0
        deadline = time.monotonic() + limit_s
        while total < expected:
            assert time.monotonic() < deadline, f"read {total}/{expected} within {limit_s}s"
            batch = await consumer.getmany(timeout_ms=500)
            for tp, msgs in batch.items():
                for m in msgs:
                    rec = Rec(m.partition, m.key, m.value, tuple(m.headers), m.timestamp)
                    out[tp.partition].append(ReadRecord(m.offset, m.timestamp_type, rec))
                    total += 1
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            assert ends[tp] == len(out[tp.partition]), f"{tp}: end offset {ends[tp]}"
        extra = await consumer.getmany(timeout_ms=300)
        assert not any(extra.values()), "records beyond the produced ones"
    finally:
        await consumer.stop()
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_aiokafka_round_trip(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage, codec: str
) -> None:
    name = topic()
    records = make_records(f"aio-{codec}", PER_CODEC, null_key_and_value=False)
    with api_usage.record("aiokafka"):
        await _produce(bootstrap, name, records, codec)
        got = await _consume(bootstrap, name, [0, 1, 2], len(records))
    assert_partition_logs(records, got)
