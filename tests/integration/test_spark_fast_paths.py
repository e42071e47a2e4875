"""The `kafkapy` source's and sink's executor-side paths against the local cluster (no Spark).

Readers: Fetch requests decoded by aiokafka's Cython reader (the fast path) and confluent-kafka
give the same Arrow rows, record for record, for batches of every codec written by
confluent-kafka (headers, null keys and values), ranges starting and ending inside batches,
transactions under both isolation levels, and ranges below a DeleteRecords log start
(failOnDataLoss both ways). Writers: Produce requests of batches built by aiokafka's Cython
builder (the fast path) and confluent-kafka's producer land the same records in the same
partitions (librdkafka's default partitioner), in the same order, for every codec, string and
binary keys, null keys and values, headers, timestamps, a `partition` and a `topic` column."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter

import pyarrow as pa
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_support import TopicFactory, consume_confluent, make_records, now_ms, produce_confluent

from services.cli.local_cluster import LocalCluster
from services.spark.fast_reader import aiokafka_settings, read_range_fast
from services.spark.fast_sink import producer_settings, write_fast
from services.spark.options import KafkaPySparkError, librdkafka_config, parse_sink, parse_source
from services.spark.reader import OffsetRange, read_range_confluent
from services.spark.sink import produce_all
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


# an hour ago: older CreateTimes let the retention check delete the first segments (log start
# moves), as Kafka's time-based retention does
_BASE_MS = now_ms() - 3_600_000
_BASE = dt.datetime.fromtimestamp(_BASE_MS / 1000, dt.UTC)
_CHOSEN = ("p", b"1")  # the header of rows with a partition column value


def _sink_batches(topics: tuple[str, str]) -> list[pa.RecordBatch]:
    """300 rows over two topics (a `topic` column): string keys (null every 7th, empty every
    11th), binary values (null every 13th), a partition every 3rd row, headers (none every 4th
    row without a partition), timestamps (null every 9th: the producer's now)."""
    n = 300
    keys = [None if i % 7 == 0 else "" if i % 11 == 0 else f"k{i % 40}" for i in range(n)]
    values = [None if i % 13 == 0 else f"value-{i}".encode() * (i % 5 + 1) for i in range(n)]
    parts = [i % 2 if i % 3 == 0 else None for i in range(n)]
    headers = []
    for i in range(n):
        row = [{"key": "h", "value": str(i).encode()}, {"key": "n", "value": None}]
        if i % 3 == 0:
            row.append({"key": _CHOSEN[0], "value": _CHOSEN[1]})
        headers.append(None if i % 4 == 0 and i % 3 else row)
    stamps = [None if i % 9 == 0 else _BASE + dt.timedelta(milliseconds=i) for i in range(n)]
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    table = pa.table(
        {
            "key": pa.array(keys, pa.string()),
            "value": pa.array(values, pa.binary()),
            "partition": pa.array(parts, pa.int32()),
            "headers": pa.array(headers, pa.list_(header)),
            "timestamp": pa.array(stamps, pa.timestamp("us", tz="UTC")),
            "topic": pa.array([topics[i % 2] for i in range(n)]),
        }
    )
    return table.to_batches(max_chunksize=70)


def _landed(bootstrap: str, topic: str, count: int) -> dict[int, list[tuple[object, ...]]]:
    """Records by partition; a "now" timestamp (a null in the column) reads as None."""
    got = consume_confluent(bootstrap, topic, [0, 1, 2], count)
    return {
        p: [
            (
                r.rec.key,
                r.rec.value,
                r.rec.headers,
                r.rec.timestamp if r.rec.timestamp < _BASE_MS + 1000 else None,
                r.timestamp_type,
            )
            for r in rs
        ]  # fmt: skip
        for p, rs in got.items()
    }


def _placed(landed: dict[int, list[tuple[object, ...]]]) -> dict[int, list[tuple[object, ...]]]:
    """The records whose partition is not random: a key, or a partition column value."""
    return {p: [r for r in rs if r[0] or _CHOSEN in (r[2] or ())] for p, rs in landed.items()}


def test_fast_and_confluent_writers_land_the_same_records(
    bootstrap: str, topic: TopicFactory
) -> None:
    for codec in CODECS:
        fast, slow = (topic(3), topic(3)), (topic(3), topic(3))
        options = {"kafka.bootstrap.servers": bootstrap, "kafka.compression.type": codec}
        fast_opts, slow_opts = parse_sink(options), parse_sink(options)
        settings = producer_settings(fast_opts)
        assert settings is not None
        assert write_fast(fast_opts, *settings, iter(_sink_batches(fast))) == 300
        conf = librdkafka_config(slow_opts.client, **{"enable.idempotence": True, "acks": "all"})
        assert produce_all(Producer(conf), slow_opts, iter(_sink_batches(slow)))[0] == 300
        for f, s in zip(fast, slow, strict=True):
            got, want = _landed(bootstrap, f, 150), _landed(bootstrap, s, 150)
            assert Counter(sum(got.values(), [])) == Counter(sum(want.values(), []))
            # null and empty keys without a partition go to a random partition (sticky)
            assert _placed(got) == _placed(want)
    # a partition the topic does not have: one readable line
    name = topic(1)
    opts = parse_sink({"kafka.bootstrap.servers": bootstrap, "topic": name})
    settings = producer_settings(opts)
    assert settings is not None
    bad = pa.record_batch({"value": pa.array([b"v"]), "partition": pa.array([5], pa.int32())})
    with pytest.raises(KafkaPySparkError, match=f"Unknown partition {name}-5"):
        write_fast(opts, *settings, iter([bad]))
