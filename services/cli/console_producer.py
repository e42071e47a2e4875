"""``kafka-py console-producer``: one record per stdin line (like kafka-console-producer.sh)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, BinaryIO

from services.cli.common import CliError, kafka_error_text, key_value
from services.cli.formatter import Header, LineFormatError, LineReader

ProducerFactory = Callable[[dict[str, Any]], Any]
COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "console-producer",
        help="produce stdin lines as records",
        description="Read lines from stdin and produce one record per line.",
    )
    common(p, False)
    p.add_argument("--topic", required=True)
    p.add_argument(
        "--property",
        type=key_value,
        action="append",
        metavar="K=V",
        help="line reader property: parse.key, key.separator, parse.headers, "
        "headers.delimiter, headers.separator, headers.key.separator, null.marker, "
        "ignore.error",
    )
    p.add_argument(
        "--reader-property",
        type=key_value,
        action="append",
        dest="property",
        metavar="K=V",
        help=argparse.SUPPRESS,
    )
    p.add_argument(
        "--header",
        type=key_value,
        action="append",
        metavar="K=V",
        help="header added to every record (repeatable)",
    )
    p.add_argument("--acks", choices=("all", "-1", "0", "1"), default="all")
    p.add_argument("--compression-type", choices=COMPRESSION, default="none")
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument(
        "--message-timeout-ms",
        type=int,
        default=30000,
        help="give up on a record not acknowledged within this time",
    )
    p.add_argument(
        "--producer-property",
        type=key_value,
        action="append",
        metavar="K=V",
        help="any librdkafka producer property",
    )


def producer_config(args: argparse.Namespace, base: dict[str, Any]) -> dict[str, Any]:
    conf = dict(base)
    conf.update(
        {
            "acks": "all" if args.acks == "-1" else args.acks,
            "compression.type": args.compression_type,
            "linger.ms": args.linger_ms,
            "message.timeout.ms": args.message_timeout_ms,
        }
    )
    conf.update(dict(args.producer_property or []))
    return conf


class _Outcome:
    """Counts delivery reports; keeps the first error."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error: str | None = None

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = kafka_error_text(Exception(err))


def run(
    args: argparse.Namespace,
    base: dict[str, Any],
    stdin: BinaryIO,
    producer_factory: ProducerFactory | None = None,
) -> int:
    if producer_factory is None:
        from confluent_kafka import Producer

        producer_factory = Producer
    reader = LineReader.from_properties(dict(args.property or []))
    static: list[Header] = [(k, v.encode()) for k, v in (args.header or [])]
    producer = producer_factory(producer_config(args, base))
    outcome = _Outcome()
    sent = 0
    try:
        for lineno, raw in enumerate(stdin, 1):
            line = raw.rstrip(b"\n")
            if line.endswith(b"\r"):
                line = line[:-1]
            try:
                rec = reader.parse(line, lineno)
            except LineFormatError as exc:
                producer.flush(args.message_timeout_ms / 1000.0)
                raise CliError(str(exc)) from None
            headers = static + rec.headers
            _produce(producer, args.topic, rec.key, rec.value, headers or None, outcome)
            sent += 1
            producer.poll(0)
    except KeyboardInterrupt:
        producer.flush(5.0)  # like Kafka's tool: what was read before Ctrl-C still goes out
        raise
    remaining = producer.flush(args.message_timeout_ms / 1000.0 + 5)
    if outcome.failed or remaining:
        missing = outcome.failed + remaining
        why = outcome.first_error or "timed out waiting for acknowledgements"
        raise CliError(f"{missing} of {sent} records were not delivered to {args.topic}: {why}")
    return 0


def _produce(
    producer: Any,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[Header] | None,
    on_delivery: Callable[[Any, Any], None],
) -> None:
    from confluent_kafka import KafkaException

    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.1)  # local queue full: let deliveries drain
        except KafkaException as exc:
            raise CliError(kafka_error_text(exc)) from None
