"""The throttle and the progress display of ``kafka-py reassign-partitions``.

Throttles are set and cleared exactly as kafka-reassign-partitions.sh does
(``ReassignPartitionsCommand``):

- ``--execute --throttle R``: for every moving partition, ``leader.replication.throttled.replicas``
  of its topic lists ``partition:broker`` for each *source* (current) replica, and
  ``follower.replication.throttled.replicas`` each *destination* that is not a source (the
  adding replicas); then ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate`` = R on every broker a move involves (sources and
  destinations). For a partition already being reassigned the sources are its original
  replicas.
- ``--verify``, once every reassignment is done: the two rates are deleted on every broker of the
  cluster and of the moves ("Clearing broker-level throttles on brokers 0,1,2") and the two
  lists on every topic of the file ("Clearing topic-level throttles on topic t").

Progress: the bytes each adding replica holds against its leader's size, from DescribeLogDirs
(``services.cli.log_dirs``).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from services.cli.common import CliError, UsageError, kafka_error_text
from services.cli.log_dirs import LogDir, cluster_addresses, describe_log_dirs
from services.cli.partition_json import TopicPartition, tp_text

if TYPE_CHECKING:
    from services.cli.reassign_partitions import Cluster, Plan

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
PROGRESS_TIMEOUT_S = 10.0  # --verify's DescribeLogDirs for the progress display
VERIFY_WARNING = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure "
    "the throttle is removed."
)


@dataclass(frozen=True, slots=True)
class PartitionMove:
    sources: tuple[int, ...]  # the replicas before the move (where data is read from)
    destinations: tuple[int, ...]  # the target replicas

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(d for d in self.destinations if d not in self.sources)


def ongoing_moves(
    ongoing: Mapping[TopicPartition, Mapping[str, Sequence[int]]],
) -> dict[TopicPartition, PartitionMove]:
    """Kafka's ``calculateCurrentMoveMap``: the reassignments in progress (ListPartition-
    Reassignments' ``replicas``, ``adding``, ``removing``) as moves from the original replicas
    to the target ones."""
    out = {}
    for tp, r in ongoing.items():
        adding, removing = set(r["adding"]), set(r["removing"])
        out[tp] = PartitionMove(
            tuple(b for b in r["replicas"] if b not in adding),
            tuple(b for b in r["replicas"] if b not in removing),
        )
    return out


def move_map(
    current: Mapping[TopicPartition, Sequence[int]],
    proposed: Mapping[TopicPartition, Sequence[int]],
    ongoing: Mapping[TopicPartition, Mapping[str, Sequence[int]]] | None = None,
) -> dict[TopicPartition, PartitionMove]:
    """Kafka's ``calculateProposedMoveMap``: the moves in progress (``ongoing``, as
    :func:`ongoing_moves` reads them) plus the ``proposed`` targets, whose sources are the
    ``current`` replicas, or the original ones of a partition already moving."""
    out = ongoing_moves(ongoing or {})
    for tp, target in proposed.items():
        if tp in out:
            sources = out[tp].sources
        elif tp in current:
            sources = tuple(current[tp])
        else:
            raise CliError(f"Topic partition {tp_text(tp)} does not exist")
        out[tp] = PartitionMove(sources, tuple(target))
    return out


def _by_topic(entries: Iterable[tuple[TopicPartition, int]]) -> dict[str, str]:
    per_topic: dict[str, set[tuple[int, int]]] = {}
    for (topic, partition), broker in entries:
        per_topic.setdefault(topic, set()).add((partition, broker))
    return {t: ",".join(f"{p}:{b}" for p, b in sorted(pairs)) for t, pairs in per_topic.items()}


def leader_throttles(moves: Mapping[TopicPartition, PartitionMove]) -> dict[str, str]:
    """``leader.replication.throttled.replicas`` by topic: every source replica."""
    return _by_topic((tp, b) for tp, m in moves.items() for b in m.sources)


def follower_throttles(moves: Mapping[TopicPartition, PartitionMove]) -> dict[str, str]:
    """``follower.replication.throttled.replicas`` by topic: every adding replica."""
    return _by_topic((tp, b) for tp, m in moves.items() for b in m.adding)


def reassigning_brokers(moves: Mapping[TopicPartition, PartitionMove]) -> list[int]:
    return sorted({b for m in moves.values() for b in (*m.sources, *m.destinations)})


def _alter(admin: Any, resources: list[Any], timeout_s: float) -> None:
    """IncrementalAlterConfigs; a broker resource goes alone (librdkafka allows one a call)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ResourceType

    topics = [r for r in resources if r.restype != ResourceType.BROKER]
    calls = [[r] for r in resources if r.restype == ResourceType.BROKER]
    for batch in ([topics] if topics else []) + calls:
        try:
            futures = admin.incremental_alter_configs(batch, request_timeout=timeout_s)
            for res, fut in futures.items():
                try:
                    fut.result(timeout=timeout_s + 5)
                except KafkaException as exc:
                    raise CliError(f"{res.name}: {kafka_error_text(exc)}") from None
        except KafkaException as exc:
            raise CliError(kafka_error_text(exc)) from None
        except TimeoutError:
            raise CliError(f"no answer from the cluster within {timeout_s:g}s") from None


