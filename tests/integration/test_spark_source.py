"""The `kafkapy` PySpark source against the local cluster, checked against confluent-kafka.

One Spark session for the module. Batch reads compare every field of every record with what
confluent-kafka reads (headers, null keys/values, lz4 and zstd batches, a compacted topic with
offset gaps); offset and timestamp options must select exactly the expected ranges; streaming
reads respect maxOffsetsPerTrigger, restart from the checkpoint without gap or duplicate, read
new partitions from offset 0 and follow failOnDataLoss both ways after DeleteRecords; a pattern
subscription picks up new topics, survives a deleted one, and minOffsetsPerTrigger waits for
maxTriggerDelay.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka_support import (
    ReadRecord,
    Rec,
    TopicFactory,
    consume_confluent,
    make_records,
    produce_confluent,
    wait_for,
    wait_for_topic,
    wait_for_topic_gone,
)
from pyspark.errors import StreamingQueryException
from spark_support import spark_session

from services.cli.local_cluster import LocalCluster
from tests.integration.txn_support import TxnPartition, init_producer_id

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with spark_session("kafkapy-source-tests") as s:
        yield s


def _read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("kafkapy").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _spark_records(df: Any) -> dict[int, list[ReadRecord]]:
    """Rows -> ReadRecords by partition (offset order), as confluent-kafka's reader gives them."""
    rows = df.selectExpr(
        "key",
        "value",
        "partition",
        "offset",
        "unix_millis(timestamp) AS ts",
        "timestampType",
        "headers",
    ).collect()
    out: dict[int, list[ReadRecord]] = {}
    for r in sorted(rows, key=lambda r: (r.partition, r.offset)):
        hdrs = tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers or ())
        key = None if r.key is None else bytes(r.key)
        value = None if r.value is None else bytes(r.value)
        rec = Rec(r.partition, key, value, hdrs, r.ts)
        out.setdefault(r.partition, []).append(ReadRecord(r.offset, r.timestampType, rec))
    return out


def _offsets(df: Any) -> set[tuple[int, int]]:
    return {(r.partition, r.offset) for r in df.select("partition", "offset").collect()}


def test_batch_read_matches_confluent_and_options_select_exact_ranges(
    spark: Any, bootstrap: str, topic: TopicFactory
) -> None:
    name = topic(6)
    records = make_records(name, 10_000, 6)
    produce_confluent(bootstrap, name, records[:5000], config={"compression.type": "lz4"})
    produce_confluent(bootstrap, name, records[5000:], config={"compression.type": "zstd"})
    want = consume_confluent(bootstrap, name, range(6), len(records))

    # Options are case-insensitive, as Spark's are.
    got = _spark_records(_read(spark, bootstrap, SUBSCRIBE=name, includeheaders="true"))
    assert sum(len(v) for v in got.values()) == len(records)
    for p in range(6):
        assert got[p] == want[p], f"partition {p} differs from confluent-kafka's read"

    # startingOffsets/endingOffsets JSON (-2 earliest, -1 latest), ends exclusive
    n = {p: len(want[p]) for p in range(6)}
    start = {"0": 5, "1": -2, "2": 100, "3": 0, "4": -2, "5": 1600}
    end = {"0": 20, "1": -1, "2": 101, "3": 0, "4": 7, "5": -1}
    df = _read(
        spark, bootstrap, subscribe=name,
        startingOffsets=json.dumps({name: start}), endingOffsets=json.dumps({name: end}),
    )  # fmt: skip
    lo = {p: 0 if v == -2 else v for p, v in ((int(k), v) for k, v in start.items())}
    hi = {p: n[p] if v == -1 else v for p, v in ((int(k), v) for k, v in end.items())}
    assert _offsets(df) == {(p, o) for p in range(6) for o in range(lo[p], hi[p])}

    # by timestamp: the first offset whose timestamp is >= the target (start inclusive, end
    # exclusive); records of one partition are 6 ms apart
    ts = {p: [r.rec.timestamp for r in want[p]] for p in range(6)}
    start_ts = {str(p): ts[p][10 + p] + (1 if p % 2 else 0) for p in range(6)}
    end_ts = {str(p): ts[p][40 + p] for p in range(6)}
    df = _read(
        spark, bootstrap, assign=json.dumps({name: list(range(6))}),
        startingOffsetsByTimestamp=json.dumps({name: start_ts}),
        endingOffsetsByTimestamp=json.dumps({name: end_ts}),
    )  # fmt: skip
    expected = {(p, o) for p in range(6) for o in range(10 + p + (1 if p % 2 else 0), 40 + p)}
    assert _offsets(df) == expected
    # startingTimestamp: one timestamp for every partition (takes precedence over the others)
    target = ts[3][500]
    df = _read(spark, bootstrap, subscribe=name, startingTimestamp=str(target),
               startingOffsets="earliest")  # fmt: skip
    assert _offsets(df) == {(p, o) for p in range(6) for o in range(n[p]) if ts[p][o] >= target}
    # a timestamp after every record: 'error' (the default) fails, 'latest' reads nothing
    after = json.dumps({name: {str(p): ts[p][-1] + 10_000 for p in range(6)}})
    with pytest.raises(Exception, match="No offset matched the starting timestamp"):
        _read(spark, bootstrap, subscribe=name, startingOffsetsByTimestamp=after).count()
    df = _read(spark, bootstrap, subscribe=name, startingOffsetsByTimestamp=after,
               startingOffsetsByTimestampStrategy="latest")  # fmt: skip
    assert df.count() == 0
    # minPartitions / maxRecordsPerPartition split ranges; the rows stay the same
    df = _read(spark, bootstrap, subscribe=name, minPartitions="12", maxRecordsPerPartition="700")
    assert df.rdd.getNumPartitions() >= 15
    assert _offsets(df) == {(p, o) for p in range(6) for o in range(n[p])}


