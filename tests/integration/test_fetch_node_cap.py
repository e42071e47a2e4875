"""Fetch answers cut per storage node (real processes, confluent-kafka).

A gateway whose storage nodes each return at most ``kafkapy.fetch.node.max.bytes`` per Fetch
call: confluent-kafka reads a topic spread over 3 storage nodes, with batches under the cap and
100 KiB records over it, and must get every record once, in order (KIP-74: a node's first batch
comes whole even when it is larger than the cap), in many Fetch answers rather than one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_support import (
    BIG_VALUE_BYTES,
    assert_partition_logs,
    consume_confluent,
    gateway_requests,
    make_records,
    produce_confluent,
    running_cluster,
    unique_topic_name,
    wait_for_topic,
)

if TYPE_CHECKING:
    from services.cli.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

NODE_CAP = 20_000
PARTITIONS = 6  # two per storage node
RECORDS = 3_000  # ~1.8 MB, three of them 100 KiB values


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("fetch-node-cap"),
        storage_nodes=3,
        controllers=1,
        transaction_coordinators=0,
        extra={"gateway": ["--kafkapy.fetch.node.max.bytes", str(NODE_CAP)]},
    ) as c:
        yield c


def test_capped_answers_deliver_every_record_once_in_order(capped: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": capped.bootstrap})
    topic = unique_topic_name("fetch-node-cap")
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30)[topic].result(60)
    wait_for_topic(admin, topic, PARTITIONS)
    records = make_records(topic, RECORDS, PARTITIONS)
    big = [r for r in records if r.value is not None and len(r.value) > BIG_VALUE_BYTES]
    assert len(big) == RECORDS // 1000  # larger than the cap: each must still come whole
    # batches of at most 16 KiB, under the cap (a 100 KiB record is a batch of its own)
    produce_confluent(capped.bootstrap, topic, records, config={"batch.size": 16_384})
    fetches_before = sum(gateway_requests(capped, "FetchConsumer").values())
    got = consume_confluent(
        capped.bootstrap,
        topic,
        range(PARTITIONS),
        RECORDS,
        extra_config={
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            "fetch.wait.max.ms": 500,
        },
    )
    assert_partition_logs(records, got)
    fetches = sum(gateway_requests(capped, "FetchConsumer").values()) - fetches_before
    # Without the cap one answer would carry the whole topic (~1.8 MB < fetch.max.bytes); with
    # it, an answer carries at most one cap per node, or a node's one batch over the cap.
    total = sum(len(r.value or b"") + len(r.key or b"") for r in records)
    assert fetches >= (total - len(big) * BIG_VALUE_BYTES) // (3 * NODE_CAP) // 2, fetches
    print(f"{fetches} Fetch requests for {total} bytes")
