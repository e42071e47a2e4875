"""kafkajs 2.2.4 (node): idempotent producer (acks -1) with GZIP and no compression, a consumer
group consumer, and admin createTopics/fetchTopicMetadata/deleteTopics.

kafkajs ships only the gzip codec (snappy/lz4/zstd need third-party codec packages), and it cannot
send null header values (`Buffer.byteLength(null)` throws in its header sizing), so its records
use a non-null placeholder there. Records it produced are verified with confluent-kafka.
The kafkajs consumer uses the consumer-group protocol (FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, OffsetCommit/OffsetFetch, LeaveGroup); a failure names any group API the gateway does
not advertise.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kafka_support import (
    REPLICATION_FACTOR,
    ApiUsage,
    ReadRecord,
    Rec,
    TopicFactory,
    api_versions,
    assert_partition_logs,
    consume_confluent,
    make_records,
    produce_confluent,
    split_bootstrap,
    unique_topic_name,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
]

NODE_DIR = Path(__file__).resolve().parents[1] / "clients" / "node"
PER_CODEC = 5_000
# FindCoordinator, JoinGroup, Heartbeat, LeaveGroup, SyncGroup, OffsetCommit, OffsetFetch
GROUP_API_KEYS = {
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    8: "OffsetCommit",
    9: "OffsetFetch",
}


class GroupApisMissing(AssertionError):
    """The kafkajs consumer failed and the gateway does not advertise the group APIs."""


def _b64(v: bytes | None) -> str | None:
    return None if v is None else base64.b64encode(v).decode()


def _unb64(v: str | None) -> bytes | None:
    return None if v is None else base64.b64decode(v)


def js_messages(records: list[Rec]) -> list[dict[str, Any]]:
    """Records as produce.js takes them (bytes as base64)."""
    return [
        {
            "partition": r.partition,
            "key": _b64(r.key),
            "value": _b64(r.value),
            "headers": [[k, _b64(v)] for k, v in r.headers],
            "timestamp": r.timestamp,
        }
        for r in records
    ]


def js_read_records(result: list[dict[str, Any]]) -> dict[int, list[ReadRecord]]:
    """consume.js's result as partition -> records in offset order."""
    got: dict[int, list[ReadRecord]] = {}
    for m in result:
        rec = Rec(
            m["partition"],
            _unb64(m["key"]),
            _unb64(m["value"]),
            tuple((k, _unb64(v)) for k, v in m["headers"]),
            m["timestamp"],
        )
        got.setdefault(m["partition"], []).append(ReadRecord(m["offset"], 0, rec))
    for rs in got.values():
        rs.sort(key=lambda r: r.offset)
    return got


def run_node(
    script: str, spec: dict[str, Any], tmp_path: Path, timeout: float = 120.0
) -> dict[str, Any]:
    spec_path = tmp_path / f"{script}.spec.json"
    out_path = tmp_path / f"{script}.out.json"
    spec_path.write_text(json.dumps(spec))
    proc = subprocess.run(
        ["node", str(NODE_DIR / script), str(spec_path), str(out_path)],
        cwd=NODE_DIR,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if not out_path.exists():
        raise AssertionError(
            f"node {script} wrote no result (exit {proc.returncode}): "
            f"{proc.stderr.decode()[-3000:]}"
        )
    result = json.loads(out_path.read_text())
    result["stderr"] = proc.stderr.decode()
    return result


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_kafkajs_idempotent_producer(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage, codec: str, tmp_path: Path
) -> None:
    name = topic()
    records = make_records(f"js-{codec}", PER_CODEC, null_header_values=False)
    spec = {
        "brokers": [bootstrap],
        "topic": name,
        "compression": codec,
        "chunk": 500,
        "messages": js_messages(records),
    }
    with api_usage.record("kafkajs"):
        res = run_node("produce.js", spec, tmp_path)
    assert res["ok"], f"kafkajs producer failed: {res['error']}\n{res['stderr'][-3000:]}"

    # every send acknowledged without error, base offsets continue where the last send ended
    next_offset = {0: 0, 1: 0, 2: 0}
    for i, send in enumerate(res["result"]):
        chunk = records[i * 500 : (i + 1) * 500]
        counts = {p: sum(1 for r in chunk if r.partition == p) for p in next_offset}
        by_part = {m["partition"]: m for m in send}
        assert set(by_part) == {p for p, c in counts.items() if c}, send
        for p, m in by_part.items():
            assert m["topicName"] == name and m["errorCode"] == 0, m
            assert int(m["baseOffset"]) == next_offset[p], (p, m, next_offset)
            next_offset[p] += counts[p]

    got = consume_confluent(bootstrap, name, [0, 1, 2], len(records))
    assert_partition_logs(records, got)


def test_kafkajs_group_consumer(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage, tmp_path: Path
) -> None:
    name = topic()
    records = make_records("js-consume", 2_000, null_header_values=False)
    produce_confluent(bootstrap, name, records)
    with api_usage.record("kafkajs"):
        res = run_node(
            "consume.js",
            {
                "brokers": [bootstrap],
                "topic": name,
                "groupId": unique_topic_name("kafkajs-group"),
                "expected": len(records),
                "timeoutMs": 45_000,
            },
            tmp_path,
        )
    if not res["ok"]:
        advertised = api_versions(*split_bootstrap(bootstrap))
        missing = sorted(n for k, n in GROUP_API_KEYS.items() if k not in advertised)
        if missing:
            raise GroupApisMissing(f"gateway does not advertise {missing}; kafkajs: {res['error']}")
        raise AssertionError(f"kafkajs consumer failed: {res['error']}\n{res['stderr'][-3000:]}")
    assert_partition_logs(records, js_read_records(res["result"]))


def test_kafkajs_admin(
    bootstrap: str, admin: AdminClient, api_usage: ApiUsage, tmp_path: Path
) -> None:
    name = unique_topic_name("kafkajs-admin")
    with api_usage.record("kafkajs"):
        res = run_node(
            "admin.js",
            {"brokers": [bootstrap], "topic": name, "replicationFactor": REPLICATION_FACTOR},
            tmp_path,
        )
    assert res["ok"], f"kafkajs admin failed: {res['error']}\n{res['stderr'][-3000:]}"
    r = res["result"]
    assert r["created"] is True
    assert r["createdAgain"] is False  # kafkajs: false when the topic already exists
    (t,) = r["metadata"]["topics"]
    assert t["name"] == name
    parts = sorted(t["partitions"], key=lambda p: p["partitionId"])
    assert [p["partitionId"] for p in parts] == [0, 1, 2]
    assert all(p["partitionErrorCode"] == 0 and p["leader"] >= 0 for p in parts), parts
    assert name in r["listedBefore"]
    # deleteTopicRecords (DeleteRecords) moved partition 0's start to 3; fetchTopicOffsets
    # (ListOffsets) agrees
    marks = {o["partition"]: (o["low"], o["high"]) for o in r["offsetsAfterDelete"]}
    assert marks == {0: ("3", "5"), 1: ("0", "0"), 2: ("0", "0")}
    assert name not in r["listedAfter"]
    # the other client agrees: the topic is gone
    assert name not in admin.list_topics(timeout=10).topics
