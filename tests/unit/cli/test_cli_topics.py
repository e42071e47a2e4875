"""`kafka-py topics` against a fake AdminClient: options, output format, error handling."""

from __future__ import annotations

import argparse
import io
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Uuid
from confluent_kafka.admin import ConfigEntry, ConfigSource

from services.cli import topics
from services.cli.common import CliError, UsageError
from services.cli.main import build_parser
from services.cli.topics import PartitionReport, TopicView, format_description
from services.cli.zk_view import PartitionState


def PartitionView(  # noqa: N802 - reads like the dataclass it builds
    partition: int,
    leader: int | None,
    replicas: list[int],
    isr: list[int],
    adding: list[int] | None = None,
    removing: list[int] | None = None,
) -> PartitionState:
    return PartitionState(partition, leader, replicas, isr, adding or [], removing or [])


def _done(value: Any = None, error: KafkaError | None = None) -> Future[Any]:
    fut: Future[Any] = Future()
    if error is not None:
        fut.set_exception(KafkaException(error))
    else:
        fut.set_result(value)
    return fut


class _Node:
    def __init__(self, node_id: int) -> None:
        self.id = node_id


class _Part:
    def __init__(self, pid: int, leader: int | None, replicas: list[int], isr: list[int]) -> None:
        self.id = pid
        self.leader = _Node(leader) if leader is not None else None
        self.replicas = [_Node(r) for r in replicas]
        self.isr = [_Node(r) for r in isr]


class _Desc:
    def __init__(self, name: str, parts: list[_Part]) -> None:
        self.name = name
        self.topic_id = Uuid(-1234567, 987654321)
        self.partitions = parts


class _Metadata:
    def __init__(self, names: list[str]) -> None:
        self.topics = {n: object() for n in names}


class FakeAdmin:
    def __init__(self, topics_: dict[str, list[_Part]]) -> None:
        self.topics = topics_
        self.calls: list[tuple[str, Any]] = []
        self.create_error: KafkaError | None = None
        self.incremental_supported = True
        self.configs = {
            "cleanup.policy": ConfigEntry(
                "cleanup.policy",
                "compact",
                source=ConfigSource.DYNAMIC_TOPIC_CONFIG,
                is_default=False,
            ),
            "retention.ms": ConfigEntry(
                "retention.ms", "604800000", source=ConfigSource.DEFAULT_CONFIG, is_default=True
            ),
        }

    def list_topics(self, timeout: float) -> _Metadata:
        return _Metadata(list(self.topics))

    def create_topics(self, new: list[Any], **kw: Any) -> dict[str, Future[Any]]:
        self.calls.append(("create", new[0]))
        return {new[0].topic: _done(None, self.create_error)}

    def describe_topics(self, coll: Any, **kw: Any) -> dict[str, Future[Any]]:
        return {n: _done(_Desc(n, self.topics[n])) for n in coll.topic_names}

    def describe_configs(self, resources: list[Any], **kw: Any) -> dict[Any, Future[Any]]:
        return {r: _done(dict(self.configs)) for r in resources}

    def create_partitions(self, new: list[Any], **kw: Any) -> dict[str, Future[Any]]:
        self.calls.append(("partitions", (new[0].topic, new[0].new_total_count)))
        return {new[0].topic: _done()}

    def incremental_alter_configs(self, resources: list[Any], **kw: Any) -> dict[Any, Future[Any]]:
        if not self.incremental_supported:
            return {resources[0]: _done(None, KafkaError(KafkaError.UNSUPPORTED_VERSION))}
        ops = [
            (e.name, e.value, e.incremental_operation.name)
            for e in resources[0].incremental_configs
        ]
        self.calls.append(("incremental", ops))
        return {resources[0]: _done()}

    def alter_configs(self, resources: list[Any], **kw: Any) -> dict[Any, Future[Any]]:
        self.calls.append(("legacy", dict(resources[0].set_config_dict)))
        return {resources[0]: _done()}

    def delete_topics(self, names: list[str], **kw: Any) -> dict[str, Future[Any]]:
        self.calls.append(("delete", names))
        return {names[0]: _done()}


