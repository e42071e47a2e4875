"""``kafka-py reassign-partitions``: kafka-reassign-partitions.sh's --generate, --execute,
--verify and --cancel, with its JSON files and its output.

AlterPartitionReassignments / ListPartitionReassignments go to a gateway (which forwards them to
the active controller) with kafka-py's own codec, since confluent-kafka has no call for them;
the current assignment comes from Metadata. Replication throttles and the progress display are
plug-ins (:data:`PLUGINS`): each adds its options and runs around --execute / during --verify
(``services.cli.reassign_throttle``: ``--throttle``, the clearing and the progress display).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from services.cli.common import CliError, UsageError, kafka_error_text
from services.cli.partition_json import (
    TopicPartition,
    read_json,
    reassignment_json,
    reassignment_moves,
    topics_to_move,
    tp_text,
)
from services.cli.reassign_throttle import ThrottlePlugin
from services.cli.wire import bootstrap_exchange
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.controller.assignment import BrokerMeta, assign_replicas

ALTER_VERSION = 0  # every version the gateway takes; v0 is what Kafka's 2.4+ tools send
LIST_VERSION = 0
ACTIONS = ("generate", "execute", "verify", "cancel")


@dataclass(frozen=True, slots=True)
class Plan:
    """What --execute / --verify / --cancel act on: the file's targets and the assignment
    before (for --execute, the rollback printed)."""

    moves: Mapping[TopicPartition, list[int]]
    current: Mapping[TopicPartition, list[int]]


class ReassignPlugin(Protocol):
    """Extends the command (replication throttles, progress): registered in :data:`PLUGINS`."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def check_arguments(self, args: argparse.Namespace) -> None:
        """Refuse (UsageError) options that do not go with ``args.action``."""

    def before_execute(
        self, args: argparse.Namespace, cluster: Cluster, plan: Plan, out: TextIO
    ) -> None:
        """The plan is checked, the reassignments are about to start (throttles go first, as
        kafka-reassign-partitions.sh sets them)."""

    def after_execute(
        self, args: argparse.Namespace, conf: dict[str, Any], plan: Plan, out: TextIO
    ) -> None:
        """The reassignments were started."""

    def after_verify(
        self,
        args: argparse.Namespace,
        conf: dict[str, Any],
        plan: Plan,
        done: bool,
        out: TextIO,
    ) -> None:
        """The status was printed; ``done``: no partition of the plan is still moving."""


PLUGINS: list[ReassignPlugin] = [ThrottlePlugin()]


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "reassign-partitions",
        help="move partition replicas between storage nodes (kafka-reassign-partitions.sh)",
        description="Generate, execute, verify or cancel partition reassignments as "
        "kafka-reassign-partitions.sh does, with its JSON files "
        '({"version":1,"partitions":[{"topic","partition","replicas","log_dirs"}]}).',
    )
    common(p, False)
    action = p.add_mutually_exclusive_group(required=True)
    for name in ACTIONS:
        action.add_argument(f"--{name}", dest="action", action="store_const", const=name)
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help="for --generate")
    p.add_argument(
        "--broker-list", metavar="IDS", help="comma-separated storage node ids for --generate"
    )
    p.add_argument("--disable-rack-aware", action="store_true", help="for --generate")
    p.add_argument("--reassignment-json-file", metavar="FILE", help="the reassignment plan")
    p.add_argument(
        "--additional",
        action="store_true",
        help="--execute while other reassignments are in progress",
    )
    for plugin in PLUGINS:
        plugin.add_arguments(p)