def test_batch_read_of_a_compacted_topic_with_offset_gaps(
    spark: Any, bootstrap: str, topic: TopicFactory
) -> None:
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "16384",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "3600000",
    }
    name = topic(2, config=config)
    records = [
        Rec(i % 2, f"key-{i % 10}".encode(), None if i % 37 == 0 else f"v{i}".encode() * 20,
            (), 1_700_000_000_000 + i)
        for i in range(2000)
    ]  # fmt: skip
    # small batches: a batch larger than a segment is refused
    produce_confluent(bootstrap, name, records, config={"batch.num.messages": 20, "linger.ms": 0})

    def compacted() -> dict[int, list[ReadRecord]] | None:
        got = consume_confluent(bootstrap, name, [0, 1], 1)
        gaps = all(len(got[p]) < 1000 for p in (0, 1))
        return got if gaps else None

    # the cleaner looks every log.cleaner.backoff.ms (15 s by default)
    want = wait_for("compaction of both partitions", compacted, timeout=90, interval=1.0)
    got = _spark_records(_read(spark, bootstrap, subscribe=name, includeHeaders="true"))
    for p in (0, 1):
        assert [r.offset for r in got[p]] != list(range(len(got[p]))), "expected offset gaps"
        assert got[p] == want[p]


def test_errors_are_spark_errors_with_a_clear_message(spark: Any, bootstrap: str) -> None:
    missing = f"no-such-topic-{time.time_ns()}"
    cases: list[tuple[dict[str, str], str]] = [
        ({"subscribe": missing}, f"Topic\\(s\\) {missing} do not exist"),
        ({"assign": json.dumps({missing: [0]})}, f"Topic '{missing}' of option 'assign'"),
        ({}, "One \\(and only one\\) of the following options must be specified"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "can't be latest for batch"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "'failOnDataLoss' must be 'true' or"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "'auto.offset.reset' is not"),
    ]
    for options, message in cases:
        with pytest.raises(Exception, match=message):
            _read(spark, bootstrap, **options).count()
    with pytest.raises(Exception, match="Cannot reach the Kafka cluster at 127.0.0.1:1 "):
        _read(
            spark, "127.0.0.1:1", subscribe="a", **{"kafka.default.api.timeout.ms": "2000"}
        ).count()


def _stream(spark: Any, bootstrap: str, name: str, out: Path, ckpt: Path, **options: str) -> Any:
    reader = (
        spark.readStream.format("kafkapy")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", name)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .selectExpr("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    except StreamingQueryException:
        pass  # the caller looks at query.exception()
    return query


def _written(spark: Any, out: Path) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in spark.read.parquet(str(out)).collect()]


def _texts(n: int, partitions: int, tag: str) -> list[Rec]:
    return make_records(tag, n, partitions, headers=False, big_values=False)


def test_streaming_limits_restarts_and_new_partitions(
    spark: Any, bootstrap: str, topic: TopicFactory, admin: AdminClient, tmp_path: Path
) -> None:
    name = topic(3)
    produce_confluent(bootstrap, name, _texts(300, 3, name))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = _stream(spark, bootstrap, name, out, ckpt, maxOffsetsPerTrigger="70")
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 300 and max(sizes) <= 70 and len(sizes) >= 5, sizes
    # the checkpoint holds Spark's Kafka-source offsets JSON
    last = max(
        (f for f in (ckpt / "offsets").iterdir() if f.name.isdigit()), key=lambda f: int(f.name)
    )
    assert json.loads(last.read_text().splitlines()[-1]) == {name: {"0": 100, "1": 100, "2": 100}}

    # more records, and two new partitions: the restarted query reads them from offset 0
    admin.create_partitions([NewPartitions(name, 5)], operation_timeout=30)[name].result(60)
    wait_for_topic(admin, name, 5)
    produce_confluent(bootstrap, name, _texts(250, 5, name + "-2"))
    q = _stream(spark, bootstrap, name, out, ckpt, maxOffsetsPerTrigger="70")
    assert q.exception() is None
    rows = _written(spark, out)
    assert len(rows) == len(set(rows)), "duplicates after the restart"
    want = {(p, o) for p in range(3) for o in range(150)} | {
        (p, o) for p in (3, 4) for o in range(50)
    }
    assert set(rows) == want


