"""``kafka-py console-consumer``: print records (like kafka-console-consumer.sh).

With ``--group`` the consumer joins that group, subscribes and commits what it printed (a
second run continues where the first stopped); without one, partitions are assigned directly
and nothing is committed. Output follows Kafka's DefaultMessageFormatter (or the Logging/NoOp
formatters), with Kafka's deserializers.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from services.cli.common import (
    CliError,
    UsageError,
    java_client_properties,
    kafka_error_text,
    key_value,
    read_properties,
)
from services.cli.deserializers import DeserializationError
from services.cli.formatter import (
    FORMATTERS,
    TIMESTAMP_TYPES,
    ConsumedRecord,
    RecordFormatter,
    make_formatter,
)

ConsumerFactory = Callable[[dict[str, Any]], Any]
POLL_S = 0.2
DEFAULT_FORMATTER = "kafka.tools.DefaultMessageFormatter"


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
        description="Print records of a topic (kafka-console-consumer.sh's options). "
        "With --group, offsets are committed to that group.",
    )
    common(p, False)
    p.add_argument("--topic")
    p.add_argument(
        "--include",
        "--whitelist",
        dest="include",
        metavar="REGEX",
        help="consume every topic matching this regular expression (needs a group)",
    )
    p.add_argument("--group", help="consumer group: subscribe and commit offsets")
    p.add_argument("--partition", type=int, help="only this partition (default: all)")
    p.add_argument(
        "--offset",
        type=offset_type,
        help="earliest, latest (default) or an offset; needs --partition",
    )
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset (with --group: when the group has no offset)",
    )
    p.add_argument(
        "--from-timestamp",
        type=int,
        metavar="MS",
        help="start at the first record with timestamp >= MS (epoch milliseconds)",
    )
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    p.add_argument(
        "--formatter",
        default=DEFAULT_FORMATTER,
        metavar="CLASS",
        help="kafka.tools.DefaultMessageFormatter (default), LoggingMessageFormatter or "
        "NoOpMessageFormatter (kafka.tools. or org.apache.kafka.tools.consumer.)",
    )
    p.add_argument(
        "--property",
        type=key_value,
        action="append",
        metavar="K=V",
        help="formatter property: print.timestamp, print.key, print.value, "
        "print.partition, print.offset, print.headers, key.separator, "
        "line.separator, headers.separator, null.literal, key.deserializer, "
        "value.deserializer, headers.deserializer",
    )
    p.add_argument(
        "--formatter-property",
        type=key_value,
        action="append",
        dest="property",
        metavar="K=V",
        help=argparse.SUPPRESS,
    )
    p.add_argument("--formatter-config", metavar="FILE", help="formatter properties file")
    p.add_argument(
        "--key-deserializer",
        metavar="CLASS",
        help="e.g. org.apache.kafka.common.serialization.LongDeserializer (or long, integer, "
        "string, bytes, bytearray, json, json-pretty)",
    )
    p.add_argument("--value-deserializer", metavar="CLASS", help="as --key-deserializer")
    p.add_argument("--key-separator", help="shortcut for --property key.separator=... (\\t works)")
    p.add_argument(
        "--skip-message-on-error",
        action="store_true",
        help="skip a record that cannot be formatted instead of stopping",
    )
    p.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        help="isolation.level of the consumer",
    )
    p.add_argument(
        "--consumer-property",
        type=key_value,
        action="append",
        metavar="K=V",
        help="consumer property (Kafka's or librdkafka's name); overrides --consumer.config",
    )
    p.add_argument(
        "--consumer.config",
        "--consumer-config",
        dest="consumer_config",
        metavar="FILE",
        help="consumer properties file",
    )


def _log_info(message: str) -> None:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    print(f"[{stamp}] INFO {message} (kafka.tools.LoggingMessageFormatter)", file=sys.stderr)


def formatter_from_args(args: argparse.Namespace) -> RecordFormatter:
    props = read_properties(args.formatter_config) if args.formatter_config else {}
    props.update(dict(args.property or []))
    if args.key_separator is not None:
        props["key.separator"] = args.key_separator
    if args.key_deserializer:
        props["key.deserializer"] = args.key_deserializer
    if args.value_deserializer:
        props["value.deserializer"] = args.value_deserializer
    return make_formatter(args.formatter, props, _log_info)


def check_options(args: argparse.Namespace, group: str | None) -> None:
    """kafka-console-consumer.sh's rules for combining options."""
    if (args.topic is None) == (args.include is None):
        raise UsageError("exactly one of --include/--topic is required")
    if args.partition is not None and args.topic is None:
        raise UsageError("the topic is required when partition is specified")
    if args.offset is not None and args.partition is None:
        raise UsageError("the partition is required when offset is specified")
    if group is not None and args.partition is not None:
        raise UsageError("options group and partition cannot be specified together")
    if args.include is not None and group is None:
        raise UsageError("--include needs --group")
    if group is not None and args.from_timestamp is not None:
        raise UsageError("--from-timestamp cannot be used with a group")
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError("--max-messages must be at least 1")
    if args.formatter not in FORMATTERS:
        make_formatter(args.formatter, {}, _log_info)  # raises the one-line usage error


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


