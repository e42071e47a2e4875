"""Admin through confluent-kafka's AdminClient (librdkafka): CreateTopics with configs,
DescribeConfigs (values and sources), CreatePartitions, DeleteTopics, IncrementalAlterConfigs,
AlterConfigs, DescribeCluster, the error cases Kafka defines, and auto-creation on produce."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka_support import (
    NUM_PARTITIONS,
    REPLICATION_FACTOR,
    STORAGE_NODES,
    ApiUsage,
    Rec,
    TopicFactory,
    consume_confluent,
    produce_confluent,
    split_bootstrap,
    unique_topic_name,
    wait_for_topic,
    wait_for_topic_gone,
)

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _record_usage(api_usage: ApiUsage) -> Iterator[None]:
    with api_usage.record("confluent-kafka"):  # every client in this module is librdkafka
        yield


CORE_TOPIC_CONFIGS = {
    "cleanup.policy",
    "compression.type",
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "segment.ms",
    "max.message.bytes",
    "min.insync.replicas",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "delete.retention.ms",
    "min.compaction.lag.ms",
}


def error_code(fut: Future[Any]) -> int:
    """The Kafka error code a failed admin future carries (fails if it succeeded)."""
    exc = fut.exception(timeout=60)
    assert exc is not None, "the operation succeeded but an error was expected"
    assert isinstance(exc, KafkaException), repr(exc)
    err = exc.args[0]
    assert isinstance(err, KafkaError), repr(err)
    return err.code()


def describe(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([res], request_timeout=30)[res].result(timeout=60)


def create(admin: AdminClient, topic: NewTopic, **kw: object) -> Future[None]:
    return admin.create_topics([topic], operation_timeout=30, request_timeout=40, **kw)[topic.topic]


def test_create_with_configs_and_describe_sources(admin: AdminClient, topic: TopicFactory) -> None:
    name = topic(
        config={
            "retention.ms": "3600000",
            "cleanup.policy": "compact",
            "max.message.bytes": "2000000",
        }
    )
    cfg = describe(admin, name)
    assert CORE_TOPIC_CONFIGS <= set(cfg), f"missing {CORE_TOPIC_CONFIGS - set(cfg)}"
    for key, value in (
        ("retention.ms", "3600000"),
        ("cleanup.policy", "compact"),
        ("max.message.bytes", "2000000"),
    ):
        assert cfg[key].value == value, (key, cfg[key].value)
        assert cfg[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, (key, cfg[key].source)
        assert not cfg[key].is_default
    for key, value in (
        ("min.compaction.lag.ms", "0"),
        ("message.timestamp.type", "CreateTime"),
        ("unclean.leader.election.enable", "false"),
    ):
        assert cfg[key].value == value, (key, cfg[key].value)
        assert cfg[key].source == ConfigSource.DEFAULT_CONFIG.value, (key, cfg[key].source)
        assert cfg[key].is_default


def test_add_partitions_then_produce_to_new_partition(
    admin: AdminClient, topic: TopicFactory, bootstrap: str
) -> None:
    name = topic(3)
    fut = admin.create_partitions([NewPartitions(name, 5)], operation_timeout=30)[name]
    fut.result(timeout=60)
    wait_for_topic(admin, name, 5)
    recs = [
        Rec(
            p,
            f"k{p}".encode(),
            f"new-partition-{p}".encode(),
            (("h", b"v"),),
            1_700_000_000_000 + p,
        )
        for p in (3, 4)
    ]
    delivered = produce_confluent(bootstrap, name, recs)
    assert delivered == [(3, 0), (4, 0)]
    got = consume_confluent(bootstrap, name, [0, 1, 2, 3, 4], 2)
    assert [r.rec for r in got[3]] == [recs[0]]
    assert [r.rec for r in got[4]] == [recs[1]]
    assert not any(got[p] for p in (0, 1, 2))


def test_delete_topic_removes_it_from_metadata(
    admin: AdminClient, topic: TopicFactory, bootstrap: str
) -> None:
    name = topic()
    old = [Rec(i % 3, b"old", b"old-%d" % i, (), 1_700_000_000_000 + i) for i in range(30)]
    produce_confluent(bootstrap, name, old)
    admin.delete_topics([name], operation_timeout=30)[name].result(timeout=60)
    wait_for_topic_gone(admin, name)
    # the name can be reused, and the new topic starts empty: none of the old data comes back
    fresh = create(admin, NewTopic(name, 2, REPLICATION_FACTOR))
    fresh.result(timeout=60)
    wait_for_topic(admin, name, 2)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "recreate-probe"})
    try:
        for p in (0, 1):
            assert probe.get_watermark_offsets(TopicPartition(name, p), timeout=10) == (0, 0)
    finally:
        probe.close()
    new = [Rec(p, b"new", b"new-%d" % p, (), 1_700_000_000_100 + p) for p in (0, 1)]
    assert produce_confluent(bootstrap, name, new) == [(0, 0), (1, 0)]
    got = consume_confluent(bootstrap, name, [0, 1], 2)
    assert [r.rec for r in got[0]] == [new[0]] and [r.rec for r in got[1]] == [new[1]]
    admin.delete_topics([name], operation_timeout=30)[name].result(timeout=60)


def test_duplicate_create_is_topic_already_exists(admin: AdminClient, topic: TopicFactory) -> None:
    name = topic()
    assert error_code(create(admin, NewTopic(name, 3, REPLICATION_FACTOR))) == (
        KafkaError.TOPIC_ALREADY_EXISTS
    )


@pytest.mark.parametrize(
    "config",
    [
        {"retention.ms": "not-a-number"},
        {"cleanup.policy": "shred"},
        {"no.such.config": "1"},
        {"min.insync.replicas": "0"},
    ],
)
def test_bad_config_is_invalid_config(admin: AdminClient, config: dict[str, str]) -> None:
    name = unique_topic_name("bad-config")
    assert error_code(create(admin, NewTopic(name, 3, REPLICATION_FACTOR, config=config))) == (
        KafkaError.INVALID_CONFIG
    )
    assert name not in admin.list_topics(timeout=10).topics


def test_replication_factor_above_storage_nodes(admin: AdminClient) -> None:
    name = unique_topic_name("rf-too-high")
    fut = create(admin, NewTopic(name, 3, STORAGE_NODES + 1))
    assert error_code(fut) == KafkaError.INVALID_REPLICATION_FACTOR
    assert name not in admin.list_topics(timeout=10).topics


def test_zero_partitions_is_invalid_partitions(admin: AdminClient) -> None:
    name = unique_topic_name("zero-partitions")
    assert error_code(create(admin, NewTopic(name, 0, REPLICATION_FACTOR))) == (
        KafkaError.INVALID_PARTITIONS
    )


def test_invalid_topic_name(admin: AdminClient) -> None:
    fut = create(admin, NewTopic("bad/name" + unique_topic_name(""), 1, REPLICATION_FACTOR))
    assert error_code(fut) == KafkaError.TOPIC_EXCEPTION


@pytest.mark.parametrize("count", [2, 3])
def test_decreasing_or_same_partitions_is_invalid(
    admin: AdminClient, topic: TopicFactory, count: int
) -> None:
    name = topic(3)
    fut = admin.create_partitions([NewPartitions(name, count)], operation_timeout=30)[name]
    assert error_code(fut) == KafkaError.INVALID_PARTITIONS
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 3


def test_validate_only_creates_nothing(admin: AdminClient) -> None:
    name = unique_topic_name("validate-only")
    create(
        admin,
        NewTopic(name, 3, REPLICATION_FACTOR, config={"retention.ms": "60000"}),
        validate_only=True,
    ).result(timeout=60)
    assert name not in admin.list_topics(timeout=10).topics
    # validation still reports errors
    bad = NewTopic(name, 3, REPLICATION_FACTOR, config={"retention.ms": "x"})
    assert error_code(create(admin, bad, validate_only=True)) == KafkaError.INVALID_CONFIG
    assert name not in admin.list_topics(timeout=10).topics


def test_auto_creation_on_first_produce(admin: AdminClient, bootstrap: str) -> None:
    name = unique_topic_name("auto-created")
    assert name not in admin.list_topics(timeout=10).topics
    errors: list[str] = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "allow.auto.create.topics": True,
            "message.timeout.ms": 30000,
        }
    )
    p.produce(
        name,
        value=b"first",
        key=b"k",
        on_delivery=lambda err, msg: errors.append(str(err)) if err else None,
    )
    assert p.flush(40) == 0
    assert not errors, errors
    wait_for_topic(admin, name, NUM_PARTITIONS)
    got = consume_confluent(bootstrap, name, list(range(NUM_PARTITIONS)), 1)
    assert [r.rec.value for rs in got.values() for r in rs] == [b"first"]
    admin.delete_topics([name], operation_timeout=30)[name].result(timeout=60)


def test_describe_cluster_lists_the_gateway(admin: AdminClient, bootstrap: str) -> None:
    desc = admin.describe_cluster(request_timeout=30).result(timeout=60)
    host, port = split_bootstrap(bootstrap)
    assert desc.cluster_id, "no cluster id"
    addrs = {(n.host, n.port) for n in desc.nodes}
    assert (host, port) in addrs, f"gateway {bootstrap} not among {addrs}"
    assert desc.controller is not None
    assert desc.controller.id in {n.id for n in desc.nodes}, (
        "the controller id must be one of the listed nodes (clients connect to it)"
    )
    md = admin.list_topics(timeout=10)
    assert md.cluster_id == desc.cluster_id
    assert {(b.host, b.port) for b in md.brokers.values()} == addrs


def test_incremental_alter_configs(admin: AdminClient, topic: TopicFactory) -> None:
    name = topic(config={"retention.ms": "3600000", "max.message.bytes": "2000000"})
    res = ConfigResource(
        ResourceType.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
        ],
    )
    admin.incremental_alter_configs([res], request_timeout=30)[res].result(timeout=60)
    cfg = describe(admin, name)
    assert (cfg["retention.ms"].value, cfg["retention.ms"].source) == (
        "7200000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    )
    assert (cfg["max.message.bytes"].value, cfg["max.message.bytes"].source) == (
        "1048588",
        ConfigSource.DEFAULT_CONFIG.value,
    )
    assert (cfg["cleanup.policy"].value, cfg["cleanup.policy"].source) == (
        "delete,compact",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    )

    bad = ConfigResource(
        ResourceType.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    assert error_code(admin.incremental_alter_configs([bad])[bad]) == KafkaError.INVALID_CONFIG
    assert describe(admin, name)["retention.ms"].value == "7200000"


@pytest.mark.filterwarnings(
    "ignore:alter_configs has been deprecated"
)  # the legacy API, on purpose
def test_alter_configs_replaces_the_override_set(admin: AdminClient, topic: TopicFactory) -> None:
    """AlterConfigs (non-incremental) sets exactly the given overrides; others revert."""
    name = topic(config={"max.message.bytes": "2000000"})
    res = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.ms": "1000000"})
    admin.alter_configs([res], request_timeout=30)[res].result(timeout=60)
    cfg = describe(admin, name)
    assert (cfg["retention.ms"].value, cfg["retention.ms"].source) == (
        "1000000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    )
    assert (cfg["max.message.bytes"].value, cfg["max.message.bytes"].source) == (
        "1048588",
        ConfigSource.DEFAULT_CONFIG.value,
    )


def test_configs_of_unknown_topic(admin: AdminClient) -> None:
    res = ConfigResource(ResourceType.TOPIC, unique_topic_name("never-created"))
    fut = admin.describe_configs([res], request_timeout=30)[res]
    assert error_code(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_compacted_topic_refuses_records_without_key(topic: TopicFactory, bootstrap: str) -> None:
    """As Kafka does: a topic with cleanup.policy=compact refuses a batch with a record that
    has no key (INVALID_RECORD) and appends nothing of it; keyed records go in."""
    name = topic(config={"cleanup.policy": "compact"})
    outcomes: dict[int, KafkaError | None] = {}

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        outcomes[msg.partition()] = err  # type: ignore[attr-defined]

    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0, "compression.type": "lz4"}
    )
    p.produce(name, key=b"k1", value=b"v1", partition=0, on_delivery=on_delivery)
    p.produce(name, key=None, value=b"no key", partition=1, on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert outcomes[0] is None, outcomes
    assert outcomes[1] is not None and outcomes[1].code() == KafkaError.INVALID_RECORD, outcomes
    got = consume_confluent(bootstrap, name, [0, 1, 2], 1)
    assert [(r.rec.key, r.rec.value) for r in got[0]] == [(b"k1", b"v1")]
    assert got[1] == [] and got[2] == []


def _produce_counts(bootstrap: str, name: str, counts: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(name, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
    assert p.flush(30) == 0


def test_delete_records(admin: AdminClient, topic: TopicFactory, bootstrap: str) -> None:
    """DeleteRecords (kafka-delete-records.sh) on a replicated topic: the log start offset moves
    up to the given offset (-1 = the high watermark), consumers start there, and offsets
    beyond the high watermark are OFFSET_OUT_OF_RANGE."""
    name = topic(3)
    _produce_counts(bootstrap, name, {0: 10, 1: 5, 2: 3})
    futures = admin.delete_records(
        [TopicPartition(name, 0, 4), TopicPartition(name, 1, -1)],
        request_timeout=30,
        operation_timeout=30,
    )
    low = {tp.partition: f.result(timeout=60).low_watermark for tp, f in futures.items()}
    assert low == {0: 4, 1: 5}
    (beyond,) = admin.delete_records([TopicPartition(name, 2, 4)], request_timeout=30).values()
    assert error_code(beyond) == KafkaError.OFFSET_OUT_OF_RANGE
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verifier-{name}"})
    try:
        marks = {
            p: consumer.get_watermark_offsets(TopicPartition(name, p), timeout=30) for p in range(3)
        }
    finally:
        consumer.close()
    assert marks == {0: (4, 10), 1: (5, 5), 2: (0, 3)}
    got = consume_confluent(bootstrap, name, [0, 1, 2], 9)
    assert [r.offset for r in got[0]] == list(range(4, 10))
    assert got[1] == [] and [r.offset for r in got[2]] == [0, 1, 2]
    # deleting below the current start changes nothing
    (again,) = admin.delete_records([TopicPartition(name, 0, 2)], request_timeout=30).values()
    assert again.result(timeout=60).low_watermark == 4


def test_delete_records_on_a_compacted_topic_is_a_policy_violation(
    admin: AdminClient, topic: TopicFactory, bootstrap: str
) -> None:
    compacted = topic(1, config={"cleanup.policy": "compact"})
    _produce_counts(bootstrap, compacted, {0: 2})
    (policy,) = admin.delete_records([TopicPartition(compacted, 0, 1)], request_timeout=30).values()
    assert error_code(policy) == KafkaError.POLICY_VIOLATION
    # (librdkafka answers an unknown topic itself, _NOENT, without asking the broker: the
    # gateway's UNKNOWN_TOPIC_OR_PARTITION is checked in tests/unit/gateway/test_delete_records.py)


def test_max_message_bytes_is_enforced(
    admin: AdminClient, topic: TopicFactory, bootstrap: str
) -> None:
    """A batch larger than the topic's max.message.bytes is refused with MESSAGE_TOO_LARGE;
    raising the limit with IncrementalAlterConfigs lets the same record in."""
    name = topic(config={"max.message.bytes": "10000"})
    outcomes: dict[int, KafkaError | None] = {}

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        outcomes[msg.partition()] = err  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    p.produce(name, value=b"s" * 2_000, partition=0, on_delivery=on_delivery)
    p.produce(name, value=b"L" * 20_000, partition=1, on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert outcomes[0] is None, outcomes
    assert outcomes[1] is not None and outcomes[1].code() == KafkaError.MSG_SIZE_TOO_LARGE, outcomes

    res = ConfigResource(
        ResourceType.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "100000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([res])[res].result(timeout=60)
    # storage nodes apply config changes asynchronously (as Kafka brokers do): allow a moment
    deadline = time.monotonic() + 10
    while True:
        outcomes.clear()
        p.produce(name, value=b"L" * 20_000, partition=1, on_delivery=on_delivery)
        assert p.flush(30) == 0
        if outcomes[1] is None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert outcomes == {1: None}, outcomes
    got = consume_confluent(bootstrap, name, [0, 1, 2], 2)
    assert [len(r.rec.value or b"") for r in got[0]] == [2_000]
    assert [len(r.rec.value or b"") for r in got[1]] == [20_000]


def test_elect_leaders_where_the_preferred_replicas_lead(
    admin: AdminClient, topic: TopicFactory
) -> None:
    """ElectLeaders (kafka-leader-election.sh) on a healthy cluster: the preferred replicas lead
    already, so nothing needs an election, either kind. Elections that move leaders are in
    tests/e2e/test_replication_failover.py and tests/integration/test_controller_inprocess.py."""
    name = topic(2)
    named = [TopicPartition(name, 0), TopicPartition(name, 1), TopicPartition(name, 7)]
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        result = admin.elect_leaders(election, named).result(timeout=60)
        assert {tp.partition: e.code() for tp, e in result.items()} == {
            0: KafkaError.ELECTION_NOT_NEEDED,
            1: KafkaError.ELECTION_NOT_NEEDED,
            7: KafkaError.UNKNOWN_TOPIC_OR_PART,
        }
