"""file-export: a kafka-py topic into Parquet or JSON files partitioned by date.

Connect's FileStreamSink of the quickstart, with Spark's file sink: each record becomes one row
`key, value, topic, partition, offset, timestamp` under `date=YYYY-MM-DD/` (the record
timestamp's UTC date, whatever the session time zone). Key and value stay binary (base64 strings
in JSON, as Spark writes binary).

Exactly-once: Spark's file sink lists the files of every committed micro-batch in
`<out-dir>/_spark_metadata`; a batch replayed after a crash is skipped if it was committed, else
written anew and only that attempt's files are listed. Readers that use the log (Spark: `spark.read.parquet(out_dir)`) see every record once;
a reader listing the files directly may also see files of an interrupted attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.spark.options import KafkaPySparkError

FORMATS = ("parquet", "json")
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
_MICROS_PER_DAY = 86_400_000_000


def utc_date(ts: Any) -> Any:
    """The UTC calendar date of a timestamp column (independent of spark.sql.session.timeZone)."""
    from pyspark.sql import functions as F

    return F.date_from_unix_date(F.floor(F.unix_micros(ts) / _MICROS_PER_DAY).cast("int"))


def start(
    spark: Any,
    bootstrap: str,
    topic: str,
    out_dir: str,
    fmt: str,
    checkpoint: str,
    *,
    max_offsets_per_trigger: int | None = None,
    available_now: bool = False,
    processing_time: str = "1 second",
    client_options: Mapping[str, str] | None = None,
) -> Any:
    """Start the export query (Spark's StreamingQuery), from the topic's earliest offsets;
    `client_options` (`kafka.*`, e.g. security settings) go to the source."""
    from pyspark.sql import functions as F

    if fmt not in FORMATS:
        raise KafkaPySparkError(f"format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    reader = (
        spark.readStream.format("kafkapy")
        .options(**dict(client_options or {}))
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    records = reader.load()
    rows = records.select(*COLUMNS, utc_date(F.col("timestamp")).alias("date"))
    writer = (
        rows.writeStream.format(fmt)
        .partitionBy("date")
        .option("path", out_dir)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
    )
    if fmt == "json":
        writer = writer.option("timeZone", "UTC")  # timestamps written as UTC instants
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()
