"""`kafka-py pipeline run file-import|file-export`: their flags, checks made before Spark starts,
and the query each starts (services/spark/pipelines/file_import.py, file_export.py)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from services.cli.common import CliError, UsageError

NAMES = ("file-import", "file-export")
IMPORT_FORMATS = ("text", "json", "csv", "parquet")  # file_import.FORMATS (no PySpark import here)
EXPORT_FORMATS = ("parquet", "json")  # file_export.FORMATS


def add_arguments(r: argparse.ArgumentParser) -> None:
    """The flags of both pipelines, as a group of `pipeline run` (checked per pipeline by
    prepare())."""
    g = r.add_argument_group(
        "file-import, file-export",
        "file-import: a directory of text/json/csv/parquet files into --topic; file-export: "
        "--topic into parquet/json files under date=YYYY-MM-DD/. --checkpoint defaults to "
        ".DIRNAME-PIPELINE-checkpoint beside the directory.",
    )
    g.add_argument("--source-dir", metavar="DIR", help="file-import: directory watched")
    g.add_argument("--out-dir", metavar="DIR", help="file-export: directory written")
    g.add_argument(
        "--format",
        choices=sorted({*IMPORT_FORMATS, *EXPORT_FORMATS}),
        help="file-import: text, json, csv, parquet; file-export: parquet, json",
    )
    g.add_argument("--topic", help="topic written (file-import) or read (file-export)")
    g.add_argument("--key-column", metavar="C", help="file-import: column giving the record key")
    g.add_argument(
        "--schema", metavar="DDL", help="file-import: row schema, e.g. 'id INT, name STRING' "
        "(default: inferred from the files present at start; CSV columns as strings)"
    )  # fmt: skip
    g.add_argument("--max-files-per-trigger", type=int, metavar="N", help="file-import")


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


def _required(args: argparse.Namespace, *flags: str) -> None:
    for flag in flags:
        if getattr(args, flag.lstrip("-").replace("-", "_")) is None:
            raise UsageError(f"{args.name} needs {flag}")


def prepare(args: argparse.Namespace, conf: dict[str, Any], timeout_s: float) -> None:
    """Checks made before Spark starts, each failing with one line."""
    if args.name == "file-import":
        _required(args, "--source-dir", "--format", "--topic")
        if not os.path.isdir(args.source_dir):
            raise CliError(f"--source-dir {args.source_dir} is not a directory", kind="not_found")
        if args.key_column and args.format == "text":
            raise UsageError("--key-column needs --format json, csv or parquet")
        _positive(args.max_files_per_trigger, "--max-files-per-trigger")
    else:
        _required(args, "--out-dir", "--format", "--topic")
        if args.format not in EXPORT_FORMATS:
            raise UsageError(f"file-export writes {' or '.join(EXPORT_FORMATS)}, not {args.format}")
        if os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
            raise CliError(f"--out-dir {args.out_dir} is not a directory")
    _topic_exists(conf, args.topic, timeout_s)


def start(
    spark: Any, args: argparse.Namespace, conf: dict[str, Any], client: dict[str, str]
) -> Any:
    """Start the pipeline's streaming query (`client`: the `kafka.*` options of the source or
    sink); a refusal (bad schema, unreadable files) is one line."""
    try:
        return _start(spark, args, conf, client)
    except Exception as exc:  # noqa: BLE001 - Spark's errors span lines; the first says why
        raise CliError(f"pipeline {args.name}: {str(exc).strip().splitlines()[0]}") from None


def _start(
    spark: Any, args: argparse.Namespace, conf: dict[str, Any], client: dict[str, str]
) -> Any:
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
            sink_options={
                **client,
                "deliveryGuarantee": "exactly-once" if args.exactly_once else "at-least-once",
            },
        )
    return file_export.start(
        spark,
        bootstrap,
        args.topic,
        os.path.abspath(args.out_dir),
        args.format,
        _checkpoint(args, args.out_dir),
        available_now=args.available_now,
        client_options=client,
    )
