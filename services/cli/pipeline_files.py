"""`kafka-py pipeline run file-import|file-export`: their flags, checks made before Spark starts,
and the query each starts (services/spark/pipelines/file_import.py, file_export.py)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from services.cli.common import CliError, UsageError

NAMES = ("file-import", "file-export")
IMPORT_FORMATS = ("text", "json", "csv", "parquet")  # file_import.FORMATS (no PySpark import here)
EXPORT_FORMATS = ("parquet", "json")  # file_export.FORMATS


def add_parsers(
    names: Any,
    common: Callable[[argparse.ArgumentParser, bool], None],
    spark_args: Callable[[argparse.ArgumentParser], None],
) -> None:
    imp = names.add_parser(
        "file-import",
        help="watch a directory of text/json/csv/parquet files into a topic",
        description="Spark's file streaming source into a topic: text lines as values; "
        "JSON/CSV/Parquet rows as JSON values, the key from a column. Files are imported once "
        "per checkpoint.",
    )
    common(imp, False)
    imp.add_argument("--source-dir", required=True, metavar="DIR", help="directory watched")
    imp.add_argument("--format", required=True, choices=IMPORT_FORMATS)
    imp.add_argument("--topic", required=True, help="topic written (must exist)")
    imp.add_argument("--key-column", metavar="C", help="column whose value is the record key")
    imp.add_argument(
        "--schema", metavar="DDL", help="row schema, e.g. 'id INT, name STRING' (default: "
        "inferred from the files present at start; CSV columns as strings)"
    )  # fmt: skip
    imp.add_argument("--max-files-per-trigger", type=int, metavar="N")
    _checkpoint_arg(imp)
    spark_args(imp)

    exp = names.add_parser(
        "file-export",
        help="a topic into parquet/json files partitioned by date",
        description="A topic into files under date=YYYY-MM-DD/ (the record timestamp's UTC "
        "date) with key, value, topic, partition, offset, timestamp; exactly-once for readers "
        "of the file sink's _spark_metadata log.",
    )
    common(exp, False)
    exp.add_argument("--topic", required=True, help="topic read from its earliest offsets")
    exp.add_argument("--out-dir", required=True, metavar="DIR", help="output directory")
    exp.add_argument("--format", required=True, choices=EXPORT_FORMATS)
    exp.add_argument("--max-offsets-per-trigger", type=int, metavar="N")
    _checkpoint_arg(exp)
    spark_args(exp)


def _checkpoint_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="Spark checkpoint dir (default: .DIRNAME-PIPELINE-checkpoint beside the watched or "
        "written dir); the next run resumes where this one stopped",
    )


def _checkpoint(args: argparse.Namespace, data_dir: str) -> str:
    if args.checkpoint:
        return str(args.checkpoint)
    path = os.path.abspath(data_dir)
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}-{args.name}-checkpoint")


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise UsageError(f"{flag} must be positive")


def _topic_exists(conf: dict[str, Any], topic: str, timeout_s: float) -> None:
    from confluent_kafka.admin import AdminClient

    if topic not in AdminClient(conf).list_topics(timeout=timeout_s).topics:
        raise CliError(
            f"topic {topic} does not exist (create it: kafka-py topics --create --topic {topic})",
            kind="not_found",
        )


def prepare(args: argparse.Namespace, conf: dict[str, Any], timeout_s: float) -> None:
    """Checks made before Spark starts, each failing with one line."""
    if args.name == "file-import":
        if not os.path.isdir(args.source_dir):
            raise CliError(f"--source-dir {args.source_dir} is not a directory", kind="not_found")
        if args.key_column and args.format == "text":
            raise UsageError("--key-column needs --format json, csv or parquet")
        _positive(args.max_files_per_trigger, "--max-files-per-trigger")
    else:
        _positive(args.max_offsets_per_trigger, "--max-offsets-per-trigger")
        if os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
            raise CliError(f"--out-dir {args.out_dir} is not a directory")
    _topic_exists(conf, args.topic, timeout_s)


def start(spark: Any, args: argparse.Namespace, conf: dict[str, Any]) -> Any:
    """Start the pipeline's streaming query; a refusal (bad schema, unreadable files) is one
    line."""
    try:
        return _start(spark, args, conf)
    except Exception as exc:  # noqa: BLE001 - Spark's errors span lines; the first says why
        raise CliError(f"pipeline {args.name}: {str(exc).strip().splitlines()[0]}") from None


def _start(spark: Any, args: argparse.Namespace, conf: dict[str, Any]) -> Any:
    from services.spark.pipelines import file_export, file_import

    bootstrap = conf["bootstrap.servers"]
    if args.name == "file-import":
        return file_import.start(
            spark,
            bootstrap,
            os.path.abspath(args.source_dir),
            args.format,
            args.topic,
            _checkpoint(args, args.source_dir),
            key_column=args.key_column,
            schema=args.schema,
            max_files_per_trigger=args.max_files_per_trigger,
            available_now=args.available_now,
        )
    return file_export.start(
        spark,
        bootstrap,
        args.topic,
        os.path.abspath(args.out_dir),
        args.format,
        _checkpoint(args, args.out_dir),
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        available_now=args.available_now,
    )
