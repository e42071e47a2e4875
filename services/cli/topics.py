"""``kafka-py topics``: create, list, describe, alter and delete topics (like kafka-topics.sh).

Everything goes through confluent_kafka's AdminClient, so it exercises the gateway exactly as
any Kafka admin tool would.
"""

from __future__ import annotations

import argparse
import base64
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from services.cli.common import CliError, UsageError, kafka_error_text

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
MAX_REPLICATION_FACTOR = 32767

AdminFactory = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class PartitionView:
    partition: int
    leader: int | None
    replicas: list[int]
    isr: list[int]


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    topic_id: str | None
    partitions: list[PartitionView]
    configs: dict[str, str]


# ---- argument types -------------------------------------------------------------------------
def replica_assignment(text: str) -> list[list[int]]:
    """``"0:1,1:2"`` -> ``[[0, 1], [1, 2]]`` (partitions by comma, replicas by colon)."""
    out: list[list[int]] = []
    for p, part in enumerate(text.split(",")):
        try:
            replicas = [int(b) for b in part.split(":")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"bad replica list {part!r} for partition {p}: expected broker ids like 0:1:2"
            ) from None
        if len(set(replicas)) != len(replicas):
            raise argparse.ArgumentTypeError(f"partition {p} lists broker {part!r} twice")
        if out and len(replicas) != len(out[0]):
            raise argparse.ArgumentTypeError("every partition needs the same number of replicas")
        out.append(replicas)
    return out


# ---- output ---------------------------------------------------------------------------------
def kafka_uuid(uuid: Any) -> str:
    """A topic id as Kafka prints it: URL-safe base64 without padding (librdkafka's str() uses
    the standard alphabet, with ``+`` and ``/``)."""
    raw = struct.pack(">qq", uuid.get_most_significant_bits(), uuid.get_least_significant_bits())
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def format_description(topic: TopicView) -> list[str]:
    """Lines as ``kafka-topics.sh --describe`` prints them."""
    rf = len(topic.partitions[0].replicas) if topic.partitions else 0
    head = f"Topic: {topic.name}"
    if topic.topic_id and topic.topic_id != ZERO_TOPIC_ID:
        head += f"\tTopicId: {topic.topic_id}"
    configs = ",".join(f"{k}={v}" for k, v in sorted(topic.configs.items()))
    head += (
        f"\tPartitionCount: {len(topic.partitions)}\tReplicationFactor: {rf}\tConfigs: {configs}"
    )
    lines = [head]
    for p in sorted(topic.partitions, key=lambda p: p.partition):
        leader = "none" if p.leader is None or p.leader < 0 else str(p.leader)
        lines.append(
            f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {leader}"
            f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
        )
    return lines


