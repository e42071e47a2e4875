"""``kafka-py topics``: create, list, describe, alter and delete topics (like kafka-topics.sh).

Everything goes through confluent_kafka's AdminClient, so it exercises the gateway exactly as
any Kafka admin tool would.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from services.cli.common import CliError, UsageError, kafka_error_text
from services.cli.zk_client import add_zk_tls_argument, tool_zk_security
from services.cli.zk_view import PartitionState

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
MAX_REPLICATION_FACTOR = 32767

AdminFactory = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    topic_id: str | None
    partitions: list[PartitionState]
    configs: dict[str, str]  # the non-default ones (Kafka's ``!ConfigEntry.isDefault``)
    marked_for_deletion: bool = False

    @property
    def replication_factor(self) -> int:
        """As kafka-topics.sh: the first partition's replicas minus those being added."""
        if not self.partitions:
            return 0
        first = min(self.partitions, key=lambda p: p.partition)
        return len(first.replicas) - len(first.adding)


@dataclass(frozen=True, slots=True)
class PartitionReport:
    """Which partitions ``describe`` prints (kafka-topics.sh's DescribeOptions)."""

    under_replicated: bool = False
    unavailable: bool = False
    under_min_isr: bool = False
    at_min_isr: bool = False
    topics_with_overrides: bool = False

    @property
    def describe_configs(self) -> bool:
        """Topic header lines are printed unless a partition report was asked for."""
        return not (
            self.under_replicated or self.unavailable or self.under_min_isr or self.at_min_isr
        )

    @property
    def describe_partitions(self) -> bool:
        return not self.topics_with_overrides

    def wants(self, p: PartitionState, min_isr: int | None, live: frozenset[int]) -> bool:
        if self.describe_configs:
            return True
        has_leader = p.leader is not None
        return (
            (self.under_replicated and len(p.replicas) - len(p.adding) - len(p.isr) > 0)
            or (self.unavailable and (not has_leader or p.leader not in live))
            or (
                self.under_min_isr
                and (not has_leader or (min_isr is not None and len(p.isr) < min_isr))
            )
            or (self.at_min_isr and min_isr is not None and len(p.isr) == min_isr)
        )


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


def select_topics(names: list[str], topic: str | None, exclude_internal: bool) -> list[str]:
    """kafka-topics.sh's ``--topic`` for list and describe: a name, or a regular expression
    that must match whole names (commas separate alternatives, as Kafka's IncludeList)."""
    if topic is None:
        chosen = names
    elif topic in names:
        chosen = [topic]
    else:
        pattern = topic.strip().replace(",", "|").replace(" ", "").strip("\"'")
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise UsageError(
                f"--topic {topic!r} is not a valid regular expression: {exc}"
            ) from None
        chosen = [n for n in names if regex.fullmatch(n)]
    return [n for n in chosen if not (exclude_internal and n in INTERNAL_TOPICS)]


# ---- output ---------------------------------------------------------------------------------
def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def topic_line(topic: TopicView) -> str:
    """The topic line of ``kafka-topics.sh --describe``."""
    head = f"Topic: {topic.name}"
    if topic.topic_id and topic.topic_id != ZERO_TOPIC_ID:
        head += f"\tTopicId: {topic.topic_id}"
    configs = ",".join(f"{k}={v}" for k, v in sorted(topic.configs.items()))
    head += (
        f"\tPartitionCount: {len(topic.partitions)}"
        f"\tReplicationFactor: {topic.replication_factor}\tConfigs: {configs}"
    )
    return head + ("\tMarkedForDeletion: true" if topic.marked_for_deletion else "")


def partition_line(topic: TopicView, p: PartitionState) -> str:
    """One partition line of ``kafka-topics.sh --describe``: the storage leader, replicas, ISR."""
    leader = "none" if p.leader is None else str(p.leader)
    line = (
        f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {leader}"
        f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
    )
    if p.reassigning:
        line += f"\tAdding Replicas: {_ids(p.adding)}\tRemoving Replicas: {_ids(p.removing)}"
    return line + ("\tMarkedForDeletion: true" if topic.marked_for_deletion else "")


