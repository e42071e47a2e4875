"""``kafka-py leader-election``: preferred or unclean leader election (kafka-leader-election.sh).

ElectLeaders goes through a gateway to the active controller. Output as Kafka's tool: the
partitions elected, those that needed no election, and one line per failure (then exit 1).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from services.cli.common import CliError, UsageError, java_error_text, kafka_error_text
from services.cli.partition_json import TopicPartition, election_partitions, read_json, tp_text

ELECTION_TYPES = ("PREFERRED", "UNCLEAN")


def election_type(text: str) -> str:
    value = text.upper()
    if value not in ELECTION_TYPES:
        raise argparse.ArgumentTypeError(f"expected PREFERRED or UNCLEAN, got {text!r}")
    return value


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "leader-election",
        help="elect preferred or unclean leaders (kafka-leader-election.sh)",
        description="Elect partition leaders as kafka-leader-election.sh does: the preferred "
        "replica (PREFERRED) or, for a partition without a leader, any live replica (UNCLEAN, "
        "which can lose acknowledged records).",
    )
    common(p, False)
    p.add_argument(
        "--admin.config", dest="command_config", metavar="FILE", help="as --command-config"
    )
    p.add_argument(
        "--election-type", type=election_type, required=True, metavar="PREFERRED|UNCLEAN"
    )
    p.add_argument("--topic", help="the topic of --partition")
    p.add_argument("--partition", type=int, help="the partition of --topic")
    p.add_argument(
        "--all-topic-partitions", action="store_true", help="every partition of every topic"
    )
    p.add_argument(
        "--path-to-json-file",
        metavar="FILE",
        help='{"partitions":[{"topic":"t","partition":0},...]}',
    )


def requested_partitions(args: argparse.Namespace) -> list[TopicPartition] | None:
    """The partitions named (None = all), with kafka-leader-election.sh's option rules."""
    chosen = [
        given
        for given in (args.all_topic_partitions, args.topic is not None, args.path_to_json_file)
        if given
    ]
    if len(chosen) != 1:
        raise UsageError(
            "one and only one of --all-topic-partitions, --topic, --path-to-json-file is required"
        )
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    if args.all_topic_partitions:
        return None
    if args.topic is not None:
        if args.partition is None:
            raise UsageError("--topic needs --partition")
        return [(args.topic, args.partition)]
    return election_partitions(read_json(args.path_to_json_file, "Replica election data"))


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    partitions = requested_partitions(args)
    timeout_s = args.request_timeout_ms / 1000.0
    # confluent-kafka 2.16's elect_leaders takes no timeout arguments: the client's own
    # socket.timeout.ms bounds the request.
    admin = AdminClient({**conf, "socket.timeout.ms": args.request_timeout_ms})
    tps = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
    try:
        results = admin.elect_leaders(ElectionType[args.election_type], tps).result(
            timeout=timeout_s + 5
        )
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    except TimeoutError:
        raise CliError(f"no answer from the cluster within {timeout_s:g}s") from None
    elected: list[str] = []
    noop: list[str] = []
    failed: list[tuple[str, Any]] = []
    for tp, error in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        name = tp_text((tp.topic, tp.partition))
        err = error.args[0] if isinstance(error, KafkaException) else error
        if err is None or (hasattr(err, "code") and err.code() == KafkaError.NO_ERROR):
            elected.append(name)
        elif err.code() == KafkaError.ELECTION_NOT_NEEDED:
            noop.append(name)
        else:
            failed.append((name, err))
    kind = args.election_type
    if elected:
        print(
            f"Successfully completed leader election ({kind}) for partitions {', '.join(elected)}",
            file=out,
        )
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}", file=out)
    for name, err in failed:
        print(
            f"Error completing leader election ({kind}) for partition: {name}: "
            f"{java_error_text(err)}",
            file=out,
        )
    if failed:
        raise CliError(f"{len(failed)} replica(s) could not be elected")
    return 0
