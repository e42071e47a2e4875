"""``kafka-py get-offsets`` (kafka-get-offsets.sh): one ``topic:partition:offset`` line per
partition for ``--time -1`` (latest), ``-2`` (earliest), ``-3`` (the record with the largest
timestamp) or a timestamp in ms (the first offset at or after it). ``--topic`` is a regular
expression as in Kafka's tool; ``--partitions`` filters by partition ids; partitions with no
such offset (a time after the last record) are left out, as Kafka's tool does."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from typing import Any, TextIO

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from services.cli.common import CliError, UsageError, kafka_error_text

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "get-offsets",
        help="offsets of partitions at a time (kafka-get-offsets.sh)",
        description="Print topic:partition:offset for a time, as kafka-get-offsets.sh does.",
    )
    common(p, False)
    p.add_argument("--topic", default=None, metavar="REGEX", help="topics (a regex); default all")
    p.add_argument("--partitions", default=None, metavar="P,P", help="partition ids")
    p.add_argument(
        "--time",
        default="-1",
        metavar="TIME",
        help="-1 latest (default), -2 earliest, -3 max timestamp, or a timestamp in ms",
    )
    p.add_argument("--exclude-internal-topics", action="store_true")
    p.add_argument("--output", choices=("text", "json"), default="text")


def _spec(text: str) -> OffsetSpec:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(
            f"--time: expected -1, -2, -3 or a timestamp in ms, got {text!r}"
        ) from None
    special = {-1: OffsetSpec.latest, -2: OffsetSpec.earliest, -3: OffsetSpec.max_timestamp}
    if value in special:
        return special[value]()
    if value < 0:
        raise UsageError(f"--time: expected -1, -2, -3 or a timestamp in ms, got {text!r}")
    return OffsetSpec.for_timestamp(value)


def _partition_filter(text: str | None) -> set[int] | None:
    if text is None:
        return None
    try:
        return {int(p) for p in text.split(",") if p.strip()}
    except ValueError:
        raise UsageError(f"--partitions: expected comma-separated ids, got {text!r}") from None


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    spec = _spec(args.time)
    wanted = _partition_filter(args.partitions)
    try:
        pattern = re.compile(args.topic) if args.topic is not None else None
    except re.error as exc:
        raise UsageError(f"--topic: bad regular expression: {exc}") from None
    timeout = args.request_timeout_ms / 1000.0
    admin = AdminClient(dict(conf))
    md = admin.list_topics(timeout=timeout)
    parts = [
        TopicPartition(name, p)
        for name, t in sorted(md.topics.items())
        if t.error is None
        and (pattern is None or pattern.fullmatch(name))
        and not (args.exclude_internal_topics and name in INTERNAL_TOPICS)
        for p in sorted(t.partitions)
        if wanted is None or p in wanted
    ]
    if not parts:
        raise CliError("Could not match any topic-partitions with the specified filters")
    results: list[tuple[str, int, int]] = []
    futs = admin.list_offsets({tp: spec for tp in parts}, request_timeout=timeout)
    for tp, fut in futs.items():
        try:
            offset = fut.result(timeout=timeout).offset
        except Exception as exc:
            raise CliError(f"{tp.topic}:{tp.partition}: {kafka_error_text(exc)}") from None
        if offset >= 0:
            results.append((tp.topic, tp.partition, offset))
    results.sort()
    if args.output == "json":
        rows = [{"topic": t, "partition": p, "offset": o} for t, p, o in results]
        print(json.dumps(rows, indent=2), file=out)
    else:
        for t, p, o in results:
            print(f"{t}:{p}:{o}", file=out)
    return 0
