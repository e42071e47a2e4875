"""The `kafkapy` PySpark sink against the local cluster, checked with confluent-kafka.

One Spark session for the module: 100,000 rows written in batch land exactly (keys, values,
headers, chosen partitions, in order); a streaming copy with a processing-time trigger lands
exactly too; an exactly-once copy query killed with SIGKILL mid-batch and restarted from its
checkpoint loses and duplicates nothing (a read_committed reader sees each row once), also after a
crash at the commit point.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_support import ReadRecord, TopicFactory, consume_confluent, wait_for
from spark_support import spark_env, spark_session

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROWS = 100_000
EOS_ROWS = 20_000  # 4 micro-batches of 5,000


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with spark_session("kafkapy-sink-tests") as s:
        yield s


def _rows(spark: Any, n: int) -> Any:
    return spark.range(n).selectExpr(
        "cast(id as string) AS key",
        "cast(concat('value-', cast(id as string)) AS binary) AS value",
        "cast(id % 3 AS int) AS partition",
        "array(named_struct('key', 'id', 'value', cast(cast(id AS string) AS binary)),"
        " named_struct('key', 'null', 'value', cast(null AS binary))) AS headers",
    )


def _expected(n: int) -> dict[int, list[tuple[bytes, bytes, tuple[Any, ...]]]]:
    out: dict[int, list[tuple[bytes, bytes, tuple[Any, ...]]]] = {0: [], 1: [], 2: []}
    for i in range(n):
        hdrs = (("id", str(i).encode()), ("null", None))
        out[i % 3].append((str(i).encode(), f"value-{i}".encode(), hdrs))
    return out


def _landed(got: dict[int, list[ReadRecord]]) -> dict[int, list[tuple[bytes, bytes, Any]]]:
    return {p: [(r.rec.key, r.rec.value, r.rec.headers) for r in rs] for p, rs in got.items()}


def test_batch_and_streaming_writes_land_exactly(
    spark: Any, bootstrap: str, topic: TopicFactory, tmp_path: Path
) -> None:
    first, second = topic(3), topic(3)
    _rows(spark, ROWS).write.format("kafkapy").mode("append").option(
        "kafka.bootstrap.servers", bootstrap
    ).option("topic", first).save()
    landed = _landed(consume_confluent(bootstrap, first, [0, 1, 2], ROWS))
    # two tasks wrote concurrently: each partition holds exactly its rows, interleaved
    assert {p: sorted(rs) for p, rs in landed.items()} == {
        p: sorted(rs) for p, rs in _expected(ROWS).items()
    }

    # streaming: topic -> topic with a processing-time trigger; the topic column picks the topic
    query = (
        spark.readStream.format("kafkapy")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", first)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
        .selectExpr("key", "value", "partition", "headers", f"'{second}' AS topic")
        .writeStream.format("kafkapy")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        wait_for(
            "the streaming copy",
            lambda: sum(p["numInputRows"] for p in query.recentProgress) >= ROWS,
            timeout=180,
            interval=0.5,
        )
    finally:
        query.stop()
    assert query.exception() is None
    # one task per source partition: each partition is copied in order
    assert _landed(consume_confluent(bootstrap, second, [0, 1, 2], ROWS)) == landed


def test_sink_errors_are_clear(spark: Any, bootstrap: str) -> None:
    df = spark.range(3).selectExpr("cast(id as string) AS value")
    with pytest.raises(Exception, match="topic option required when no 'topic' attribute"):
        df.write.format("kafkapy").mode("append").option(
            "kafka.bootstrap.servers", bootstrap
        ).save()
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        spark.range(3).write.format("kafkapy").mode("append").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", "x").save()


@pytest.mark.timeout(1200)  # three Spark processes (~15 s each idle, minutes on a busy machine)
def test_exactly_once_copy_killed_mid_batch_and_at_the_commit_point(
    spark: Any, bootstrap: str, topic: TopicFactory, tmp_path: Path
) -> None:
    """deliveryGuarantee=exactly-once: kill -9 mid-batch, restart from the checkpoint; then the
    state of a crash after the batch's transactions committed but before Spark's commit log
    (commits/N absent), restart; a read_committed reader sees every row exactly once."""
    source, target = topic(3), topic(3)
    _rows(spark, EOS_ROWS).write.format("kafkapy").mode("append").option(
        "kafka.bootstrap.servers", bootstrap
    ).option("topic", source).save()
    ckpt = tmp_path / "ckpt"
    cmd = [sys.executable, str(Path(__file__).parent / "spark_support.py"), bootstrap, source,
           target, str(ckpt), "5000", "exactly-once"]  # fmt: skip
    env = {**os.environ, **spark_env()}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip

    def target_size() -> int:
        """Sum of the high watermarks: aborted and open transactions' records count too."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "size"})
        try:
            return sum(
                c.get_watermark_offsets(TopicPartition(target, p), timeout=10)[1] for p in range(3)
            )
        finally:
            c.close()

    # kill -9 while a batch is being written (some, not all, records landed)
    wait_for("the copy to start writing", lambda: target_size() > 0, timeout=300, interval=0.2)
    assert target_size() < EOS_ROWS
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    killed_at = target_size()
    rerun = subprocess.run(cmd, env=env, capture_output=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr.decode()[-3000:]
    # crash point 2: Kafka transactions of the last batch committed, Spark's commit not written
    last = max(int(f.name) for f in (ckpt / "commits").iterdir() if f.name.isdigit())
    (ckpt / "commits" / str(last)).unlink()
    (ckpt / "commits" / f".{last}.crc").unlink(missing_ok=True)
    before_replay = target_size()
    rerun = subprocess.run(cmd, env=env, capture_output=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr.decode()[-3000:]
    assert (ckpt / "commits" / str(last)).exists(), "the batch was not replayed"
    # the replay was recognised by its markers: nothing written, not even an aborted transaction
    assert target_size() == before_replay
    got = consume_confluent(
        bootstrap, target, [0, 1, 2], EOS_ROWS, extra_config={"isolation.level": "read_committed"}
    )
    landed = _landed(got)
    want = _expected(EOS_ROWS)
    for p in range(3):
        assert sorted(landed[p]) == sorted(want[p]), f"partition {p}: lost or duplicated records"
    assert killed_at < before_replay
