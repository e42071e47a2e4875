"""Several gateways in several zones: metadata lists them all, leaders follow the client's zone,
and data produced through one gateway is read through another."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_support import gateway_requests, running_cluster, wait_for_topic

from services.cli.local_cluster import LocalCluster
from services.common.protocol import ApiKey, decode_response, encode_request

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("multi-gw")
    with running_cluster(
        data_dir,
        gateways=2,
        storage_nodes=2,
        controllers=1,
        zones=("zone-a", "zone-b"),
    ) as cluster:
        yield cluster


def _leaders(bootstrap: str, topic: str, client_id: str) -> set[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": client_id})
    md = admin.list_topics(topic, timeout=10)
    return {p.leader for p in md.topics[topic].partitions.values()}


def _raw_leaders(address: str, topic: str) -> set[int]:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request(ApiKey.METADATA, 12, 7, "app", {"topics": [{"name": topic}]}))
        size = struct.unpack(">i", _read_exactly(sock, 4))[0]
        corr, body = decode_response(ApiKey.METADATA, 12, _read_exactly(sock, size))
    assert corr == 7
    return {p["leader_id"] for t in body["topics"] for p in t["partitions"]}


def _wait_known_to(addresses: list[str], topic: str, timeout: float = 30.0) -> None:
    """Until every gateway, asked directly, lists ``topic`` with a leader for each partition.

    Another gateway learns of a new topic from ZooKeeper a moment after CreateTopics returns
    (as another Kafka broker does from the controller), so a test that asks it must wait."""
    deadline = time.monotonic() + timeout
    for address in addresses:
        while not (leaders := _raw_leaders(address, topic)) or -1 in leaders:
            assert time.monotonic() < deadline, f"{address} does not know {topic}: {leaders}"
            time.sleep(0.1)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def test_leaders_follow_the_client_zone(two_gateways: LocalCluster) -> None:
    first = two_gateways.address("gateway", 0)
    second = two_gateways.address("gateway", 1)
    admin = AdminClient({"bootstrap.servers": first})
    admin.create_topics([NewTopic("zoned", 6, 1)])["zoned"].result(30)
    _wait_known_to([first, second], "zoned")

    md = admin.list_topics(timeout=10)
    assert sorted(md.brokers) == [0, 1]
    assert {f"{b.host}:{b.port}" for b in md.brokers.values()} == {first, second}

    # The zone hint in client.id wins, whichever gateway librdkafka asks.
    assert _leaders(first, "zoned", "app zone=zone-b") == {1}
    assert _leaders(second, "zoned", "app zone=zone-a") == {0}
    # Without a hint, the zone of the gateway that answers (asked directly: librdkafka may send
    # its metadata request to any broker it has learnt of).
    assert _raw_leaders(first, "zoned") == {0}
    assert _raw_leaders(second, "zoned") == {1}


def test_produce_through_one_gateway_consume_through_the_other(two_gateways: LocalCluster) -> None:
    first = two_gateways.address("gateway", 0)
    second = two_gateways.address("gateway", 1)
    admin = AdminClient({"bootstrap.servers": first})
    admin.create_topics([NewTopic("crossing", 3, 1)])["crossing"].result(30)
    producer = Producer(
        {"bootstrap.servers": first, "client.id": "p zone=zone-a", "enable.idempotence": True}
    )
    for i in range(600):
        producer.produce("crossing", f"v{i}".encode(), key=str(i).encode(), partition=i % 3)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": second,
            "client.id": "c zone=zone-b",
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition("crossing", p, 0) for p in range(3)])
    seen: set[bytes] = set()
    for _ in range(60):
        for msg in consumer.consume(1000, 0.5):
            assert msg.error() is None
            seen.add(msg.value())
        if len(seen) == 600:
            break
    consumer.close()
    assert seen == {f"v{i}".encode() for i in range(600)}


def test_consumer_fetches_from_a_gateway_of_its_rack(two_gateways: LocalCluster) -> None:
    """KIP-392: a consumer told (client.id zone hint) to use zone-a's gateway but living in
    zone-b (client.rack) is given a preferred read replica whose broker is zone-b's gateway,
    which it can reach, and keeps consuming from it."""
    first = two_gateways.address("gateway", 0)
    admin = AdminClient({"bootstrap.servers": first})
    admin.create_topics([NewTopic("ffr", 1, 2)])["ffr"].result(30)
    wait_for_topic(admin, "ffr", 1)
    _wait_known_to([first, two_gateways.address("gateway", 1)], "ffr")
    assert _leaders(first, "ffr", "ffr zone=zone-a") == {0}
    producer = Producer({"bootstrap.servers": first})

    def produce(start: int) -> None:
        for i in range(start, start + 100):
            producer.produce("ffr", value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0

    before = sum(gateway_requests(two_gateways, "FetchConsumer", gateway=1).values())
    consumer = Consumer(
        {
            "bootstrap.servers": first,
            "client.id": "ffr zone=zone-a",
            "client.rack": "zone-b",
            "group.id": "ffr",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition("ffr", 0, OFFSET_BEGINNING)])
    values: list[bytes] = []

    def consume(total: int) -> None:
        deadline = time.monotonic() + 30
        while len(values) < total and time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=0.5):
                assert msg.error() is None, msg.error()
                values.append(msg.value())

    try:
        produce(0)
        consume(100)
        served_b = sum(gateway_requests(two_gateways, "FetchConsumer", gateway=1).values()) - before
        produce(100)  # after the switch: still read, now from zone-b's gateway
        consume(200)
    finally:
        consumer.close()
    assert values == [b"%d" % i for i in range(200)]
    assert served_b > 0, "the consumer never fetched from the gateway of its rack"
    assert (
        sum(gateway_requests(two_gateways, "FetchConsumer", gateway=1).values()) - before > served_b
    )
