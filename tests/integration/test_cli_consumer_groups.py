"""``kafka-py consumer-groups`` against a group that a real confluent-kafka consumer runs: the
describe columns and lag of kafka-consumer-groups.sh, the refusal to reset an active group, and
every reset scenario on the stopped group (dry run first, then executed, then proved by the next
consumer's first offsets), export/import CSV, delete-offsets and delete."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_support import TopicFactory, cli_ok, kafka_py, one_line, wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_BATCH = 5


def _produce(bootstrap: str, topic: str, ts_ms: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for part in range(PARTITIONS):
        for i in range(PER_BATCH):
            p.produce(topic, value=f"{part}-{i}".encode(), partition=part, timestamp=ts_ms)
    assert p.flush(30) == 0


def _consumer(bootstrap: str, group: str, client_id: str = "cg-test") -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
        }
    )


def _committed(admin: AdminClient, group: str) -> dict[int, int]:
    (fut,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    return {tp.partition: tp.offset for tp in fut.result(30).topic_partitions if tp.offset >= 0}


def _rows(out: str, header_first: str = "GROUP") -> list[list[str]]:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.split()[0] == header_first)
    return [ln.split() for ln in lines[start:]]


def _lag_series(cluster: Any, group: str) -> dict[str, float]:
    """The consumer lag series of ``group`` on every group coordinator's /metrics."""
    from services.cli.local_cluster import LocalClusterError

    out: dict[str, float] = {}
    for i in range(8):
        try:
            url = cluster.admin_url("group_coordinator", i) + "/metrics"
        except LocalClusterError:
            break
        with urllib.request.urlopen(url, timeout=5) as r:
            for line in r.read().decode().splitlines():
                if f'consumergroup="{group}"' in line and not line.startswith("#"):
                    name, _, value = line.rpartition(" ")
                    out[re.sub(r'consumergroup="[^"]*",?', "", name)] = float(value)
    return out


