"""Partition reassignment from kafkajs 2.2.4 (``admin.alterPartitionReassignments`` /
``listPartitionReassignments``, API 45 v0 and 46 v0) on the shared integration cluster: a
partition moved to another storage node and another's replication factor raised 1 -> 2, its
records readable afterwards; a broker id that does not exist is refused with
INVALID_REPLICA_ASSIGNMENT. (The full reassignment behaviour, under load and with failures, is
``tests/e2e/test_partition_reassignment.py``.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kafka_support import REPLICATION_FACTOR, ApiUsage, TopicFactory, consume_confluent
from test_clients_kafkajs import run_node

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
]


def test_kafkajs_reassigns_partitions(
    bootstrap: str, admin: AdminClient, topic: TopicFactory, api_usage: ApiUsage, tmp_path: Path
) -> None:
    name = topic(partitions=2, replication_factor=1)
    md = admin.list_topics(name, timeout=10).topics[name].partitions
    wide = topic(partitions=1, replication_factor=REPLICATION_FACTOR, prefix="storage-ids")
    nodes = sorted(admin.list_topics(wide, timeout=10).topics[wide].partitions[0].replicas)
    p0, p1 = md[0].replicas[0], md[1].replicas[0]
    to0 = next(n for n in nodes if n != p0)
    to1 = [p1, next(n for n in nodes if n != p1)]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(200):
        producer.produce(name, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    spec = {
        "brokers": [bootstrap],
        "topic": name,
        "moves": [{"partition": 0, "replicas": [to0]}, {"partition": 1, "replicas": to1}],
        "badBroker": 4242,
    }
    with api_usage.record("kafkajs"):
        res = run_node("reassign.js", spec, tmp_path)
    assert res["ok"], f"kafkajs failed: {res['error']}\n{res['stderr'][-3000:]}"
    out = res["result"]
    assert out["listed"][-1] == {"topics": []}, json.dumps(out["listed"])
    replicas = {p["partitionId"]: p["replicas"] for p in out["metadata"]["topics"][0]["partitions"]}
    assert replicas == {0: [to0], 1: to1}
    refused = out["refused"]
    assert refused is not None, "a reassignment onto an unknown broker was accepted"
    assert "INVALID_REPLICA_ASSIGNMENT" in json.dumps(refused), refused

    got = consume_confluent(bootstrap, name, [0, 1], 200)
    values = sorted(r.rec.value or b"" for records in got.values() for r in records)
    assert values == sorted(f"v{i}".encode() for i in range(200))
