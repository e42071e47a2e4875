"""Issue 19: every group's first commit over one admin connection on a fresh cluster.

librdkafka's admin client retries a FindCoordinator answered COORDINATOR_NOT_AVAILABLE twice,
~0.3 s in all, then parks the request until some broker connection changes state: on a fresh
cluster, where ``__consumer_offsets`` is created and placed by the first lookup, such an
AlterConsumerGroupOffsets waited for its whole timeout without its OffsetCommit ever being sent.
The gateway now holds a lookup until the coordinator is available (bounded by
``kafkapy.coordinator.lookup.wait.ms``), so the very first lookup is answered with it."""

from __future__ import annotations

from concurrent.futures import wait
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, NewTopic

from bench.scale.groups import send_commits
from services.common.protocol import ApiKey
from tests.integration.kafka_support import RawClient, running_cluster

GROUPS = 40
PARTITIONS = 8


def test_first_lookup_and_first_commits_on_a_fresh_cluster(tmp_path: Path) -> None:
    # the default bound (3 s) is shorter than __consumer_offsets' creation can take on a
    # loaded 2-core CI machine; the bound itself is unit-tested (test_find_coordinator.py)
    wait_flags = ["--kafkapy.coordinator.lookup.wait.ms", "25000"]
    with running_cluster(tmp_path, extra={"gateway": wait_flags}) as cluster:
        raw = RawClient(cluster.bootstrap)
        try:  # the very first request of the cluster: __consumer_offsets does not exist
            first = raw.call(ApiKey.FIND_COORDINATOR, 3, {"key": "first-0", "key_type": 0})
        finally:
            raw.close()
        assert first["error_code"] == 0, first
        assert first["port"] == cluster.gateway_ports[0]

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = "first-lookup"
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
        names = [f"first-{i}" for i in range(GROUPS)]
        futures = [f for f, _ in send_commits([admin], names, topic, PARTITIONS, 7, 30)]
        wait(futures, timeout=60)
        for fut in futures:
            result = fut.result(timeout=0)
            assert [tp.error for tp in result.topic_partitions] == [None] * PARTITIONS
        (read,) = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(f"first-{GROUPS - 1}")], request_timeout=30
        ).values()
        assert {tp.partition: tp.offset for tp in read.result(30).topic_partitions} == {
            p: 7 for p in range(PARTITIONS)
        }