def test_consumer_groups_describe_and_reset_a_real_group(
    cluster: Any, bootstrap: str, topic: TopicFactory, admin: AdminClient, tmp_path: Path
) -> None:
    t = topic(PARTITIONS)
    group = f"cg-{t}"
    bs = ("--bootstrap-server", bootstrap)
    cg = ("consumer-groups", *bs)
    t0 = int(time.time() * 1000) - 3_600_000  # first batch an hour ago, second batch now
    t1 = int(time.time() * 1000)
    _produce(bootstrap, t, t0)
    _produce(bootstrap, t, t1)

    c = _consumer(bootstrap, group)
    c.subscribe([t])
    wait_for("an assignment", lambda: (c.poll(0.2), c.assignment())[1], timeout=60)
    c.commit(offsets=[TopicPartition(t, 0, 4), TopicPartition(t, 1, 7)], asynchronous=False)

    # --describe: Kafka's columns, lag = log end - committed, "-" where nothing is committed.
    out = cli_ok(*cg, "--describe", "--group", group)
    header, *rows = _rows(out)
    assert header == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
        "CONSUMER-ID", "HOST", "CLIENT-ID",
    ]  # fmt: skip
    by_part = {int(r[2]): r for r in rows}
    assert sorted(by_part) == [0, 1, 2]
    hw = {p: c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1] for p in by_part}
    assert hw == {0: 10, 1: 10, 2: 10}
    assert by_part[0][3:6] == ["4", "10", "6"]
    assert by_part[1][3:6] == ["7", "10", "3"]
    assert by_part[2][3:6] == ["-", "10", "-"]
    assert all(r[0] == group and r[1] == t and r[6].startswith("cg-test") for r in rows)
    assert all(r[8] == "cg-test" for r in rows)

    doc = json.loads(cli_ok(*cg, "--describe", "--group", group, "--output", "json"))
    assert doc[0]["state"] == "Stable"
    assert {r["partition"]: r["lag"] for r in doc[0]["offsets"]} == {0: 6, 1: 3, 2: None}

    # The coordinator's lag metrics (kafka-exporter names) agree, from its periodic refresh.
    want = {
        f'kafka_consumergroup_current_offset{{partition="0",topic="{t}"}}': 4.0,
        f'kafka_consumergroup_current_offset{{partition="1",topic="{t}"}}': 7.0,
        f'kafka_consumergroup_lag{{partition="0",topic="{t}"}}': 6.0,
        f'kafka_consumergroup_lag{{partition="1",topic="{t}"}}': 3.0,
        f'kafka_consumergroup_lag_sum{{topic="{t}"}}': 9.0,
        "kafkapy_consumergroup_max_lag{}": 6.0,
        "kafkapy_consumergroup_total_lag{}": 9.0,
    }
    wait_for("the lag metrics", lambda: _lag_series(cluster, group) == want, timeout=45)

    members = _rows(cli_ok(*cg, "--describe", "--group", group, "--members", "--verbose"))
    assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assert members[1][4] == "3" and members[1][5] == f"{t}:0,1,2"

    state = cli_ok(*cg, "--describe", "--group", group, "--state")
    assert "COORDINATOR (ID)" in state and "ASSIGNMENT-STRATEGY" in state
    assert state.split()[-2:] == ["Stable", "1"]

    assert group in cli_ok(*cg, "--list").split()
    listed = _rows(cli_ok(*cg, "--list", "--state", "Stable"))
    assert listed[0] == ["GROUP", "STATE"] and [group, "Stable"] in listed

    # An active group is not reset (Kafka's message), and nothing changes.
    refused = kafka_py(
        *cg, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute"
    )
    assert refused.returncode == 1
    assert one_line(refused.stderr) == (
        f"error: Assignments can only be reset if the group '{group}' is inactive, "
        "but the current state is Stable."
    )
    c.close()
    wait_for(
        "the group to empty",
        lambda: (
            json.loads(cli_ok(*cg, "--describe", "--group", group, "--output", "json"))[0]["state"]
            == "Empty"
        ),
    )
    assert "has no active members" in cli_ok(*cg, "--describe", "--group", group)

    # --to-datetime between the batches: the first record at or after it is offset 5.
    when = datetime.fromtimestamp((t0 + t1) / 2000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    reset = ("--reset-offsets", "--group", group, "--topic", t)
    dry = _rows(cli_ok(*cg, *reset, "--to-datetime", when))
    assert dry[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert [r[2:] for r in dry[1:]] == [["0", "5"], ["1", "5"], ["2", "5"]]
    assert _committed(admin, group) == {0: 4, 1: 7}  # --dry-run is the default
    cli_ok(*cg, *reset, "--to-datetime", when, "--execute")
    assert _committed(admin, group) == {0: 5, 1: 5, 2: 5}
    nxt = _consumer(bootstrap, group)
    nxt.subscribe([t])
    first: dict[int, int] = {}

    def poll_firsts() -> bool:
        m = nxt.poll(0.2)
        if m is not None and m.error() is None:
            first.setdefault(m.partition(), m.offset())
        return len(first) == PARTITIONS

    wait_for("the next consumer's first records", poll_firsts, timeout=60)
    nxt.close()
    assert first == {0: 5, 1: 5, 2: 5}
    wait_for(
        "the group to empty again",
        lambda: (
            json.loads(cli_ok(*cg, "--describe", "--group", group, "--output", "json"))[0]["state"]
            == "Empty"
        ),
    )

    # The other scenarios, clamped to [log start, log end] as Kafka's tool does.
    def plan(*scenario: str, topics: tuple[str, ...] = ("--topic", t)) -> dict[int, int]:
        rows = _rows(cli_ok(*cg, "--reset-offsets", "--group", group, *topics, *scenario))
        return {int(r[2]): int(r[3]) for r in rows[1:]}

    assert plan("--to-earliest") == {0: 0, 1: 0, 2: 0}
    assert plan("--to-latest") == {0: 10, 1: 10, 2: 10}
    assert plan("--to-offset", "99") == {0: 10, 1: 10, 2: 10}
    assert plan("--shift-by", "-7") == {0: 0, 1: 0, 2: 0}
    assert plan("--shift-by", "3", topics=("--topic", f"{t}:1")) == {1: 8}
    assert plan("--to-current", topics=("--all-topics",)) == {0: 5, 1: 5, 2: 5}
    assert plan("--by-duration", "PT2H") == {0: 0, 1: 0, 2: 0}
    exported = cli_ok(*cg, *reset, "--to-offset", "2", "--export")
    assert exported == f"{t},0,2\n{t},1,2\n{t},2,2\n"
    f = tmp_path / "offsets.csv"
    f.write_text(f"{t},1,8\n")
    cli_ok(*cg, "--reset-offsets", "--group", group, "--from-file", str(f), "--execute")
    assert _committed(admin, group) == {0: 5, 1: 8, 2: 5}

    bad = kafka_py(*cg, *reset, "--by-duration", "yesterday")
    assert bad.returncode == 2 and "ISO-8601" in one_line(bad.stderr)

    # --delete-offsets, then --delete.
    gone = cli_ok(*cg, "--delete-offsets", "--group", group, "--topic", f"{t}:1")
    assert f"Request succeed for deleting offsets with topic {t} group {group}" in gone
    assert _rows(gone, "TOPIC")[1] == [t, "1", "Successful"]
    assert _committed(admin, group) == {0: 5, 2: 5}
    deleted = cli_ok(*cg, "--delete", "--group", group)
    assert deleted.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    assert group not in cli_ok(*cg, "--list").split()
    assert cli_ok(*cg, "--describe", "--group", group).strip() == (
        f"Consumer group '{group}' does not exist."
    )


def test_get_offsets_at_times(bootstrap: str, topic: TopicFactory) -> None:
    """kafka-get-offsets.sh's ``--time`` values on records with increasing timestamps."""
    t = topic(2)
    base = int(time.time() * 1000) - 60_000
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(10):
        p.produce(t, value=b"x", partition=0, timestamp=base + i * 10)
    assert p.flush(30) == 0
    get = ("get-offsets", "--bootstrap-server", bootstrap, "--topic", t)
    assert cli_ok(*get) == f"{t}:0:10\n{t}:1:0\n"
    assert cli_ok(*get, "--time", "-2") == f"{t}:0:0\n{t}:1:0\n"
    assert cli_ok(*get, "--time", "-3", "--partitions", "0") == f"{t}:0:9\n"
    assert cli_ok(*get, "--time", str(base + 45), "--partitions", "0") == f"{t}:0:5\n"
    assert cli_ok(*get, "--time", str(base + 10_000)) == ""  # no record that late: left out
    regex = ("get-offsets", "--bootstrap-server", bootstrap, "--topic", f"{t[:-3]}.*")
    assert f"{t}:0:10" in cli_ok(*regex).splitlines()
    doc = json.loads(cli_ok(*get, "--partitions", "0", "--output", "json"))
    assert doc == [{"topic": t, "partition": 0, "offset": 10}]
    none = kafka_py(*get, "--partitions", "7")
    assert none.returncode == 1
    assert one_line(none.stderr) == (
        "error: Could not match any topic-partitions with the specified filters"
    )
    bad = kafka_py(*get, "--time", "-4")
    assert bad.returncode == 2 and "--time" in one_line(bad.stderr)
