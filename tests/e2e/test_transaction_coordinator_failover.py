"""Coordinator failures in the middle of transactions (one cluster, two scenarios).

1. A transaction committed while one of its partitions has no leader, then kill -9 of the
   transaction coordinator owning it: the survivor takes the shard over, finds the transaction
   in PrepareCommit and finishes its markers once the partition is back; read_committed then
   sees every record of the transaction.
2. kill -9 of the group coordinator holding a transaction's pending offsets
   (``send_offsets_to_transaction`` done, not committed yet): the survivor replays them as
   pending, the commit's marker for ``__consumer_offsets`` reaches it and the group's committed
   offset moves with the output."""

from __future__ import annotations

import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from services.common.zk.layout import TRANSACTION
from tests.integration.kafka_support import (
    consume_confluent,
    running_cluster,
    shard_owner,
    wait_for,
    wait_for_topic,
    zk_partition_state,
)

pytestmark = pytest.mark.e2e

PARTITIONS = 3
ROLE = "transaction_coordinator"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path,
        gateways=1,
        storage_nodes=3,
        controllers=1,
        group_coordinators=2,
        transaction_coordinators=2,
    ) as c:
        yield c


def test_survivor_finishes_the_markers_of_a_prepared_commit(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap
    topic = f"txn-failover-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    wait_for_topic(admin, topic, PARTITIONS)
    txn_id = f"failover-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(60)
    producer.begin_transaction()
    values = {f"v-{p}-{i}".encode() for p in range(PARTITIONS) for i in range(10)}
    for value in sorted(values):
        producer.produce(topic, value=value, partition=int(value.split(b"-")[1]))
    assert producer.flush(30) == 0

    # partition 0's only replica goes away: its marker cannot be written
    storage = zk_partition_state(cluster.zk_connect, topic, 0)["leader"]
    cluster.kill("storage", storage, signal.SIGKILL)
    producer.commit_transaction(60)  # answered once PrepareCommit is in __transaction_state

    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start()
    try:
        shard, owner, epoch = shard_owner(zk, txn_id, TRANSACTION)
        cluster.kill(ROLE, owner, signal.SIGKILL)
        survivor = 1 - owner
        log = cluster.log_path(ROLE, survivor)
        wait_for(
            "the survivor to take the shard",
            lambda: shard_owner(zk, txn_id, TRANSACTION)[1:] == (survivor, epoch + 1),
            30,
        )
    finally:
        zk.stop()
        zk.close()
    wait_for(
        "the survivor to resume the prepared commit",
        lambda: re.search(
            rf"Completing transaction for {txn_id} with state PrepareCommit", log.read_text()
        ),
        30,
    )
    cluster.start_process("storage", storage)
    wait_for(
        "the commit to complete",
        lambda: re.search(rf"Completed commit of transaction {txn_id}\b", log.read_text()),
        60,
    )
    got = consume_confluent(
        bootstrap,
        topic,
        list(range(PARTITIONS)),
        len(values),
        extra_config={"isolation.level": "read_committed"},
    )
    assert {r.rec.value for recs in got.values() for r in recs} == values
    # the producer goes on with the next transaction through the new coordinator
    producer.begin_transaction()
    producer.produce(topic, value=b"after", partition=1)
    producer.commit_transaction(60)


def test_pending_transactional_offsets_survive_a_group_coordinator_kill(
    cluster: LocalCluster,
) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as TP

    bootstrap = cluster.bootstrap
    source, sink = (f"{n}-{uuid.uuid4().hex[:6]}" for n in ("eos-in", "eos-out"))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in (source, sink):
        admin.create_topics([NewTopic(name, 1, 3)])[name].result(60)
        wait_for_topic(admin, name, 1)
    feeder = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        feeder.produce(source, value=f"in-{i}".encode(), partition=0)
    assert feeder.flush(30) == 0
    group = f"eos-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": group})
    producer.init_transactions(60)
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start()
    try:
        consumer.subscribe([source])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < 10 and time.monotonic() < deadline:
            values += [m.value() for m in consumer.consume(10, timeout=1.0) if m.error() is None]
        assert len(values) == 10
        producer.begin_transaction()
        for v in values:
            producer.produce(sink, value=v.replace(b"in-", b"out-"), partition=0)
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        partition, owner, epoch = shard_owner(zk, group)
        cluster.kill("group_coordinator", owner, signal.SIGKILL)
        wait_for(
            "the survivor to own the group's shard",
            lambda: shard_owner(zk, group)[1:] == (1 - owner, epoch + 1),
            30,
        )
        producer.commit_transaction(60)
    finally:
        zk.stop()
        zk.close()
        consumer.close()

    def read_log() -> str:
        return cluster.log_path("group_coordinator", 1 - owner).read_text()

    log = read_log()
    # the survivor replayed the offset as pending, then applied it on the marker
    elected = rf'"pending_txn_offsets": 1, "event": "Elected as the group coordinator for partition {partition}"'
    assert re.search(elected, log), log[-2000:]
    applied = rf'"partition": {partition}, "producer_id": \d+, "commit": true, "offsets": 1, "event": "transaction_offsets_completed"'
    wait_for("the marker to apply the offset", lambda: re.search(applied, read_log()), 30)
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = wait_for(
            "the transaction's offset to count",
            lambda: (c := checker.committed([TP(source, 0)], timeout=10)[0].offset) == 10 and c,
            30,
        )
    finally:
        checker.close()
    assert committed == 10
    got = consume_confluent(
        bootstrap, sink, [0], 10, extra_config={"isolation.level": "read_committed"}
    )
    assert [r.rec.value for r in got[0]] == [f"out-{i}".encode() for i in range(10)]
