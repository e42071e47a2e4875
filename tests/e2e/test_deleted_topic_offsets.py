"""Committed offsets of a deleted topic are removed, as Kafka's GroupMetadataManager does on
topic deletion: tombstones in ``__consumer_offsets``, so they stay gone after the group
coordinators restart, even when no coordinator was running while the topic was deleted, and a
topic created again with the same name starts without them."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from services.cli.local_cluster import LocalCluster
from tests.integration.kafka_support import wait_for, wait_for_topic, wait_for_topic_gone

pytestmark = pytest.mark.e2e

ROLE = "group_coordinator"
OFFSET_INVALID = -1001  # librdkafka: no committed offset


def create(admin: AdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, partitions, 3)])[name].result(timeout=60)
    wait_for_topic(admin, name, partitions)


def delete(admin: AdminClient, name: str) -> None:
    admin.delete_topics([name], operation_timeout=30)[name].result(timeout=60)
    wait_for_topic_gone(admin, name)


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        result = c.commit(offsets=tps, asynchronous=False)
        assert result is not None and all(tp.error is None for tp in result), result
    finally:
        c.close()


def listed(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    """ListConsumerGroupOffsets of every partition the group has (OffsetFetch, topics null)."""
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {(tp.topic, tp.partition): tp.offset for tp in fut.result(timeout=30).topic_partitions}


def committed(bootstrap: str, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """OffsetFetch of named partitions."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(t, p) for t, p in tps], timeout=30)
        return {(tp.topic, tp.partition): tp.offset for tp in got}
    finally:
        c.close()


def restart_coordinators(cluster: LocalCluster) -> None:
    for i in range(2):
        cluster.kill(ROLE, i)
    for i in range(2):
        cluster.start_process(ROLE, i, timeout=90)


def test_offsets_of_a_deleted_topic_are_removed(fault_cluster: LocalCluster) -> None:
    cluster = fault_cluster
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create(admin, "doomed", 3)
    create(admin, "survivor", 1)
    create(admin, "unseen", 2)
    commit(bootstrap, "g1", {("doomed", 0): 10, ("doomed", 1): 11, ("survivor", 0): 12})
    commit(bootstrap, "g2", {("doomed", 2): 20})
    commit(bootstrap, "g3", {("unseen", 0): 30, ("unseen", 1): 31, ("survivor", 0): 32})
    assert listed(admin, "g1") == {("doomed", 0): 10, ("doomed", 1): 11, ("survivor", 0): 12}
    assert listed(admin, "g2") == {("doomed", 2): 20}

    # 1. deleted while the coordinators run: they learn it from ZooKeeper and tombstone
    delete(admin, "doomed")
    wait_for("g1 keeps only survivor", lambda: listed(admin, "g1") == {("survivor", 0): 12})
    wait_for("g2 has no offsets left", lambda: listed(admin, "g2") == {})
    doomed = [("doomed", p) for p in range(3)]
    assert set(committed(bootstrap, "g1", doomed).values()) == {OFFSET_INVALID}

    # 2. deleted while no coordinator runs: the shard's next owner removes them when it loads
    for i in range(2):
        cluster.kill(ROLE, i)
    delete(admin, "unseen")
    for i in range(2):
        cluster.start_process(ROLE, i, timeout=90)
    wait_for("g3 keeps only survivor", lambda: listed(admin, "g3") == {("survivor", 0): 32})

    # 3. the tombstones are in __consumer_offsets: a replay does not bring anything back
    restart_coordinators(cluster)
    assert listed(admin, "g1") == {("survivor", 0): 12}
    assert listed(admin, "g2") == {}
    assert listed(admin, "g3") == {("survivor", 0): 32}

    # 4. a topic created again with the same name starts without offsets
    create(admin, "doomed", 3)
    create(admin, "unseen", 2)
    assert listed(admin, "g1") == {("survivor", 0): 12}
    assert listed(admin, "g2") == {}
    assert set(committed(bootstrap, "g1", doomed).values()) == {OFFSET_INVALID}
    assert set(committed(bootstrap, "g3", [("unseen", 0), ("unseen", 1)]).values()) == {
        OFFSET_INVALID
    }
    commit(bootstrap, "g2", {("doomed", 0): 1})  # and takes new commits as usual
    restart_coordinators(cluster)
    assert listed(admin, "g2") == {("doomed", 0): 1}
    assert listed(admin, "g1") == {("survivor", 0): 12}
