"""``kafka-py pipeline run NAME``: the Spark pipelines of services/spark/pipelines, locally.

Needs the `spark` extra (PySpark) and Java. Python workers run this interpreter; Spark binds
loopback unless SPARK_LOCAL_IP says otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from services.cli import pipeline_files
from services.cli.common import CliError, UsageError

PIPELINES = ("wordcount", *pipeline_files.NAMES)


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "pipeline", help="run a Spark pipeline", description="Run a shipped Spark pipeline."
    )
    ops = p.add_subparsers(dest="pipeline_op", metavar="{run}")
    ops.required = True
    r = ops.add_parser(
        "run",
        help=f"run a pipeline ({', '.join(PIPELINES)})",
        description="Run a pipeline with Spark (local[*] by default); Ctrl-C stops it.",
    )
    common(r, False)
    r.add_argument("name", choices=PIPELINES)
    r.add_argument("--input", default="streams-plaintext-input", help="topic of text lines")
    r.add_argument("--output", default="streams-wordcount-output", help="compacted topic of counts")
    r.add_argument(
        "--checkpoint", metavar="DIR", help="Spark checkpoint dir (required by wordcount)"
    )
    r.add_argument("--window", metavar="DURATION", help="windowed counts, e.g. '1 minute'")
    r.add_argument(
        "--available-now",
        action="store_true",
        help="process what is there now, then stop (default: run until Ctrl-C)",
    )
    r.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    pipeline_files.add_arguments(r)


def run(args: argparse.Namespace, conf: dict[str, Any]) -> int:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise CliError("PySpark is not installed: pip install 'kafka-py[spark]'") from None
    from services.spark.pipelines import wordcount

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    timeout_s = args.request_timeout_ms / 1000.0
    if args.name in pipeline_files.NAMES:
        pipeline_files.prepare(args, conf, timeout_s)
    elif args.checkpoint is None:
        raise UsageError(f"{args.name} needs --checkpoint DIR")
    else:
        wordcount.ensure_output_topic(conf, args.output, timeout_s)
    spark = (
        SparkSession.builder.master(args.master)
        .appName(f"kafka-py-{args.name}")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if args.name in pipeline_files.NAMES:
            query = pipeline_files.start(spark, args, conf)
        else:
            query = wordcount.start(
                spark,
                conf["bootstrap.servers"],
                args.input,
                args.output,
                args.checkpoint,
                window=args.window,
                available_now=args.available_now,
            )
        query.awaitTermination()
        err = query.exception()
        if err is not None:
            raise CliError(f"pipeline {args.name} failed: {str(err).splitlines()[0]}")
    finally:
        spark.stop()
    return 0