def _resource(kind: str, name: str, ops: Mapping[str, str | None]) -> Any:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [
        ConfigEntry(
            key,
            value,
            incremental_operation=(
                AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
            ),
        )
        for key, value in ops.items()
    ]
    rtype = ResourceType.BROKER if kind == "broker" else ResourceType.TOPIC
    return ConfigResource(rtype, name, incremental_configs=entries)


def set_throttles(
    admin: Any,
    moves: Mapping[TopicPartition, PartitionMove],
    rate: int,
    out: TextIO,
    timeout_s: float = 30.0,
) -> None:
    """What ``--execute --throttle rate`` sets before it starts the moves."""
    if rate < 0:
        raise CliError("The throttle must be a non-negative number of bytes per second")
    print(VERIFY_WARNING, file=out)
    leaders, followers = leader_throttles(moves), follower_throttles(moves)
    _alter(
        admin,
        [
            _resource(
                "topic",
                topic,
                {
                    LEADER_REPLICAS: leaders.get(topic, ""),
                    FOLLOWER_REPLICAS: followers.get(topic, ""),
                },
            )
            for topic in sorted(set(leaders) | set(followers))
        ],
        timeout_s,
    )
    _alter(
        admin,
        [
            _resource("broker", str(b), {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})
            for b in reassigning_brokers(moves)
        ],
        timeout_s,
    )
    print(f"The inter-broker throttle limit was set to {rate} B/s", file=out)


def clear_throttles(
    admin: Any,
    brokers: Iterable[int],
    topics: Iterable[str],
    out: TextIO,
    timeout_s: float = 30.0,
) -> None:
    """What ``--verify`` does once every reassignment is complete."""
    broker_ids = sorted(set(brokers))
    topic_names = sorted(set(topics))
    print(f"Clearing broker-level throttles on brokers {','.join(map(str, broker_ids))}", file=out)
    _alter(
        admin,
        [_resource("broker", str(b), {LEADER_RATE: None, FOLLOWER_RATE: None}) for b in broker_ids],
        timeout_s,
    )
    plural = "" if len(topic_names) == 1 else "s"
    print(f"Clearing topic-level throttles on topic{plural} {','.join(topic_names)}", file=out)
    _alter(
        admin,
        [
            _resource("topic", t, {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None})
            for t in topic_names
        ],
        timeout_s,
    )


# ---- progress ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReplicaProgress:
    tp: TopicPartition
    broker: int
    copied: int  # bytes the adding replica holds
    total: int  # bytes of the largest source replica (the leader's log, as far as known)

    @property
    def remaining(self) -> int:
        return max(self.total - self.copied, 0)

    @property
    def percent(self) -> float:
        return 100.0 if self.total <= 0 else min(100.0, 100.0 * self.copied / self.total)


def _sizes(dirs: Mapping[int, Sequence[LogDir]]) -> dict[tuple[TopicPartition, int], int]:
    return {
        (tp, broker): r.size
        for broker, ds in dirs.items()
        for d in ds
        for tp, r in d.replicas.items()
    }


