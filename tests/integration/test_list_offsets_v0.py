"""ListOffsets v0 (served by Kafka 3.x, sent by Sarama-based tools such as Burrow): a kafka-python
consumer pinned to 0.10.0 (which resets positions with v0) and raw v0 requests."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka_support import (
    TopicFactory,
    gateway_requests,
    make_text_records,
    produce_confluent,
    split_bootstrap,
)

from services.cli.wire import exchange
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey

pytestmark = pytest.mark.integration


def test_list_offsets_v0(cluster: Any, bootstrap: str, topic: TopicFactory) -> None:
    t = topic(2)
    before = gateway_requests(cluster, "ListOffsets").get(0, 0)
    produce_confluent(bootstrap, t, make_text_records("v0", 7, 0))
    c = KafkaConsumer(bootstrap_servers=bootstrap, api_version=(0, 10, 0), enable_auto_commit=False)
    try:
        tp = KpTopicPartition(t, 0)
        c.assign([tp])
        c.seek_to_end(tp)
        assert c.position(tp) == 7
        c.seek_to_beginning(tp)
        assert c.position(tp) == 0
    finally:
        c.close()
    assert gateway_requests(cluster, "ListOffsets").get(0, 0) >= before + 2  # sent as v0

    host, port = split_bootstrap(bootstrap)

    def v0(name: str, partition: int, ts: int, limit: int) -> tuple[int, list[int]]:
        part = {"partition_index": partition, "timestamp": ts, "max_num_offsets": limit}
        body = {"replica_id": -1, "topics": [{"name": name, "partitions": [part]}]}
        (topic_out,) = exchange(host, port, ApiKey.LIST_OFFSETS, 0, body, 10.0)["topics"]
        (p,) = topic_out["partitions"]
        return p["error_code"], p["old_style_offsets"]

    assert v0(t, 0, -1, 1) == (0, [7])
    assert v0(t, 0, -2, 5) == (0, [0])
    assert v0(t, 1, -1, 1) == (0, [0])
    assert v0(t, 0, -1, 0) == (0, [])
    assert v0(t, 0, 0, 1) == (0, [0])  # first offset at or after time 0
    assert v0(f"{t}-missing", 0, -1, 1)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
