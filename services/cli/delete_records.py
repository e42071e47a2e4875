"""``kafka-py delete-records``: move log start offsets forward (kafka-delete-records.sh).

The offsets come from ``--offset-json-file``
(``{"partitions":[{"topic":"t","partition":0,"offset":5}],"version":1}``; offset -1 means the
high watermark). Output as Kafka's tool; a partition that fails is printed with its error and
makes the exit status 1 (Kafka's tool exits 0).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from services.cli.common import CliError, java_error_text, kafka_error_text
from services.cli.partition_json import delete_offsets, read_json, tp_text

UNKNOWN_PARTITION = (
    "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
    "This server does not host this topic-partition."
)


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "delete-records",
        help="delete records before an offset (kafka-delete-records.sh)",
        description="Delete the records of partitions before the given offsets, as "
        "kafka-delete-records.sh does.",
    )
    common(p, False)
    p.add_argument(
        "--offset-json-file",
        required=True,
        metavar="FILE",
        help='{"partitions":[{"topic":"t","partition":0,"offset":5}],"version":1}',
    )


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    offsets = delete_offsets(read_json(args.offset_json_file, "Offset json file"))
    if not offsets:
        raise CliError("Offset json file names no partitions")
    timeout_s = args.request_timeout_ms / 1000.0
    admin = AdminClient(conf)
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    # librdkafka reports an unknown partition as "no leader found"; say what Kafka says
    unknown = [
        tp for tp, _ in offsets if tp[1] not in getattr(md.topics.get(tp[0]), "partitions", {})
    ]
    known = [(tp, offset) for tp, offset in offsets if tp not in unknown]
    print("Executing records delete operation", file=out)
    try:
        futures = (
            {}
            if not known
            else admin.delete_records(
                [TopicPartition(t, p, offset) for (t, p), offset in known],
                request_timeout=timeout_s,
                operation_timeout=timeout_s,
            )
        )
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    print("Records delete operation completed:", file=out)
    for missing in unknown:
        print(f"partition: {tp_text(missing)}\terror: {UNKNOWN_PARTITION}", file=out)
    failed = len(unknown)
    for ctp, fut in sorted(futures.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        name = tp_text((ctp.topic, ctp.partition))
        try:
            deleted = fut.result(timeout=timeout_s + 5)
        except KafkaException as exc:
            failed += 1
            print(f"partition: {name}\terror: {java_error_text(exc.args[0])}", file=out)
            continue
        except TimeoutError:
            failed += 1
            print(f"partition: {name}\terror: no answer within {timeout_s:g}s", file=out)
            continue
        print(f"partition: {name}\tlow_watermark: {deleted.low_watermark}", file=out)
    if failed:
        raise CliError(f"records of {failed} partition(s) could not be deleted")
    return 0
