"""``kafka-py console-producer``: one record per stdin line (like kafka-console-producer.sh)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, BinaryIO

from services.cli.common import (
    CliError,
    bootstrap_type,
    java_client_properties,
    kafka_error_text,
    key_value,
    read_properties,
)
from services.cli.formatter import Header, LineFormatError, LineReader

ProducerFactory = Callable[[dict[str, Any]], Any]
COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("all", "-1", "0", "1")
# kafka-console-producer.sh's --line-reader values (the only reader there is).
LINE_READERS = ("kafka.tools.LineMessageReader", "org.apache.kafka.tools.LineMessageReader")
# librdkafka's murmur2_random is Kafka's DefaultPartitioner / BuiltInPartitioner for keyed
# records: toPositive(murmur2(key)) % partitions (an empty key is a key); null keys are spread
# (sticky), as the Java producer does.
KAFKA_PARTITIONER = "murmur2_random"


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "console-producer",
        help="produce stdin lines as records",
        description="Read lines from stdin and produce one record per line "
        "(kafka-console-producer.sh's options; keyed records are partitioned by murmur2 as "
        "Kafka's Java producer does).",
    )
    common(p, False)
    p.add_argument(
        "--broker-list",
        dest="bootstrap_server",
        type=bootstrap_type,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,  # Kafka's deprecated name of --bootstrap-server
    )
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
    p.add_argument("--reader-config", metavar="FILE", help="line reader properties file")
    p.add_argument(
        "--line-reader",
        choices=LINE_READERS,
        default=LINE_READERS[0],
        help="the line reader class (only Kafka's LineMessageReader)",
    )
    p.add_argument(
        "--header",
        type=key_value,
        action="append",
        metavar="K=V",
        help="header added to every record (repeatable)",
    )
    p.add_argument(
        "--request-required-acks",
        "--acks",
        dest="acks",
        choices=ACKS,
        help="acks of the produce requests (default all)",
    )
    p.add_argument(
        "--compression-codec",
        "--compression-type",
        dest="compression_type",
        nargs="?",
        const="gzip",
        choices=COMPRESSION,
        help="none (default), gzip (also when given without a value), snappy, lz4 or zstd",
    )
    p.add_argument(
        "--timeout",
        "--linger-ms",
        dest="linger_ms",
        type=int,
        metavar="MS",
        help="linger.ms: how long a batch waits for more records (default 5)",
    )
    p.add_argument("--batch-size", type=int, help="batch.size in bytes")
    p.add_argument("--max-partition-memory-bytes", type=int, dest="batch_size", help="batch.size")
    p.add_argument("--message-send-max-retries", type=int, help="retries")
    p.add_argument("--retry-backoff-ms", type=int, help="retry.backoff.ms")
    p.add_argument("--metadata-expiry-ms", type=int, help="metadata.max.age.ms")
    p.add_argument("--socket-buffer-size", type=int, help="send.buffer.bytes")
    p.add_argument("--max-memory-bytes", type=int, help="buffer.memory")
    p.add_argument(
        "--sync",
        action="store_true",
        help="send each record on its own and wait for its acknowledgement",
    )
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
        help="producer property (Kafka's or librdkafka's name); overrides --producer.config",
    )
    p.add_argument(
        "--producer.config",
        "--producer-config",
        dest="producer_config",
        metavar="FILE",
        help="producer properties file",
    )


def producer_config(args: argparse.Namespace, base: dict[str, Any]) -> dict[str, Any]:
    """As kafka-console-producer.sh: --producer.config, then --producer-property, then the
    options given; an option's default applies only when no property set it."""
    props = read_properties(args.producer_config) if args.producer_config else {}
    props.update(dict(args.producer_property or []))
    conf = dict(base)
    conf["client.id"] = "console-producer"
    conf.update(java_client_properties(props))
    given = {
        "acks": None if args.acks is None else ("all" if args.acks == "-1" else args.acks),
        "compression.type": args.compression_type,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "retries": args.message_send_max_retries,
        "retry.backoff.ms": args.retry_backoff_ms,
        "metadata.max.age.ms": args.metadata_expiry_ms,
        "socket.send.buffer.bytes": args.socket_buffer_size,
        "queue.buffering.max.kbytes": None
        if args.max_memory_bytes is None
        else max(1, args.max_memory_bytes // 1024),
    }
    conf.update({k: v for k, v in given.items() if v is not None})
    for key, default in (
        ("acks", "all"),
        ("compression.type", "none"),
        ("linger.ms", 5),
        ("message.timeout.ms", args.message_timeout_ms),
        ("partitioner", KAFKA_PARTITIONER),
    ):
        conf.setdefault(key, default)
    return conf


def reader_properties(args: argparse.Namespace) -> dict[str, str]:
    props = read_properties(args.reader_config) if args.reader_config else {}
    props.update(dict(args.property or []))
    return props


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
    reader = LineReader.from_properties(reader_properties(args))
    static: list[Header] = [(k, v.encode()) for k, v in (args.header or [])]
    producer_conf = producer_config(args, base)
    producer = producer_factory(producer_conf)
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
                producer.flush(_flush_timeout(producer_conf))
                raise CliError(str(exc)) from None
            headers = static + rec.headers
            _produce(producer, args.topic, rec.key, rec.value, headers or None, outcome)
            sent += 1
            if args.sync:
                producer.flush(_flush_timeout(producer_conf))
                if outcome.failed:
                    break
            else:
                producer.poll(0)
    except KeyboardInterrupt:
        producer.flush(5.0)  # like Kafka's tool: what was read before Ctrl-C still goes out
        raise
    remaining = producer.flush(_flush_timeout(producer_conf))
    if outcome.failed or remaining:
        missing = outcome.failed + remaining
        why = outcome.first_error or "timed out waiting for acknowledgements"
        raise CliError(f"{missing} of {sent} records were not delivered to {args.topic}: {why}")
    return 0


def _flush_timeout(conf: dict[str, Any]) -> float:
    """Long enough for librdkafka to report every record (delivered or timed out)."""
    timeout_ms = conf.get("message.timeout.ms", conf.get("delivery.timeout.ms", 30000))
    return int(timeout_ms) / 1000.0 + 5


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