# ---- cluster access ---------------------------------------------------------------------------
class Cluster:
    """The few requests the command needs, against the bootstrap gateways."""

    def __init__(self, conf: dict[str, Any], timeout_ms: int) -> None:
        self.conf = conf
        self.bootstrap = str(conf["bootstrap.servers"])
        self.timeout_ms = timeout_ms
        self._admin_client: Any = None

    def _call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return bootstrap_exchange(
            self.bootstrap, api_key, version, body, self.timeout_ms / 1000 + 5
        )

    def _admin(self) -> Any:
        """One AdminClient for the command (a dropped one fails its pending futures)."""
        if self._admin_client is None:
            from confluent_kafka.admin import AdminClient

            self._admin_client = AdminClient(self.conf)
        return self._admin_client

    def metadata(self, topics: Sequence[str] | None) -> dict[str, dict[int, list[int]]]:
        """topic -> partition -> replicas, from Metadata."""
        from confluent_kafka import KafkaException

        try:
            md = self._admin().list_topics(timeout=self.timeout_ms / 1000)
        except KafkaException as exc:
            raise CliError(kafka_error_text(exc)) from None
        return {
            name: {p: list(pm.replicas) for p, pm in t.partitions.items()}
            for name, t in md.topics.items()
            if (topics is None or name in topics) and t.error is None
        }

    def racks(self) -> dict[int, str | None]:
        """broker id -> rack of the brokers DescribeCluster names."""
        from confluent_kafka import KafkaException

        timeout = self.timeout_ms / 1000
        try:
            cluster = self._admin().describe_cluster(request_timeout=timeout).result(timeout + 5)
        except KafkaException as exc:
            raise CliError(kafka_error_text(exc)) from None
        return {n.id: n.rack for n in cluster.nodes}

    def alter(self, moves: Mapping[TopicPartition, list[int] | None]) -> dict[TopicPartition, str]:
        """Errors per partition (``{}``: all started)."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, p), replicas in sorted(moves.items()):
            topics.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
        body = self._call(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            ALTER_VERSION,
            {
                "timeout": self.timeout_ms,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        _top_level(body)
        return {
            (t["name"], p["partition_index"]): _error_text(p["error_code"], p["error_message"])
            for t in body["responses"]
            for p in t["partitions"]
            if p["error_code"] != 0
        }

    def ongoing(
        self, tps: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, dict[str, list[int]]]:
        topics: dict[str, list[int]] = {}
        for t, p in tps or []:
            topics.setdefault(t, []).append(p)
        body = self._call(
            ApiKey.LIST_PARTITION_REASSIGNMENTS,
            LIST_VERSION,
            {
                "timeout": self.timeout_ms,
                "topics": None
                if tps is None
                else [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
            },
        )
        _top_level(body)
        return {
            (t["name"], p["partition_index"]): {
                "replicas": p["replicas"],
                "adding": p["adding_replicas"],
                "removing": p["removing_replicas"],
            }
            for t in body["topics"]
            for p in t["partitions"]
        }


def _error_text(code: int, message: str | None) -> str:
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error {code}"
    return f"{name}: {message}" if message else name


def _top_level(body: dict[str, Any]) -> None:
    if body["error_code"] != 0:
        raise CliError(_error_text(body["error_code"], body["error_message"]))


def _current(cluster: Cluster, tps: Sequence[TopicPartition]) -> dict[TopicPartition, list[int]]:
    topics = cluster.metadata(sorted({t for t, _ in tps}))
    return {(t, p): topics[t][p] for t, p in tps if t in topics and p in topics[t]}


# ---- actions ----------------------------------------------------------------------------------
def generate(cluster: Cluster, args: argparse.Namespace, out: TextIO) -> int:
    if not args.topics_to_move_json_file or not args.broker_list:
        raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
    names = topics_to_move(read_json(args.topics_to_move_json_file, "Topics to move JSON"))
    try:
        broker_ids = sorted({int(b) for b in args.broker_list.split(",") if b.strip()})
    except ValueError:
        raise UsageError(f"--broker-list must be broker ids, got {args.broker_list!r}") from None
    if not broker_ids:
        raise UsageError("--broker-list names no broker")
    topics = cluster.metadata(names)
    missing = [n for n in names if n not in topics]
    if missing:
        raise CliError(f"Topic(s) not found: {', '.join(missing)}")
    racks = cluster.racks() if not args.disable_rack_aware else {}
    metas = [BrokerMeta(b, racks.get(b)) for b in broker_ids]
    if any(m.rack for m in metas) and not all(m.rack for m in metas):
        raise CliError(
            "Not all brokers have rack information. Add --disable-rack-aware in command line"
            " to make replica assignment without rack information."
        )
    current: dict[TopicPartition, list[int]] = {}
    proposed: dict[TopicPartition, list[int]] = {}
    rng = random.Random()
    for name in names:
        parts = topics[name]
        for p, replicas in parts.items():
            current[(name, p)] = replicas
        rf = len(next(iter(parts.values())))
        try:
            layout = assign_replicas(len(parts), rf, metas, rng=rng)
        except Exception as exc:  # AssignmentError: RF larger than the broker list, ...
            raise CliError(str(exc)) from None
        proposed.update({(name, p): r for p, r in layout.items()})
    print("Current partition replica assignment", file=out)
    print(reassignment_json(current), file=out)
    print("", file=out)
    print("Proposed partition reassignment configuration", file=out)
    print(reassignment_json(proposed), file=out)
    return 0


def _plan_file(args: argparse.Namespace) -> dict[TopicPartition, list[int]]:
    if not args.reassignment_json_file:
        raise UsageError(f"--{args.action} needs --reassignment-json-file")
    return reassignment_moves(read_json(args.reassignment_json_file, "Partition reassignment JSON"))


def execute(cluster: Cluster, args: argparse.Namespace, out: TextIO) -> int:
    moves = _plan_file(args)
    if not args.additional and cluster.ongoing():
        raise CliError(
            "Cannot execute because there is an existing partition assignment.  Use "
            "--additional to override this and create a new partition assignment in addition "
            "to the existing one."
        )
    current = _current(cluster, list(moves))
    print("Current partition replica assignment", file=out)
    print("", file=out)
    print(reassignment_json(current), file=out)
    print("", file=out)
    print("Save this to use as the --reassignment-json-file option during rollback", file=out)
    plan = Plan(moves, current)
    for plugin in PLUGINS:
        plugin.before_execute(args, cluster, plan, out)
    errors = cluster.alter(dict(moves))
    if errors:
        lines = [f"{tp_text(tp)}: {text}" for tp, text in sorted(errors.items())]
        raise CliError("Error reassigning partition(s): " + "; ".join(lines))
    for plugin in PLUGINS:
        plugin.after_execute(args, cluster.conf, plan, out)
    names = ",".join(tp_text(tp) for tp in sorted(moves))
    print(
        f"Successfully started partition reassignment{'' if len(moves) == 1 else 's'} for {names}",
        file=out,
    )
    return 0


def verify(cluster: Cluster, args: argparse.Namespace, out: TextIO) -> int:
    moves = _plan_file(args)
    ongoing = cluster.ongoing(sorted(moves))
    current = _current(cluster, list(moves))
    print("Status of partition reassignment:", file=out)
    for tp, target in sorted(moves.items()):
        name = tp_text(tp)
        if tp in ongoing:
            print(f"Reassignment of partition {name} is still in progress.", file=out)
        elif current.get(tp) == target:
            print(f"Reassignment of partition {name} is completed.", file=out)
        else:
            have = ",".join(map(str, current.get(tp, [])))
            print(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{have} rather than {','.join(map(str, target))}.",
                file=out,
            )
    for plugin in PLUGINS:
        plugin.after_verify(args, cluster.conf, Plan(moves, current), not ongoing, out)
    return 0


def cancel(cluster: Cluster, args: argparse.Namespace, out: TextIO) -> int:
    moves = _plan_file(args)
    ongoing = sorted(cluster.ongoing(sorted(moves)))
    if not ongoing:
        print("None of the specified partition reassignments are active.", file=out)
        return 0
    errors = cluster.alter(dict.fromkeys(ongoing))
    errors = {tp: e for tp, e in errors.items() if not e.startswith("NO_REASSIGNMENT_IN_PROGRESS")}
    if errors:
        lines = [f"{tp_text(tp)}: {text}" for tp, text in sorted(errors.items())]
        raise CliError("Error cancelling partition reassignment(s) for: " + "; ".join(lines))
    names = ",".join(tp_text(tp) for tp in ongoing)
    plural = "" if len(ongoing) == 1 else "s"
    print(f"Successfully cancelled partition reassignment{plural} for: {names}", file=out)
    return 0


_ACTIONS: dict[str, Callable[[Cluster, argparse.Namespace, TextIO], int]] = {
    "generate": generate,
    "execute": execute,
    "verify": verify,
    "cancel": cancel,
}


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    for plugin in PLUGINS:
        plugin.check_arguments(args)
    return _ACTIONS[args.action](Cluster(conf, args.request_timeout_ms), args, out)
