"""Admin through kafka-python 3.x's KafkaAdminClient: CreateTopics with configs, DescribeConfigs
(values, sources), CreatePartitions, DeleteTopics, AlterConfigs/IncrementalAlterConfigs,
DescribeCluster, and Kafka's error codes for bad requests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kafka.errors as Errors
import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import AlterConfigOp, ConfigResource, KafkaAdminClient
from kafka_support import (
    REPLICATION_FACTOR,
    STORAGE_NODES,
    ApiUsage,
    Rec,
    Recorded,
    consume_confluent,
    produce_confluent,
    split_bootstrap,
    unique_topic_name,
    wait_for_topic,
    wait_for_topic_gone,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kadmin(bootstrap: str, api_usage: ApiUsage) -> Iterator[KafkaAdminClient]:
    with api_usage.record("kafka-python"):
        client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    yield Recorded(client, api_usage, "kafka-python")  # type: ignore[misc]
    client.close()


@pytest.fixture
def names(admin: AdminClient) -> Iterator[list[str]]:
    """Topic names a test creates through kafka-python; deleted afterwards (best effort)."""
    created: list[str] = []
    yield created
    existing = [n for n in created if n in admin.list_topics(timeout=10).topics]
    if existing:
        for fut in admin.delete_topics(existing, operation_timeout=10).values():
            try:
                fut.result(timeout=20)
            except Exception:  # noqa: BLE001 - cleanup only
                pass


def _create(
    kadmin: KafkaAdminClient,
    names: list[str],
    hint: str,
    partitions: int = 3,
    configs: dict[str, str] | None = None,
    **kw: Any,
) -> str:
    name = unique_topic_name(hint)
    names.append(name)
    kadmin.create_topics(
        {
            name: {
                "num_partitions": partitions,
                "replication_factor": REPLICATION_FACTOR,
                "configs": configs or {},
            }
        },
        **kw,
    )
    return name


def _configs(kadmin: KafkaAdminClient, name: str) -> dict[str, dict[str, Any]]:
    res = kadmin.describe_configs([ConfigResource("TOPIC", name)], config_filter="all")
    return res["topic"][name]


def test_create_describe_alter_delete(
    kadmin: KafkaAdminClient, admin: AdminClient, names: list[str], bootstrap: str
) -> None:
    name = _create(
        kadmin,
        names,
        "kp-admin",
        configs={
            "retention.ms": "3600000",
            "cleanup.policy": "compact",
            "max.message.bytes": "2000000",
        },
    )
    wait_for_topic(admin, name, 3)
    assert name in kadmin.list_topics()
    (t,) = kadmin.describe_topics([name])
    assert t["error_code"] == 0 and len(t["partitions"]) == 3

    cfg = _configs(kadmin, name)
    assert cfg["retention.ms"]["value"] == "3600000"
    assert cfg["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert cfg["cleanup.policy"]["value"] == "compact"
    assert cfg["max.message.bytes"]["value"] == "2000000"
    assert cfg["segment.bytes"]["config_source"] in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG")
    assert cfg["min.compaction.lag.ms"]["value"] == "0"
    assert cfg["min.compaction.lag.ms"]["config_source"] == "DEFAULT_CONFIG"
    modified = kadmin.describe_configs([ConfigResource("TOPIC", name)])["topic"][name]
    assert set(modified) == {"retention.ms", "cleanup.policy", "max.message.bytes"}

    # IncrementalAlterConfigs (kafka-python picks it when the gateway advertises it)
    out = kadmin.alter_configs(
        [
            ConfigResource(
                "TOPIC",
                name,
                configs={
                    "retention.ms": "7200000",
                    "max.message.bytes": (AlterConfigOp.DELETE, None),
                },
            )
        ],
        incremental=True,
    )
    assert out == {"topic": {name: "OK"}}
    cfg = _configs(kadmin, name)
    assert cfg["retention.ms"]["value"] == "7200000"
    assert cfg["max.message.bytes"]["value"] == "1048588"
    assert cfg["max.message.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert cfg["cleanup.policy"]["value"] == "compact"

    # legacy AlterConfigs (kafka-python re-sends the other modified keys itself)
    out = kadmin.alter_configs(
        [ConfigResource("TOPIC", name, configs={"retention.ms": "900000"})], incremental=False
    )
    assert out == {"topic": {name: "OK"}}
    cfg = _configs(kadmin, name)
    assert cfg["retention.ms"]["value"] == "900000"
    assert cfg["cleanup.policy"]["value"] == "compact"

    # CreatePartitions, then the new partition takes records
    kadmin.create_partitions({name: 4})
    wait_for_topic(admin, name, 4)
    rec = Rec(3, b"k", b"in-new-partition", (), 1_700_000_000_000)
    assert produce_confluent(bootstrap, name, [rec]) == [(3, 0)]
    got = consume_confluent(bootstrap, name, [3], 1)
    assert [r.rec for r in got[3]] == [rec]

    # DeleteTopics
    res = kadmin.delete_topics([name])
    assert [t["error_code"] for t in res["topics"]] == [0]
    wait_for_topic_gone(admin, name)
    assert name not in kadmin.list_topics()


def test_error_codes(kadmin: KafkaAdminClient, admin: AdminClient, names: list[str]) -> None:
    name = _create(kadmin, names, "kp-errors")
    wait_for_topic(admin, name, 3)
    with pytest.raises(Errors.TopicAlreadyExistsError):
        kadmin.create_topics(
            {name: {"num_partitions": 3, "replication_factor": REPLICATION_FACTOR}}
        )
    with pytest.raises(Errors.InvalidConfigurationError):
        _create(kadmin, names, "kp-bad-config", configs={"retention.ms": "never"})
    with pytest.raises(Errors.InvalidReplicationFactorError):
        kadmin.create_topics(
            {
                unique_topic_name("kp-rf"): {
                    "num_partitions": 1,
                    "replication_factor": STORAGE_NODES + 1,
                }
            }
        )
    with pytest.raises(Errors.InvalidPartitionsError):
        kadmin.create_partitions({name: 2})
    with pytest.raises(Errors.InvalidPartitionsError):
        kadmin.create_partitions({name: 3})
    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        kadmin.create_partitions({unique_topic_name("kp-missing"): 5})
    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        kadmin.delete_topics([unique_topic_name("kp-missing")])
    # raise_errors=False reports per-topic codes instead
    res = kadmin.create_topics(
        {name: {"num_partitions": 3, "replication_factor": REPLICATION_FACTOR}}, raise_errors=False
    )
    assert [(t["name"], t["error_code"]) for t in res["topics"]] == [(name, 36)]
    assert len(admin.list_topics(name, timeout=10).topics[name].partitions) == 3


def test_validate_only(kadmin: KafkaAdminClient, admin: AdminClient, names: list[str]) -> None:
    name = _create(
        kadmin, names, "kp-validate", configs={"retention.ms": "60000"}, validate_only=True
    )
    assert name not in admin.list_topics(timeout=10).topics
    with pytest.raises(Errors.InvalidConfigurationError):
        _create(
            kadmin, names, "kp-validate-bad", configs={"cleanup.policy": "nope"}, validate_only=True
        )


def test_describe_cluster(kadmin: KafkaAdminClient, bootstrap: str) -> None:
    desc = kadmin.describe_cluster()
    host, port = split_bootstrap(bootstrap)
    assert desc["cluster_id"]
    addrs = {(b["host"], b["port"]) for b in desc["brokers"]}
    assert (host, port) in addrs
    assert desc["controller_id"] in {b["broker_id"] for b in desc["brokers"]}


def test_delete_records(
    kadmin: KafkaAdminClient, admin: AdminClient, names: list[str], bootstrap: str
) -> None:
    """kafka-python's delete_records moves the log start offset; consumers start there."""
    name = _create(kadmin, names, "kp-delete-records", partitions=2)
    wait_for_topic(admin, name, 2)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(6):
        producer.send(name, value=b"v%d" % i, partition=i % 2)
    producer.flush(30)
    producer.close()
    result = kadmin.delete_records({TopicPartition(name, 0): 2, TopicPartition(name, 1): -1})
    assert {tp.partition: r["low_watermark"] for tp, r in result.items()} == {0: 2, 1: 3}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        parts = [TopicPartition(name, 0), TopicPartition(name, 1)]
        assert consumer.beginning_offsets(parts) == dict(zip(parts, [2, 3], strict=True))
    finally:
        consumer.close()
