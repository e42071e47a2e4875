"""``kafka-py pipeline run NAME``: the Spark pipelines of services/spark/pipelines, locally.

Needs the `spark` extra (PySpark) and Java. Python workers run this interpreter; Spark binds
loopback unless SPARK_LOCAL_IP says otherwise. The `--command-config` properties (librdkafka
names: security.protocol, sasl.*, ssl.*) reach every pipeline's `kafkapy` source and sink as
`kafka.*` options (the mirror's target cluster has `--target-command-config`). A query that
fails ends the command with one line and exit code 1 (Spark's logs are off unless --verbose).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from services.cli import pipeline_files
from services.cli.common import CliError, UsageError, client_config, read_properties

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
    r.add_argument(
        "--exactly-once",
        action="store_true",
        help="mirror, file-import: write in transactions, each row once for read_committed "
        "readers (the sink's deliveryGuarantee=exactly-once)",
    )
    pipeline_files.add_arguments(r)
    m = r.add_argument_group("mirror (source = --bootstrap-server)")
    m.add_argument("--target-bootstrap-server", metavar="HOST:PORT", help="cluster copied to")
    m.add_argument("--topics", default="", help="comma-separated source topics")
    m.add_argument("--pattern", metavar="REGEX", help="source topics matching (subscribePattern)")
    m.add_argument(
        "--target-command-config",
        metavar="FILE",
        help="client properties of the target cluster (--command-config: the source's)",
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


def kafka_options(path: str | None, verbose: bool) -> tuple[dict[str, str], dict[str, str]]:
    """The client properties of `path` (a --command-config file) and the same as the `kafkapy`
    source's and sink's `kafka.*` options (the bootstrap comes from its own flag; librdkafka's
    logs stay off unless `verbose`, as the CLI's own clients do)."""
    props = read_properties(path) if path else {}
    options = {} if verbose else {"kafka.log_level": "0"}
    options.update({f"kafka.{k}": v for k, v in props.items() if k != "bootstrap.servers"})
    return props, options


def _start(args: argparse.Namespace, conf: dict[str, Any], spark: Any) -> Any:
    """Prepare the topics and start the named pipeline's query."""
    timeout_s = args.request_timeout_ms / 1000.0
    _, client = kafka_options(getattr(args, "command_config", None), args.verbose)
    if args.name == "mirror":
        from services.spark.pipelines import mirror

        topics = _topics(args)
        props, target_client = kafka_options(args.target_command_config, args.verbose)
        target = client_config(args.target_bootstrap_server, args.verbose, props)
        wanted = mirror.source_topics(conf, topics, args.pattern, timeout_s)
        configs = mirror.source_configs(conf, sorted(wanted), timeout_s)
        mirror.ensure_target_topics(target, wanted, timeout_s, configs)
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
            source_options=client,
            target_options=target_client,
        )
    if args.name in pipeline_files.NAMES:
        return pipeline_files.start(spark, args, conf, client)
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
        client_options=client,
    )


def _follow(args: argparse.Namespace, query: Any) -> None:
    """Wait for the query to end, publishing each new progress (metrics, a line on stdout)."""
    from pyspark.errors import StreamingQueryException

    from services.spark.progress import ProgressMetrics

    metrics = ProgressMetrics(args.name)
    if args.metrics_port is not None:
        metrics.serve(args.metrics_port)
    while True:
        try:
            ended = query.awaitTermination(1)
        except StreamingQueryException:
            ended = True  # query.exception() tells why
        for line in metrics.observe_all(query.recentProgress):
            if not args.quiet:
                print(f"{args.name} {line}", flush=True)
        if ended:
            return


def run(args: argparse.Namespace, conf: dict[str, Any]) -> int:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise CliError("PySpark is not installed: pip install 'kafka-py[spark]'") from None
    from services.spark.options import KafkaPySparkError

    if args.name == "mirror":
        _topics(args)  # before Spark's ~7 s start
    if args.exactly_once and args.name not in ("mirror", "file-import"):
        raise UsageError(f"--exactly-once is for mirror and file-import, not {args.name}")
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
        .config("spark.ui.showConsoleProgress", "false")  # a line per micro-batch instead
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        try:
            query = _start(args, conf, spark)
        except KafkaPySparkError as bad:
            raise CliError(f"pipeline {args.name}: {bad}") from None
        if not args.verbose:  # a failed query's cause is our one line, not Spark's stack traces
            spark.sparkContext.setLogLevel("OFF")
        _follow(args, query)
        err = query.exception()
        if err is not None:
            from services.spark.failure import failure_line

            raise CliError(f"pipeline {args.name} failed: {failure_line(str(err))}")
    finally:
        spark.stop()
    return 0
