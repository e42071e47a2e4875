"""file-import: Spark's file streaming source watching a directory, into a kafka-py topic.

Connect's FileStreamSource of the quickstart, with Spark's file sources: `text` files give one
record per line (value = the line, no key); `json` (JSON lines), `csv` (a header row names the
columns) and `parquet` rows become one record each, value = the row as a JSON object, key = one
column's value as text (`key_column`).

A streaming file source needs a fixed schema: it is inferred once from the files present when
the query starts (CSV columns stay strings, so no value is ever re-typed or nulled), or given as
a DDL string. Files are listed non-recursively; names starting with `_` or `.` are skipped, so
writers should write to such a name and rename (Spark's rule).

Delivery: Spark's file source records in the checkpoint which files each micro-batch took, so a
file is imported by one batch only; a batch replayed after a crash is written again by the
at-least-once `kafkapy` sink (records of that batch may appear twice, none are lost), or, with
the sink option `deliveryGuarantee=exactly-once` (`kafka-py pipeline run file-import
--exactly-once`), skipped or rewritten in transactions so read_committed readers see each row
once (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.spark.options import KafkaPySparkError

FORMATS = ("text", "json", "csv", "parquet")

# Reader options per format. CSV: a header row, RFC 4180 quoting ("" inside a quoted field),
# no type inference.
_READ_OPTIONS: dict[str, dict[str, str]] = {
    "text": {},
    "json": {},
    "csv": {"header": "true", "inferSchema": "false", "escape": '"'},
    "parquet": {},
}


def input_schema(spark: Any, fmt: str, source_dir: str, schema: str | None) -> Any:
    """The schema of the rows of `source_dir`: `schema` (DDL) if given, else inferred from the
    files there now; text files are always `value string`."""
    from pyspark.sql.types import StringType, StructField, StructType

    if fmt == "text":
        return StructType([StructField("value", StringType())])
    if schema:
        return StructType.fromDDL(schema)
    try:
        inferred = spark.read.format(fmt).options(**_READ_OPTIONS[fmt]).load(source_dir).schema
    except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException for an empty dir
        raise KafkaPySparkError(
            f"cannot infer the schema of the {fmt} files in {source_dir} "
            f"({str(exc).splitlines()[0]}); add files or give the schema"
        ) from None
    if not inferred.fields:
        raise KafkaPySparkError(
            f"no {fmt} files to infer a schema from in {source_dir}; add files or give the schema"
        )
    return inferred


def records(rows: Any, fmt: str, key_column: str | None) -> Any:
    """`rows` as the sink's `key`/`value` columns (strings, written as UTF-8)."""
    from pyspark.sql import functions as F

    if fmt == "text":
        if key_column:
            raise KafkaPySparkError("a key column needs json, csv or parquet files")
        return rows.select(F.lit(None).cast("string").alias("key"), F.col("value"))
    names = rows.columns
    if key_column and key_column not in names:
        raise KafkaPySparkError(
            f"key column '{key_column}' is not in the files' columns: {', '.join(names)}"
        )
    value = F.to_json(F.struct(*[F.col(f"`{n}`") for n in names]), {"timeZone": "UTC"})
    key = F.col(f"`{key_column}`").cast("string") if key_column else F.lit(None).cast("string")
    return rows.select(key.alias("key"), value.alias("value"))


def start(
    spark: Any,
    bootstrap: str,
    source_dir: str,
    fmt: str,
    topic: str,
    checkpoint: str,
    *,
    key_column: str | None = None,
    schema: str | None = None,
    max_files_per_trigger: int | None = None,
    available_now: bool = False,
    processing_time: str = "1 second",
    sink_options: Mapping[str, str] | None = None,
) -> Any:
    """Start the import query (Spark's StreamingQuery). `sink_options` go to the `kafkapy`
    sink as they are (e.g. `kafka.*` producer settings)."""
    if fmt not in FORMATS:
        raise KafkaPySparkError(f"format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    reader = (
        spark.readStream.format(fmt)
        .schema(input_schema(spark, fmt, source_dir, schema))
        .options(**_READ_OPTIONS[fmt])
    )
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    out = records(reader.load(source_dir), fmt, key_column)
    writer = (
        out.writeStream.format("kafkapy")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .options(**dict(sink_options or {}))
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()
