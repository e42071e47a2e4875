"""The `kafkapy` source's two executor-side readers against the local cluster (no Spark): Fetch
requests decoded by aiokafka's Cython reader (the fast path) and confluent-kafka give the same
Arrow rows, record for record, for batches of every codec written by confluent-kafka (headers,
null keys and values), ranges starting and ending inside batches, transactions under both
isolation levels, and ranges below a DeleteRecords log start (failOnDataLoss both ways)."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_support import TopicFactory, make_records, produce_confluent

from services.cli.local_cluster import LocalCluster
from services.spark.fast_reader import aiokafka_settings, read_range_fast
from services.spark.options import KafkaPySparkError, parse_source
from services.spark.reader import OffsetRange, read_range_confluent
from tests.integration.txn_support import TxnPartition, init_producer_id

pytestmark = [pytest.mark.integration]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _both(bootstrap: str, rng: OffsetRange, **options: str) -> pa.Table:
    """Both readers' rows of `rng` (asserted equal) as one table."""
    opts = parse_source(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": rng.topic, **options}, streaming=False
    )
    settings = aiokafka_settings(opts.client)
    assert settings is not None
    fast = list(read_range_fast(opts, settings, rng.topic, rng.partition, rng.start, rng.until))
    slow = list(read_range_confluent(opts, rng))
    schema = fast[0].schema if fast else slow[0].schema if slow else None
    got = pa.Table.from_batches(fast, schema) if schema else pa.table({})
    want = pa.Table.from_batches(slow, schema) if schema else pa.table({})
    assert got.to_pylist() == want.to_pylist()
    return got


def test_fast_and_confluent_readers_give_the_same_rows(
    bootstrap: str, topic: TopicFactory, admin: AdminClient, cluster: LocalCluster
) -> None:
    name = topic(1)
    records = make_records(name, 500, 1, big_values=False)
    for i, codec in enumerate(CODECS):
        chunk = records[i * 100 : (i + 1) * 100]
        produce_confluent(
            bootstrap, name, chunk, config={"compression.type": codec, "batch.num.messages": 16}
        )
    for start, until in ((0, 500), (7, 493), (250, 251), (130, 390)):
        got = _both(bootstrap, OffsetRange(name, 0, start, until), includeHeaders="true")
        assert got.column("offset").to_pylist() == list(range(start, until))
        want = records[start:until]
        assert got.column("value").to_pylist() == [r.value for r in want]
        assert got.column("key").to_pylist() == [r.key for r in want]
    _both(bootstrap, OffsetRange(name, 0, 0, 500))  # without headers

    # transactions: committed, aborted, then a non-transactional record
    txn = topic(1)
    pid, epoch = init_producer_id(bootstrap)
    t = TxnPartition(cluster, txn, pid, epoch)

    async def write() -> None:
        await t.append([b"c0", b"c1"])
        await t.marker(True)
        await t.append([b"a0", b"a1"])
        await t.marker(False)

    asyncio.run(write())
    produce_confluent(bootstrap, txn, make_records(txn, 1, 1, headers=False)[:1])
    for level, count in (("read_committed", 3), ("read_uncommitted", 5)):
        got = _both(bootstrap, OffsetRange(txn, 0, 0, 7), **{"kafka.isolation.level": level})
        assert got.num_rows == count

    # below the log start after DeleteRecords: data loss, both ways
    (res,) = admin.delete_records([TopicPartition(name, 0, 200)], request_timeout=30).values()
    assert res.result(60).low_watermark == 200
    got = _both(bootstrap, OffsetRange(name, 0, 150, 260), failOnDataLoss="false")
    assert got.column("offset").to_pylist() == list(range(200, 260))
    opts = parse_source(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": name}, streaming=False
    )  # failOnDataLoss defaults to true
    settings = aiokafka_settings(opts.client)
    assert settings is not None
    with pytest.raises(KafkaPySparkError, match="failOnDataLoss"):
        list(read_range_fast(opts, settings, name, 0, 150, 260))