def consumer_properties(args: argparse.Namespace) -> tuple[dict[str, str], str | None]:
    """--consumer.config, then --consumer-property; and the group id they and --group name."""
    props = read_properties(args.consumer_config) if args.consumer_config else {}
    props.update(dict(args.consumer_property or []))
    ids = list(dict.fromkeys(g for g in (args.group, props.get("group.id")) if g))
    if len(ids) > 1:
        raise UsageError(
            "the group ids given with --group and in the consumer properties differ: "
            + ", ".join(repr(g) for g in ids)
        )
    return props, (ids[0] if ids else None)


def consumer_config(
    args: argparse.Namespace,
    base: dict[str, Any],
    position: str | int,
    props: dict[str, str] | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    conf = dict(base)
    conf["client.id"] = "console-consumer"
    if group is None:
        conf.update(
            {
                "group.id": f"kafka-py-console-consumer-{os.getpid()}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
            }
        )
    else:
        # The offset of a record is stored once it is printed (or skipped) and committed
        # periodically and on close (auto-commit, as the Java console consumer); a record that
        # stopped the consumer is not committed.
        conf.update(
            {"group.id": group, "enable.auto.commit": True, "enable.auto.offset.store": False}
        )
    conf.update(
        {
            "auto.offset.reset": "earliest" if position == "earliest" else "latest",
            "enable.partition.eof": False,
        }
    )
    if args.isolation_level:
        conf["isolation.level"] = args.isolation_level
    conf.update(java_client_properties(props or {}))
    if group is not None:
        conf["group.id"] = group
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
    if consumer_factory is None:
        from confluent_kafka import Consumer

        consumer_factory = Consumer
    props, group = consumer_properties(args)
    check_options(args, group)
    formatter = formatter_from_args(args)
    position = start_position(args)
    timeout_s = args.request_timeout_ms / 1000.0
    consumer = consumer_factory(consumer_config(args, base, position, props, group))
    counter = _Counter()
    try:
        if group is not None:
            consumer.subscribe([args.topic] if args.topic else [f"^{args.include}"])
        else:
            consumer.assign(_assignment(consumer, args, position, timeout_s))
        _consume(consumer, formatter, stdout, args, counter, commit=group is not None)
    finally:
        try:
            consumer.close()  # with a group: commits the offsets of what was printed
        finally:
            print(f"Processed a total of {counter.count} messages", file=sys.stderr)
    return 0


class _Counter:
    def __init__(self) -> None:
        self.count = 0


def _assignment(
    consumer: Any, args: argparse.Namespace, position: str | int, timeout_s: float
) -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition

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
        return [
            TopicPartition(args.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
            for tp in found
        ]
    start = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END}.get(str(position), position)
    return [TopicPartition(args.topic, p, int(start)) for p in partitions]


def _consume(
    consumer: Any,
    formatter: RecordFormatter,
    stdout: BinaryIO,
    args: argparse.Namespace,
    counter: _Counter,
    commit: bool,
) -> None:
    last = time.monotonic()
    while args.max_messages is None or counter.count < args.max_messages:
        msg = consumer.poll(POLL_S)
        now = time.monotonic()
        if msg is None:
            if args.timeout_ms is not None and (now - last) * 1000 >= args.timeout_ms:
                return
            continue
        err = msg.error()
        if err is not None:
            if err.fatal():
                raise CliError(kafka_error_text(Exception(err)))
            print(f"kafka-py: warning: {kafka_error_text(Exception(err))}", file=sys.stderr)
            continue
        last = now
        try:
            text = formatter.format(to_record(msg))
        except DeserializationError as exc:
            where = f"{msg.topic()}-{msg.partition()} offset {msg.offset()}"
            if args.skip_message_on_error:
                print(
                    f"Error processing message, skipping this message: {where}: {exc}",
                    file=sys.stderr,
                )
                if commit:
                    consumer.store_offsets(message=msg)
                continue
            raise CliError(
                f"Error processing message, terminating consumer process: {where}: {exc}"
            ) from None
        stdout.write(text)
        stdout.flush()
        counter.count += 1
        if commit:
            consumer.store_offsets(message=msg)