def progress(
    moves: Mapping[TopicPartition, PartitionMove], dirs: Mapping[int, Sequence[LogDir]]
) -> list[ReplicaProgress]:
    """Bytes copied / to copy of every adding replica (an adding replica not created yet has
    copied 0)."""
    sizes = _sizes(dirs)
    out = []
    for tp, m in sorted(moves.items()):
        total = max((sizes.get((tp, b), 0) for b in m.sources), default=0)
        for b in m.adding:
            out.append(ReplicaProgress(tp, b, sizes.get((tp, b), 0), total))
    return out


def format_progress(rows: Sequence[ReplicaProgress]) -> str:
    lines = ["Progress of partition reassignment:"]
    for r in rows:
        lines.append(
            f"Replica {r.broker} of partition {tp_text(r.tp)}: {r.copied} of {r.total} bytes "
            f"copied ({r.percent:.1f}%), {r.remaining} remaining"
        )
    copied = sum(r.copied for r in rows)
    total = sum(r.total for r in rows)
    remaining = sum(r.remaining for r in rows)
    pct = 100.0 if total <= 0 else min(100.0, 100.0 * copied / total)
    lines.append(f"Total: {copied} of {total} bytes copied ({pct:.1f}%), {remaining} remaining")
    return "\n".join(lines)


# ---- the reassign-partitions plug-in ------------------------------------------------------------
class ThrottlePlugin:
    """``--throttle`` for --execute, clearing (unless ``--preserve-throttles``) and the progress
    display for --verify (``services.cli.reassign_partitions.PLUGINS``)."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--throttle",
            type=int,
            default=-1,
            metavar="BYTES/S",
            help="with --execute: throttle the replication of the moving replicas to this many "
            "bytes/s (removed by --verify once every move is done)",
        )
        parser.add_argument(
            "--preserve-throttles",
            action="store_true",
            help="with --verify: keep the throttles after the moves are done",
        )

    def before_execute(
        self, args: argparse.Namespace, cluster: Cluster, plan: Plan, out: TextIO
    ) -> None:
        if args.throttle < 0:
            return
        from confluent_kafka.admin import AdminClient

        moves = move_map(plan.current, plan.moves, cluster.ongoing())
        set_throttles(
            AdminClient(cluster.conf), moves, args.throttle, out, cluster.timeout_ms / 1000
        )

    def after_execute(
        self, args: argparse.Namespace, conf: dict[str, Any], plan: Plan, out: TextIO
    ) -> None:
        return None

    def after_verify(
        self, args: argparse.Namespace, conf: dict[str, Any], plan: Plan, done: bool, out: TextIO
    ) -> None:
        from services.cli.reassign_partitions import Cluster

        timeout_s = args.request_timeout_ms / 1000
        if done and args.preserve_throttles:
            return
        ids, addresses = cluster_addresses(conf, timeout_s)
        if not done:
            cluster = Cluster(conf, args.request_timeout_ms)
            moves = ongoing_moves(cluster.ongoing(sorted(plan.moves)))
            print("", file=out)
            try:  # the status above is the answer; the progress is a bonus (a node may hang)
                dirs = describe_log_dirs(addresses, min(timeout_s, PROGRESS_TIMEOUT_S))
            except CliError as exc:
                print(f"Progress not available: {exc}", file=out)
                return
            print(format_progress(progress(moves, dirs)), file=out)
            return
        from confluent_kafka.admin import AdminClient

        print("", file=out)
        brokers = set(ids) | {b for replicas in plan.moves.values() for b in replicas}
        topics = {t for t, _ in plan.moves}
        clear_throttles(AdminClient(conf), brokers, topics, out, timeout_s)

    def check_arguments(self, args: argparse.Namespace) -> None:
        """Kafka refuses the throttle options with the other actions."""
        if args.throttle >= 0 and args.action != "execute":
            raise UsageError(f'Option "[throttle]" can\'t be used with action "[{args.action}]"')
        if args.preserve_throttles and args.action != "verify":
            raise UsageError(
                f'Option "[preserve-throttles]" can\'t be used with action "[{args.action}]"'
            )