def test_streaming_fail_on_data_loss_both_ways(
    spark: Any, bootstrap: str, topic: TopicFactory, admin: AdminClient, tmp_path: Path
) -> None:
    name = topic(1)
    produce_confluent(bootstrap, name, _texts(100, 1, name))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    _stream(spark, bootstrap, name, out, ckpt)
    produce_confluent(bootstrap, name, _texts(100, 1, name + "-2"))
    (res,) = admin.delete_records([TopicPartition(name, 0, 150)], request_timeout=30).values()
    assert res.result(60).low_watermark == 150
    q = _stream(spark, bootstrap, name, out, ckpt)
    assert q.exception() is not None and "failOnDataLoss" in str(q.exception())
    q = _stream(spark, bootstrap, name, out, ckpt, failOnDataLoss="false")
    assert q.exception() is None
    rows = _written(spark, out)
    assert sorted(rows) == [(0, o) for o in (*range(100), *range(150, 200))]


def test_isolation_level_read_committed(
    spark: Any, cluster: LocalCluster, bootstrap: str, topic: TopicFactory
) -> None:
    """A committed, an aborted and an open transaction (the coordinator's part played through
    storage RPCs, as the storage transaction tests do): read_committed reads the committed
    records and stops at the LSO; read_uncommitted (Spark's default) reads every record."""
    name = topic(1)
    pid, epoch = init_producer_id(bootstrap)
    t = TxnPartition(cluster, name, pid, epoch)

    async def write() -> None:
        await t.append([b"c0", b"c1"])
        await t.marker(True)
        await t.append([b"a0", b"a1"])
        await t.marker(False)
        await t.append([b"o0"])

    asyncio.run(write())

    def values(level: str) -> list[bytes]:
        df = _read(spark, bootstrap, subscribe=name, **{"kafka.isolation.level": level})
        return [bytes(r.value) for r in df.orderBy("offset").collect()]

    assert values("read_committed") == [b"c0", b"c1"]
    assert values("read_uncommitted") == [b"c0", b"c1", b"a0", b"a1", b"o0"]


def test_pattern_new_topics_deleted_topic_and_min_offsets_with_max_delay(
    spark: Any, bootstrap: str, topic: TopicFactory, admin: AdminClient
) -> None:
    """One running query (processing-time trigger) on subscribePattern: a topic created during
    the query is read from offset 0; a topic deleted during the query is dropped without failing
    it (failOnDataLoss=false); with minOffsetsPerTrigger a small backlog waits for
    maxTriggerDelay, a large one does not."""
    tag = uuid.uuid4().hex[:8]
    first = topic(1, prefix=f"pat{tag}")
    produce_confluent(bootstrap, first, _texts(50, 1, first))
    query = (
        spark.readStream.format("kafkapy")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", f"it-pat{tag}-.*")
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")
        .option("minOffsetsPerTrigger", "40")
        .option("maxTriggerDelay", "4s")
        .load()
        .selectExpr("topic", "partition", "offset")
        .writeStream.format("memory")
        .queryName(f"pattern_{tag}")
        .trigger(processingTime="500 milliseconds")
        .start()
    )

    def rows() -> set[tuple[str, int, int]]:
        table = spark.sql(f"SELECT * FROM pattern_{tag}").collect()
        return {(r.topic, r.partition, r.offset) for r in table}

    def data_batches() -> list[tuple[float, int]]:
        """(trigger time in s, rows) of every micro-batch that read rows."""
        from datetime import datetime

        return [
            (datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp(), n)
            for p in query.recentProgress
            if (n := p["numInputRows"])
        ]

    try:
        wait_for("the first topic", lambda: len(rows()) == 50, timeout=180, interval=0.5)
        produce_confluent(bootstrap, first, _texts(10, 1, first + "-2"))  # below the minimum
        # the memory sink has a batch's rows before the query reports the batch's progress
        wait_for(
            "the small backlog and its progress",
            lambda: len(rows()) == 60 and sum(n for _, n in data_batches()) == 60,
            timeout=180,
            interval=0.5,
        )
        (t50, n50), (t10, n10) = data_batches()[-2:]
        assert (n50, n10) == (50, 10)
        # the 10 rows waited for maxTriggerDelay (4 s from the last batch; trigger times are
        # taken before planning, hence the slack)
        assert t10 - t50 >= 3.0, data_batches()
        second = topic(2, prefix=f"pat{tag}")
        produce_confluent(bootstrap, second, _texts(60, 2, second))
        wait_for("the new topic", lambda: len(rows()) == 120, timeout=180, interval=0.5)
        assert {(second, p, o) for p in (0, 1) for o in range(30)} <= rows()  # from offset 0
        for fut in admin.delete_topics([first], operation_timeout=30).values():
            fut.result(60)
        wait_for_topic_gone(admin, first)
        produce_confluent(bootstrap, second, _texts(80, 2, second + "-2"))
        wait_for("rows after the deletion", lambda: len(rows()) == 200, timeout=180, interval=0.5)
        assert query.exception() is None and query.isActive
    finally:
        query.stop()
    got = rows()
    assert got == {(first, 0, o) for o in range(60)} | {
        (second, p, o) for p in (0, 1) for o in range(70)
    }