def _run(admin: FakeAdmin, *argv: str) -> tuple[int, str]:
    args = build_parser().parse_args(["topics", *argv])
    args.request_timeout_ms = args.request_timeout_ms or 1000
    out = io.StringIO()
    code = topics.run(args, {}, out, admin_factory=lambda conf: admin)
    return code, out.getvalue()


def test_format_description_matches_kafka_topics() -> None:
    view = TopicView(
        "t",
        "AAAAAAAAAHsAAAAAAAAByA",
        [
            PartitionView(1, None, [1, 2], [2]),
            PartitionView(0, 0, [0, 1], [0, 1]),
        ],
        {"segment.bytes": "1024", "cleanup.policy": "compact"},
    )
    assert format_description(view) == [
        "Topic: t\tTopicId: AAAAAAAAAHsAAAAAAAAByA\tPartitionCount: 2\tReplicationFactor: 2"
        "\tConfigs: cleanup.policy=compact,segment.bytes=1024",
        "\tTopic: t\tPartition: 0\tLeader: 0\tReplicas: 0,1\tIsr: 0,1",
        "\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 1,2\tIsr: 2",
    ]
    zero = TopicView("u", topics.ZERO_TOPIC_ID, [], {})
    assert format_description(zero) == [
        "Topic: u\tPartitionCount: 0\tReplicationFactor: 0\tConfigs: "
    ]


def test_format_description_reassignment_and_deletion() -> None:
    view = TopicView(
        "t", None, [PartitionView(0, 1, [1, 2, 3], [1, 2], adding=[3], removing=[])], {}, True
    )
    assert format_description(view) == [
        "Topic: t\tPartitionCount: 1\tReplicationFactor: 2\tConfigs: \tMarkedForDeletion: true",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2"
        "\tAdding Replicas: 3\tRemoving Replicas: \tMarkedForDeletion: true",
    ]


def test_partition_reports_follow_kafka_topics_describe_options() -> None:
    live = frozenset({0, 1})
    full = PartitionView(0, 0, [0, 1, 2], [0, 1, 2])
    short = PartitionView(1, 0, [0, 1, 2], [0, 1])
    dead_leader = PartitionView(2, 2, [2, 1], [2])
    leaderless = PartitionView(3, None, [2], [2])
    parts = [full, short, dead_leader, leaderless]

    def picked(report: PartitionReport, min_isr: int | None = 2) -> list[int]:
        return [p.partition for p in parts if report.wants(p, min_isr, live)]

    assert picked(PartitionReport()) == [0, 1, 2, 3]
    assert picked(PartitionReport(under_replicated=True)) == [1, 2]
    assert picked(PartitionReport(unavailable=True)) == [2, 3]
    assert picked(PartitionReport(under_min_isr=True)) == [2, 3]
    assert picked(PartitionReport(at_min_isr=True)) == [1]
    assert picked(PartitionReport(at_min_isr=True), min_isr=None) == []
    overrides = PartitionReport(topics_with_overrides=True)
    assert overrides.describe_configs and not overrides.describe_partitions
    assert not PartitionReport(unavailable=True).describe_configs


def test_describe_report_options_are_exclusive() -> None:
    with pytest.raises(UsageError, match="not allowed with"):
        _run(FakeAdmin({}), "describe", "--under-replicated-partitions", "--at-min-isr-partitions")


def test_describe_missing_topic() -> None:
    with pytest.raises(CliError, match="topic 'nope' does not exist"):
        _run(FakeAdmin({}), "describe", "--topic", "nope")
    assert _run(FakeAdmin({}), "describe", "--topic", "nope", "--if-exists") == (0, "")


def test_create_builds_new_topic() -> None:
    admin = FakeAdmin({})
    code, out = _run(
        admin,
        "create",
        "--topic",
        "t",
        "--partitions",
        "3",
        "--replication-factor",
        "2",
        "--config",
        "cleanup.policy=compact",
        "--config",
        "segment.ms=1000",
    )
    assert (code, out) == (0, "Created topic t.\n")
    new = admin.calls[0][1]
    assert (new.topic, new.num_partitions, new.replication_factor) == ("t", 3, 2)
    assert new.config == {"cleanup.policy": "compact", "segment.ms": "1000"}
    _run(admin, "create", "--topic", "d")
    assert (admin.calls[1][1].num_partitions, admin.calls[1][1].replication_factor) == (-1, -1)
    _run(admin, "create", "--topic", "r", "--replica-assignment", "0:1,1:2")
    assert admin.calls[2][1].replica_assignment == [[0, 1], [1, 2]]
    assert admin.calls[2][1].num_partitions == 2


