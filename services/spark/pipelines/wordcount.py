"""Kafka Streams' WordCountDemo as a Spark streaming query on `kafkapy` topics.

Lines (values, UTF-8) are lower-cased and split on `\\W+` as the Streams demo does; the running
count per word goes to a compacted topic with key = the word, value = the count as Kafka's
LongSerializer writes it (8 bytes, big-endian). The windowed
variant keys each count by the word followed by the window start in milliseconds (8 bytes,
big-endian), as Streams' TimeWindowedSerializer does. Counts survive restarts through the
query's checkpoint (Spark's state store); no watermark, so the running count never expires.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

COMPACT = {"cleanup.policy": "compact"}


def ensure_output_topic(conf: dict[str, Any], topic: str, timeout_s: float) -> None:
    """Create the output topic (compacted) unless it exists."""
    admin = AdminClient(conf)
    if topic in admin.list_topics(timeout=timeout_s).topics:
        return
    fut = admin.create_topics([NewTopic(topic, 1, -1, config=COMPACT)])[topic]
    try:
        fut.result(timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - created meanwhile by another run is fine
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def _long_bytes(col: Any) -> Any:
    """A non-negative long as 8 big-endian bytes (Kafka's LongSerializer); ANSI mode refuses
    `cast(long AS binary)`."""
    from pyspark.sql import functions as F

    return F.unhex(F.lpad(F.hex(col), 16, "0"))


def start(
    spark: Any,
    bootstrap: str,
    source: str,
    sink: str,
    checkpoint: str,
    *,
    window: str | None = None,
    available_now: bool = False,
    processing_time: str = "1 second",
    client_options: Mapping[str, str] | None = None,
) -> Any:
    """Start the word-count query; returns Spark's StreamingQuery. `client_options` (`kafka.*`,
    e.g. security settings) go to the source and the sink."""
    from pyspark.sql import functions as F

    client = dict(client_options or {})
    lines = (
        spark.readStream.format("kafkapy")
        .options(**client)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    words = lines.select(
        "timestamp",
        F.explode(F.split(F.lower(F.col("value").cast("string")), r"\W+")).alias("word"),
    ).where(F.col("word") != "")
    if window:
        counts = words.groupBy(F.window("timestamp", window), "word").count()
        key = F.concat(
            F.col("word").cast("binary"),
            _long_bytes(F.unix_millis(F.col("window.start"))),
        )
    else:
        counts = words.groupBy("word").count()
        key = F.col("word").cast("binary")
    out = counts.select(key.alias("key"), _long_bytes(F.col("count")).alias("value"))

    def write_batch(batch: Any, _batch_id: int) -> None:
        # PySpark's Python streaming sinks take append mode only: the updated counts of each
        # micro-batch go out through the batch writer (a replayed batch writes the same counts)
        batch.write.format("kafkapy").mode("append").options(**client).option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", sink).save()

    writer = (
        out.writeStream.outputMode("update")
        .foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()
