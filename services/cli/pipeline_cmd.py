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

PIPELINES = ("wordcount", "mirror", *pipeline_files.NAMES)


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
    m = r.add_argument_group("mirror (source = --bootstrap-server)")
    m.add_argument("--target-bootstrap-server", metavar="HOST:PORT", help="cluster copied to")
    m.add_argument("--topics", default="", help="comma-separated source topics")
    m.add_argument("--pattern", metavar="REGEX", help="source topics matching (subscribePattern)")
    m.add_argument(
        "--exactly-once", action="store_true", help="write in transactions (read_committed)"
    )
    m.add_argument("--max-offsets-per-trigger", type=int, metavar="N", help="records per batch")
    o = r.add_argument_group("progress")
    o.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="serve Prometheus /metrics on PORT"
    )
    o.add_argument("--quiet", action="store_true", help="no progress line per micro-batch")


def _topics(args: argparse.Namespace) -> list[str]:
    """The mirror's topic list; refuses an incomplete mirror command line."""
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    if not args.target_bootstrap_server or bool(topics) == bool(args.pattern):
        raise CliError("mirror needs --target-bootstrap-server and one of --topics, --pattern")
    return topics


def _start(args: argparse.Namespace, conf: dict[str, Any], spark: Any) -> Any:
    """Prepare the topics and start the named pipeline's query."""
    timeout_s = args.request_timeout_ms / 1000.0
    if args.name == "mirror":
        from services.spark.pipelines import mirror

        topics = _topics(args)
        target = {**conf, "bootstrap.servers": args.target_bootstrap_server}
        wanted = mirror.source_topics(conf, topics, args.pattern, timeout_s)
        mirror.ensure_target_topics(target, wanted, timeout_s)
        return mirror.start(
            spark,
            conf["bootstrap.servers"],
            args.target_bootstrap_server,
            args.checkpoint,
            topics=topics,
            pattern=args.pattern,
            exactly_once=args.exactly_once,
            available_now=args.available_now,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
        )
    if args.name in pipeline_files.NAMES:
        return pipeline_files.start(spark, args, conf)
    from services.spark.pipelines import wordcount

    wordcount.ensure_output_topic(conf, args.output, timeout_s)
    return wordcount.start(
        spark,
        conf["bootstrap.servers"],
        args.input,
        args.output,
        args.checkpoint,
        window=args.window,
        available_now=args.available_now,
    )


def _follow(args: argparse.Namespace, query: Any) -> None:
    """Wait for the query to end, publishing each new progress (metrics, a line on stdout)."""
    from services.spark.progress import ProgressMetrics

    metrics = ProgressMetrics(args.name)
    if args.metrics_port is not None:
        metrics.serve(args.metrics_port)
    while not query.awaitTermination(1):
        line = metrics.observe(query.lastProgress)
        if line and not args.quiet:
            print(f"{args.name} {line}", flush=True)
    line = metrics.observe(query.lastProgress)
    if line and not args.quiet:
        print(f"{args.name} {line}", flush=True)


def run(args: argparse.Namespace, conf: dict[str, Any]) -> int:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise CliError("PySpark is not installed: pip install 'kafka-py[spark]'") from None
    from services.spark.options import KafkaPySparkError

    if args.name == "mirror":
        _topics(args)  # before Spark's ~7 s start
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    timeout_s = args.request_timeout_ms / 1000.0
    if args.name in pipeline_files.NAMES:
        pipeline_files.prepare(args, conf, timeout_s)
    elif args.checkpoint is None:
        raise UsageError(f"{args.name} needs --checkpoint DIR")
    spark = (
        SparkSession.builder.master(args.master)
        .appName(f"kafka-py-{args.name}")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        try:
            query = _start(args, conf, spark)
        except KafkaPySparkError as bad:
            raise CliError(f"pipeline {args.name}: {bad}") from None
        _follow(args, query)
        err = query.exception()
        if err is not None:
            raise CliError(f"pipeline {args.name} failed: {str(err).splitlines()[0]}")
    finally:
        spark.stop()
    return 0