def test_create_existing_topic() -> None:
    admin = FakeAdmin({})
    admin.create_error = KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "Topic 't' already exists.")
    with pytest.raises(CliError, match="TOPIC_ALREADY_EXISTS: Topic 't' already exists"):
        _run(admin, "create", "--topic", "t")
    assert _run(admin, "create", "--topic", "t", "--if-not-exists") == (0, "")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--replica-assignment", "0:1", "--partitions", "2"], "cannot be used with"),
        (["--partitions", "0"], "at least 1"),
        (["--replication-factor", "0"], "between 1 and 32767"),
    ],
)
def test_create_rejects_bad_combinations(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _run(FakeAdmin({}), "create", "--topic", "t", *argv)


def test_replica_assignment_parsing() -> None:
    assert topics.replica_assignment("0:1:2,1:2:0") == [[0, 1, 2], [1, 2, 0]]
    assert topics.replica_assignment("3") == [[3]]
    for bad in ("0:x", "0:0", "0:1,2"):
        with pytest.raises(argparse.ArgumentTypeError):
            topics.replica_assignment(bad)


def test_list_sorted_and_filtered() -> None:
    admin = FakeAdmin({"b": [], "a": [], "__consumer_offsets": []})
    assert _run(admin, "list")[1] == "__consumer_offsets\na\nb\n"
    assert _run(admin, "list", "--exclude-internal")[1] == "a\nb\n"
    # --topic is a name or a regular expression over whole names (commas = alternatives)
    assert _run(admin, "list", "--topic", "a")[1] == "a\n"
    assert _run(admin, "list", "--topic", "[ab]")[1] == "a\nb\n"
    assert _run(admin, "list", "--topic", "b,__.*", "--exclude-internal")[1] == "b\n"
    assert _run(admin, "list", "--topic", "ab?")[1] == "a\n"
    with pytest.raises(UsageError, match="not a valid regular expression"):
        _run(admin, "list", "--topic", "(")


def test_alter_partitions_and_configs() -> None:
    admin = FakeAdmin({"t": []})
    assert _run(
        admin,
        "alter",
        "--topic",
        "t",
        "--partitions",
        "6",
        "--config",
        "retention.ms=5",
        "--delete-config",
        "cleanup.policy",
    ) == (0, "")
    assert admin.calls == [
        ("partitions", ("t", 6)),
        ("incremental", [("retention.ms", "5", "SET"), ("cleanup.policy", None, "DELETE")]),
    ]


def test_alter_configs_falls_back_to_legacy_alter_configs() -> None:
    admin = FakeAdmin({"t": []})
    admin.incremental_supported = False
    _run(admin, "alter", "--topic", "t", "--config", "retention.ms=5")
    assert admin.calls == [("legacy", {"cleanup.policy": "compact", "retention.ms": "5"})]
    admin.calls.clear()
    _run(admin, "alter", "--topic", "t", "--delete-config", "cleanup.policy")
    assert admin.calls == [("legacy", {})]


def test_alter_needs_something_and_an_existing_topic() -> None:
    with pytest.raises(UsageError, match="needs --partitions"):
        _run(FakeAdmin({"t": []}), "alter", "--topic", "t")
    with pytest.raises(CliError, match="does not exist"):
        _run(FakeAdmin({}), "alter", "--topic", "t", "--partitions", "2")


def test_delete() -> None:
    admin = FakeAdmin({"t": []})
    assert _run(admin, "delete", "--topic", "t") == (0, "")
    assert admin.calls == [("delete", ["t"])]
    with pytest.raises(CliError, match="does not exist"):
        _run(FakeAdmin({}), "delete", "--topic", "t")
    assert _run(FakeAdmin({}), "delete", "--topic", "t", "--if-exists") == (0, "")
