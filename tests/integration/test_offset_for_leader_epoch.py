"""OffsetForLeaderEpoch (KIP-320) through the gateway, answered by each partition's leader.

The request is sent as clients send it (v2 as librdkafka does, v4 as the Java client does);
librdkafka's own use of it after a leader change is in tests/e2e/test_replication_failover.py.
"""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import Producer
from kafka_support import TopicFactory, read_frame, split_bootstrap

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey, decode_response, encode_request

pytestmark = pytest.mark.integration


def ask(
    bootstrap: str, version: int, items: list[tuple[str, int, int, int]]
) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition, current_leader_epoch, leader_epoch) -> (error, epoch, end offset)."""
    topics: dict[str, list[dict[str, int]]] = {}
    for name, partition, current, epoch in items:
        topics.setdefault(name, []).append(
            {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}
        )
    body = {
        "replica_id": -1,
        "topics": [{"topic": n, "partitions": ps} for n, ps in topics.items()],
    }
    with socket.create_connection(split_bootstrap(bootstrap), timeout=10) as s:
        s.sendall(encode_request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, 5, "epoch-probe", body))
        frame = read_frame(s)
    assert frame is not None
    corr, resp = decode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, frame)
    assert corr == 5
    return {
        (t["topic"], p["partition"]): (p["error_code"], p["leader_epoch"], p["end_offset"])
        for t in resp["topics"]
        for p in t["partitions"]
    }


@pytest.mark.parametrize("version", [2, 4])
def test_end_offsets_of_leader_epochs(topic: TopicFactory, bootstrap: str, version: int) -> None:
    name = topic(2)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(10):
        p.produce(name, value=b"%d" % i, partition=0)
    assert p.flush(30) == 0
    got = ask(
        bootstrap,
        version,
        [
            (name, 0, 0, 0),  # the current epoch ends at the log end offset
            (name, 1, -1, 0),  # an empty partition, no current epoch given
            (name, 5, -1, 0),
            ("no-such-topic-for-epochs", 0, -1, 0),
            (name, 0, -1, 7),  # named twice: answered once, for its first entry
        ],
    )
    assert got == {
        (name, 0): (0, 0, 10),
        (name, 1): (0, 0, 0),
        (name, 5): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        ("no-such-topic-for-epochs", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    }
    # the client knows a newer leader epoch than the leader has
    assert ask(bootstrap, version, [(name, 0, 1, 0)]) == {
        (name, 0): (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1)
    }
    # an epoch later than any the log knows is undefined, as Kafka answers it
    assert ask(bootstrap, version, [(name, 0, -1, 7)]) == {(name, 0): (0, -1, -1)}