def format_description(topic: TopicView) -> list[str]:
    """Lines as ``kafka-topics.sh --describe`` prints them (no report option)."""
    return [topic_line(topic)] + [
        partition_line(topic, p) for p in sorted(topic.partitions, key=lambda p: p.partition)
    ]


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
        for name in select_topics(self.topic_names(), args.topic, args.exclude_internal):
            print(name, file=self.out)
        return 0

    # describe --------------------------------------------------------------------------------
    def cmd_describe(self, args: argparse.Namespace) -> int:
        from services.cli.zk_view import read_cluster

        names = select_topics(self.topic_names(), args.topic, args.exclude_internal)
        if not names:
            if args.topic and not args.if_exists:
                raise CliError(f"topic '{args.topic}' does not exist")
            return 0
        report = PartitionReport(
            under_replicated=args.under_replicated_partitions,
            unavailable=args.unavailable_partitions,
            under_min_isr=args.under_min_isr_partitions,
            at_min_isr=args.at_min_isr_partitions,
            topics_with_overrides=args.topics_with_overrides,
        )
        configs = self._configs(names)
        security = tool_zk_security(args.zk_tls_config_file)
        state = read_cluster(self.zookeeper_connect(args), names, self.timeout, security)
        for name in names:
            topic = state.topics.get(name)
            if topic is None:
                continue  # deleted meanwhile
            entries = configs.get(name, {})
            view = TopicView(
                name,
                topic.topic_id,
                topic.partitions,
                {k: v for k, (v, is_default) in entries.items() if not is_default},
                topic.marked_for_deletion,
            )
            if report.describe_configs and (not report.topics_with_overrides or view.configs):
                print(topic_line(view), file=self.out)
            if not report.describe_partitions:
                continue
            min_isr = _int_or_none(entries.get("min.insync.replicas", (None, True))[0])
            for p in sorted(view.partitions, key=lambda p: p.partition):
                if report.wants(p, min_isr, state.live_brokers):
                    print(partition_line(view, p), file=self.out)
        return 0

    def zookeeper_connect(self, args: argparse.Namespace) -> str:
        """``--zookeeper``, else the ``zookeeper.connect`` a gateway reports (DescribeConfigs of
        its BROKER resource, as Kafka's brokers do)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ConfigResource, ResourceType

        if args.zookeeper:
            return str(args.zookeeper)
        try:
            brokers = sorted(self.admin.list_topics(timeout=self.timeout).brokers)
        except KafkaException as exc:
            raise CliError(kafka_error_text(exc)) from None
        for broker in brokers:
            resource = ConfigResource(ResourceType.BROKER, str(broker))
            futures = self.admin.describe_configs([resource], request_timeout=self.timeout)
            entries: Mapping[str, Any] = self._wait(next(iter(futures.values())))
            entry = entries.get("zookeeper.connect")
            if entry is not None and entry.value:
                return str(entry.value)
        raise CliError("the gateways do not report zookeeper.connect: give it with --zookeeper")

    def _configs(self, names: list[str]) -> dict[str, dict[str, tuple[str, bool]]]:
        """Every config of each topic: name -> (value, is_default)."""
        from confluent_kafka.admin import ConfigResource, ResourceType

        resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
        futures = self.admin.describe_configs(resources, request_timeout=self.timeout)
        out: dict[str, dict[str, tuple[str, bool]]] = {}
        for res, fut in futures.items():
            entries: Mapping[str, Any] = self._wait(fut)
            out[res.name] = {
                k: ("null" if e.value is None else str(e.value), bool(e.is_default))
                for k, e in entries.items()
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
    p.add_argument("--topic", help="a topic name or a regular expression (e.g. 'orders-.*')")
    p.add_argument("--exclude-internal", action="store_true")

    p = ops.add_parser(
        "describe",
        help="partitions, storage leaders, replicas, ISR and config overrides",
        description="Describe topics as kafka-topics.sh --describe does. Leaders, replicas and "
        "ISRs are storage node ids, read from ZooKeeper (the controller's partition state).",
    )
    common(p, False)
    p.add_argument("--topic", help="a topic name or a regular expression (default: every topic)")
    p.add_argument("--exclude-internal", action="store_true")
    p.add_argument("--if-exists", action="store_true")
    p.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="where to read partition state (default: the zookeeper.connect the gateway reports)",
    )
    add_zk_tls_argument(p)
    reports = p.add_mutually_exclusive_group()
    reports.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than their replica set",
    )
    reports.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="only partitions without a leader, or whose leader is not a live storage node",
    )
    reports.add_argument(
        "--under-min-isr-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than min.insync.replicas",
    )
    reports.add_argument(
        "--at-min-isr-partitions",
        action="store_true",
        help="only partitions whose ISR size equals min.insync.replicas",
    )
    reports.add_argument(
        "--topics-with-overrides",
        action="store_true",
        help="only the topic lines of topics with config overrides",
    )

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