# ---- the commands ---------------------------------------------------------------------------
class TopicsCommand:
    """One admin client and the five subcommands."""

    def __init__(self, admin: Any, timeout_s: float, out: TextIO) -> None:
        self.admin = admin
        self.timeout = timeout_s
        self.out = out

    def _wait(self, future: Any) -> Any:
        from confluent_kafka import KafkaException

        try:
            return future.result(timeout=self.timeout + 5)
        except KafkaException as exc:
            raise CliError(kafka_error_text(exc)) from None
        except TimeoutError:
            raise CliError(f"no answer from the cluster within {self.timeout:g}s") from None

    def topic_names(self) -> list[str]:
        from confluent_kafka import KafkaException

        try:
            md = self.admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise CliError(kafka_error_text(exc)) from None
        return sorted(md.topics)

    def _require(self, topic: str, if_exists: bool) -> bool:
        if topic in self.topic_names():
            return True
        if if_exists:
            return False
        raise CliError(f"topic '{topic}' does not exist")

    # create ----------------------------------------------------------------------------------
    def cmd_create(self, args: argparse.Namespace) -> int:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        configs = dict(args.config or [])
        if args.replica_assignment is not None:
            if args.partitions is not None or args.replication_factor is not None:
                raise UsageError(
                    "--replica-assignment cannot be used with --partitions or --replication-factor"
                )
            # librdkafka wants the partition count spelled out next to an explicit assignment.
            new = NewTopic(
                args.topic,
                num_partitions=len(args.replica_assignment),
                replica_assignment=args.replica_assignment,
                config=configs,
            )
        else:
            if args.partitions is not None and args.partitions < 1:
                raise UsageError("--partitions must be at least 1")
            rf = args.replication_factor
            if rf is not None and not 1 <= rf <= MAX_REPLICATION_FACTOR:
                raise UsageError(
                    f"--replication-factor must be between 1 and {MAX_REPLICATION_FACTOR}"
                )
            new = NewTopic(
                args.topic,
                num_partitions=args.partitions or -1,
                replication_factor=rf or -1,
                config=configs,
            )
        futures = self.admin.create_topics(
            [new], operation_timeout=self.timeout, request_timeout=self.timeout
        )
        try:
            futures[args.topic].result(timeout=self.timeout + 5)
        except KafkaException as exc:
            err = exc.args[0]
            if args.if_not_exists and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return 0
            raise CliError(kafka_error_text(exc)) from None
        except TimeoutError:
            raise CliError(f"no answer from the cluster within {self.timeout:g}s") from None
        print(f"Created topic {args.topic}.", file=self.out)
        return 0

    # list ------------------------------------------------------------------------------------
    def cmd_list(self, args: argparse.Namespace) -> int:
        for name in self.topic_names():
            if args.exclude_internal and name in INTERNAL_TOPICS:
                continue
            if args.topic and name != args.topic:
                continue
            print(name, file=self.out)
        return 0

    # describe --------------------------------------------------------------------------------
    def cmd_describe(self, args: argparse.Namespace) -> int:
        names = self.topic_names()
        if args.topic:
            if args.topic not in names:
                if args.if_exists:
                    return 0
                raise CliError(f"topic '{args.topic}' does not exist")
            names = [args.topic]
        elif args.exclude_internal:
            names = [n for n in names if n not in INTERNAL_TOPICS]
        if not names:
            return 0
        partitions = self._describe_partitions(names)
        configs = self._non_default_configs(names)
        for name in names:
            topic_id, parts = partitions[name]
            view = TopicView(name, topic_id, parts, configs.get(name, {}))
            for line in format_description(view):
                print(line, file=self.out)
        return 0

    def _describe_partitions(
        self, names: list[str]
    ) -> dict[str, tuple[str | None, list[PartitionView]]]:
        from confluent_kafka import KafkaException, TopicCollection

        try:
            futures = self.admin.describe_topics(
                TopicCollection(names), request_timeout=self.timeout
            )
            out: dict[str, tuple[str | None, list[PartitionView]]] = {}
            for name, fut in futures.items():
                desc = fut.result(timeout=self.timeout + 5)
                out[name] = (
                    kafka_uuid(desc.topic_id) if desc.topic_id is not None else None,
                    [
                        PartitionView(
                            p.id,
                            p.leader.id if p.leader is not None else None,
                            [n.id for n in p.replicas],
                            [n.id for n in p.isr],
                        )
                        for p in desc.partitions
                    ],
                )
            return out
        except KafkaException:
            pass  # older Metadata versions: fall back to plain metadata (no topic ids)
        md = self.admin.list_topics(timeout=self.timeout)
        out = {}
        for name in names:
            tmd = md.topics.get(name)
            if tmd is None:
                continue
            out[name] = (
                None,
                [
                    PartitionView(p.id, p.leader, list(p.replicas), list(p.isrs))
                    for p in tmd.partitions.values()
                ],
            )
        return out

    def _non_default_configs(self, names: list[str]) -> dict[str, dict[str, str]]:
        from confluent_kafka.admin import ConfigResource, ResourceType

        resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
        futures = self.admin.describe_configs(resources, request_timeout=self.timeout)
        out: dict[str, dict[str, str]] = {}
        for res, fut in futures.items():
            entries: Mapping[str, Any] = self._wait(fut)
            out[res.name] = {
                k: ("null" if e.value is None else str(e.value))
                for k, e in entries.items()
                if not e.is_default
            }
        return out

    # alter -----------------------------------------------------------------------------------
    def cmd_alter(self, args: argparse.Namespace) -> int:
        from confluent_kafka.admin import NewPartitions

        sets = dict(args.config or [])
        deletes = list(args.delete_config or [])
        if args.partitions is None and not sets and not deletes:
            raise UsageError("alter needs --partitions, --config or --delete-config")
        if args.partitions is not None and args.partitions < 1:
            raise UsageError("--partitions must be at least 1")
        if not self._require(args.topic, args.if_exists):
            return 0
        if args.partitions is not None:
            futures = self.admin.create_partitions(
                [NewPartitions(args.topic, args.partitions)],
                operation_timeout=self.timeout,
                request_timeout=self.timeout,
            )
            self._wait(futures[args.topic])
        if sets or deletes:
            self._alter_configs(args.topic, sets, deletes)
        return 0

    def _alter_configs(self, topic: str, sets: dict[str, str], deletes: list[str]) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import (
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        ops = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()
        ]
        ops += [
            ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes
        ]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=ops)
        try:
            fut = self.admin.incremental_alter_configs([resource], request_timeout=self.timeout)
            next(iter(fut.values())).result(timeout=self.timeout + 5)
            return
        except KafkaException as exc:
            if (
                exc.args[0].code() != KafkaError._UNSUPPORTED_FEATURE
                and exc.args[0].code() != KafkaError.UNSUPPORTED_VERSION
            ):
                raise CliError(kafka_error_text(exc)) from None
        # No IncrementalAlterConfigs: AlterConfigs replaces the whole set, so merge first.
        current = self._dynamic_configs(topic)
        current.update(sets)
        for k in deletes:
            current.pop(k, None)
        legacy = ConfigResource(ResourceType.TOPIC, topic, set_config=current)
        fut = self.admin.alter_configs([legacy], request_timeout=self.timeout)
        self._wait(next(iter(fut.values())))

    def _dynamic_configs(self, topic: str) -> dict[str, str]:
        from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

        futures = self.admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, topic)], request_timeout=self.timeout
        )
        entries = self._wait(next(iter(futures.values())))
        return {
            k: str(e.value)
            for k, e in entries.items()
            if int(getattr(e.source, "value", e.source)) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            and e.value is not None
        }

    # delete ----------------------------------------------------------------------------------
    def cmd_delete(self, args: argparse.Namespace) -> int:
        if not self._require(args.topic, args.if_exists):
            return 0
        futures = self.admin.delete_topics(
            [args.topic], operation_timeout=self.timeout, request_timeout=self.timeout
        )
        self._wait(futures[args.topic])
        return 0


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    """Register ``topics`` and its subcommands; ``common(parser, top)`` adds shared options."""
    from services.cli.common import key_value

    topics = sub.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics",
        description="Manage topics (like kafka-topics.sh).",
    )
    common(topics, True)
    ops = topics.add_subparsers(dest="op", metavar="{create,list,describe,alter,delete}")
    ops.required = True

    p = ops.add_parser("create", help="create a topic")
    common(p, False)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, help="default: the cluster's num.partitions")
    p.add_argument(
        "--replication-factor", type=int, help="default: the cluster's default.replication.factor"
    )
    p.add_argument(
        "--config",
        type=key_value,
        action="append",
        metavar="K=V",
        help="topic config override (repeatable)",
    )
    p.add_argument(
        "--replica-assignment",
        type=replica_assignment,
        metavar="0:1,1:2",
        help="broker ids per partition: partitions by comma, replicas by colon",
    )
    p.add_argument("--if-not-exists", action="store_true", help="no error if the topic exists")

    p = ops.add_parser("list", help="list topic names")
    common(p, False)
    p.add_argument("--topic", help="only this topic")
    p.add_argument("--exclude-internal", action="store_true")

    p = ops.add_parser("describe", help="partitions, leaders, replicas, ISR and config overrides")
    common(p, False)
    p.add_argument("--topic", help="default: every topic")
    p.add_argument("--exclude-internal", action="store_true")
    p.add_argument("--if-exists", action="store_true")

    p = ops.add_parser("alter", help="add partitions or change topic configs")
    common(p, False)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, help="new total partition count (only grows)")
    p.add_argument("--config", type=key_value, action="append", metavar="K=V")
    p.add_argument("--delete-config", action="append", metavar="K")
    p.add_argument("--if-exists", action="store_true")

    p = ops.add_parser("delete", help="delete a topic")
    common(p, False)
    p.add_argument("--topic", required=True)
    p.add_argument("--if-exists", action="store_true")


def run(
    args: argparse.Namespace,
    conf: dict[str, Any],
    out: TextIO,
    admin_factory: AdminFactory | None = None,
) -> int:
    if admin_factory is None:
        from confluent_kafka.admin import AdminClient

        admin_factory = AdminClient
    cmd = TopicsCommand(admin_factory(conf), args.request_timeout_ms / 1000.0, out)
    handler: Callable[[argparse.Namespace], int] = getattr(cmd, f"cmd_{args.op}")
    return handler(args)
