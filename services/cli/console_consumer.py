"""``kafka-py console-consumer``: print records (like kafka-console-consumer.sh).

Partitions are assigned directly (no consumer group, nothing committed); the output follows
Kafka's DefaultMessageFormatter.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from services.cli.common import CliError, UsageError, kafka_error_text, key_value
from services.cli.formatter import TIMESTAMP_TYPES, ConsumedRecord, MessageFormatter

ConsumerFactory = Callable[[dict[str, Any]], Any]
POLL_S = 0.2


def offset_type(text: str) -> str | int:
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected earliest, latest or an offset, got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError("offset must not be negative")
    return value


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "console-consumer",
        help="print records of a topic",
        description="Print records of a topic (no consumer group is used).",
    )
    common(p, False)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="only this partition (default: all)")
    p.add_argument("--offset", type=offset_type, help="earliest, latest (default) or an offset")
    p.add_argument("--from-beginning", action="store_true", help="same as --offset earliest")
    p.add_argument(
        "--from-timestamp",
        type=int,
        metavar="MS",
        help="start at the first record with timestamp >= MS (epoch milliseconds)",
    )
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    p.add_argument(
        "--property",
        type=key_value,
        action="append",
        metavar="K=V",
        help="formatter property: print.timestamp, print.key, print.value, "
        "print.partition, print.offset, print.headers, key.separator, "
        "line.separator, headers.separator, null.literal",
    )
    p.add_argument(
        "--formatter-property",
        type=key_value,
        action="append",
        dest="property",
        metavar="K=V",
        help=argparse.SUPPRESS,
    )
    p.add_argument("--key-separator", help="shortcut for --property key.separator=... (\\t works)")
    p.add_argument(
        "--consumer-property",
        type=key_value,
        action="append",
        metavar="K=V",
        help="any librdkafka consumer property",
    )


def formatter_from_args(args: argparse.Namespace) -> MessageFormatter:
    props = dict(args.property or [])
    if args.key_separator is not None:
        props["key.separator"] = args.key_separator
    return MessageFormatter.from_properties(props)


def start_position(args: argparse.Namespace) -> str | int:
    """earliest | latest | an offset; validates the combination of options."""
    chosen = [
        name
        for name, given in (
            ("--offset", args.offset is not None),
            ("--from-beginning", args.from_beginning),
            ("--from-timestamp", args.from_timestamp is not None),
        )
        if given
    ]
    if len(chosen) > 1:
        raise UsageError(f"{chosen[0]} and {chosen[1]} cannot be used together")
    if args.from_beginning:
        return "earliest"
    if args.offset is not None:
        return args.offset
    return "latest"


def consumer_config(
    args: argparse.Namespace, base: dict[str, Any], position: str | int
) -> dict[str, Any]:
    conf = dict(base)
    conf.update(
        {
            "group.id": f"kafka-py-console-consumer-{os.getpid()}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest" if position == "earliest" else "latest",
            "enable.partition.eof": False,
        }
    )
    conf.update(dict(args.consumer_property or []))
    return conf


def to_record(msg: Any) -> ConsumedRecord:
    ts_type, ts = msg.timestamp()
    return ConsumedRecord(
        partition=msg.partition(),
        offset=msg.offset(),
        timestamp_type=TIMESTAMP_TYPES.get(ts_type),
        timestamp=ts,
        key=msg.key(),
        value=msg.value(),
        headers=list(msg.headers() or ()),
    )


def run(
    args: argparse.Namespace,
    base: dict[str, Any],
    stdout: BinaryIO,
    consumer_factory: ConsumerFactory | None = None,
) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition

    if consumer_factory is None:
        from confluent_kafka import Consumer

        consumer_factory = Consumer
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError("--max-messages must be at least 1")
    formatter = formatter_from_args(args)
    position = start_position(args)
    timeout_s = args.request_timeout_ms / 1000.0
    consumer = consumer_factory(consumer_config(args, base, position))
    count = 0
    try:
        try:
            md = consumer.list_topics(args.topic, timeout=timeout_s)
        except KafkaException as exc:
            raise CliError(kafka_error_text(exc)) from None
        tmd = md.topics.get(args.topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            why = (
                kafka_error_text(Exception(tmd.error))
                if tmd is not None and tmd.error
                else "no partitions"
            )
            raise CliError(f"topic '{args.topic}' is not available: {why}")
        partitions = sorted(tmd.partitions)
        if args.partition is not None:
            if args.partition not in tmd.partitions:
                raise CliError(
                    f"topic '{args.topic}' has no partition {args.partition} "
                    f"(partitions: 0..{max(partitions)})"
                )
            partitions = [args.partition]
        if args.from_timestamp is not None:
            wanted = [TopicPartition(args.topic, p, args.from_timestamp) for p in partitions]
            try:
                found = consumer.offsets_for_times(wanted, timeout=timeout_s)
            except KafkaException as exc:
                raise CliError(kafka_error_text(exc)) from None
            assignment = [
                TopicPartition(
                    args.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END
                )
                for tp in found
            ]
        else:
            start = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END}.get(
                str(position), position
            )
            assignment = [TopicPartition(args.topic, p, int(start)) for p in partitions]
        consumer.assign(assignment)
        count = _consume(consumer, formatter, stdout, args.max_messages, args.timeout_ms)
    finally:
        consumer.close()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _consume(
    consumer: Any,
    formatter: MessageFormatter,
    stdout: BinaryIO,
    max_messages: int | None,
    timeout_ms: int | None,
) -> int:
    count = 0
    last = time.monotonic()
    while max_messages is None or count < max_messages:
        msg = consumer.poll(POLL_S)
        now = time.monotonic()
        if msg is None:
            if timeout_ms is not None and (now - last) * 1000 >= timeout_ms:
                break
            continue
        err = msg.error()
        if err is not None:
            if err.fatal():
                raise CliError(kafka_error_text(Exception(err)))
            print(f"kafka-py: warning: {kafka_error_text(Exception(err))}", file=sys.stderr)
            continue
        last = now
        stdout.write(formatter.format(to_record(msg)))
        stdout.flush()
        count += 1
    return count
