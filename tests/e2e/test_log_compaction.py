"""Log compaction in a running cluster, checked with real clients and on every replica's files.

The cluster's storage nodes look for cleanable logs every 300 ms (``log.cleaner.backoff.ms``)
and ``__consumer_offsets`` rolls every 4 KiB, so both a user's compacted topic and the
offsets topic are compacted within seconds.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from services.common.records.record import iter_batch_records
from services.common.zk.layout import GROUP_COORDINATOR_SHARDS, ShardMap, group_partition
from tests.integration.kafka_support import consume_confluent, running_cluster, wait_for

pytestmark = pytest.mark.e2e

STORAGE_NODES = 3
ROLE = "group_coordinator"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("compaction"),
        gateways=1,
        storage_nodes=STORAGE_NODES,
        controllers=1,
        group_coordinators=1,
        extra={
            "storage": ["--log.cleaner.backoff.ms", "300"],
            "controller": ["--offsets.topic.segment.bytes", "4096"],
        },
    ) as c:
        yield c


def replica_records(
    cluster: LocalCluster, node: int, topic: str, partition: int
) -> list[tuple[int, bytes | None, bytes | None]] | None:
    """(offset, key, value) of every record in one replica's segment files; None while the
    cleaner is swapping files (a file vanished under the read)."""
    d = cluster.storage_dir(node) / f"{topic}-{partition}"
    out = []
    try:
        for seg in sorted(d.glob("*.log")):
            for _, rec in iter_batch_records(seg.read_bytes()):
                out.append((rec.offset, rec.key, rec.value))
    except FileNotFoundError:
        return None
    return out


KEYS = 40


@pytest.fixture(scope="module")
def compacted_topic(cluster: LocalCluster) -> tuple[str, dict[bytes, bytes | None], int]:
    """A compacted topic (RF 3, tiny segments) written with five rounds over the same keys:
    its name, the last value (or tombstone) of each key, and how many records were produced.
    Module-scoped so that every test of the module can read it, in any order."""
    topic = "compacted"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "2048",
        "min.cleanable.dirty.ratio": "0.01",
    }
    admin.create_topics([NewTopic(topic, 1, 3, config=config)])[topic].result(timeout=30)
    p = Producer(
        {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 0}
    )
    rounds = 5
    expected: dict[bytes, bytes | None] = {}
    for r in range(rounds):
        for k in range(KEYS):
            key = b"k%d" % k
            # the last round deletes every tenth key: a tombstone, kept for delete.retention.ms
            value = None if r == rounds - 1 and k % 10 == 0 else b"round%d-%d" % (r, k)
            p.produce(topic, key=key, value=value, partition=0)
            expected[key] = value
        assert p.flush(30) == 0
    # records with fresh keys, one batch each, so that the last round's segments roll
    for i in range(20):
        p.produce(topic, key=b"filler%d" % i, value=b"x" * 100, partition=0)
        assert p.flush(30) == 0
    return topic, expected, KEYS * rounds + 20


def test_a_compacted_topic_keeps_the_last_value_of_each_key_on_every_replica(
    cluster: LocalCluster, compacted_topic: tuple[str, dict[bytes, bytes | None], int]
) -> None:
    bootstrap = cluster.bootstrap
    topic, expected, produced = compacted_topic
    keys = KEYS

    def compacted_view() -> dict[bytes, bytes | None] | None:
        got = consume_confluent(bootstrap, topic, [0], 0, timeout=30)[0]
        mine = [r.rec for r in got if not r.rec.key.startswith(b"filler")]
        by_key = {r.key: r.value for r in mine}
        return by_key if len(mine) == keys else None

    # the consumer ends up with exactly one record per key: its last value or its tombstone
    assert wait_for("the consumer to see one record per key", compacted_view, 60) == expected

    # kafka-python reads the same compacted partition: offset gaps, tombstones as None
    assert _kafka_python_view(bootstrap, topic) == [
        (r.offset, r.rec.key, r.rec.value) for r in consume_confluent(bootstrap, topic, [0], 0)[0]
    ]

    offsets_seen = [r.offset for r in consume_confluent(bootstrap, topic, [0], 0)[0]]
    assert offsets_seen == sorted(offsets_seen) and len(offsets_seen) < produced
    assert offsets_seen[-1] == produced - 1  # offsets are never rewritten

    def replicas_agree() -> list[tuple[int, bytes | None, bytes | None]] | None:
        views = [replica_records(cluster, n, topic, 0) for n in range(STORAGE_NODES)]
        if any(v is None for v in views):
            return None
        tails = [[r for r in v if not r[1].startswith(b"filler")] for v in views]  # type: ignore[union-attr]
        if any(len(t) != keys for t in tails) or any(t != tails[0] for t in tails):
            return None
        return tails[0]

    # followers compact their own copies: every replica holds the same records
    on_disk = wait_for("every replica to be compacted", replicas_agree, 60)
    assert {k: v for _, k, v in on_disk} == expected


def _kafka_python_view(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"kafka-python read {len(out)} records"
            for msgs in consumer.poll(timeout_ms=500).values():
                out.extend((m.offset, m.key, m.value) for m in msgs)
        return out
    finally:
        consumer.close()


def test_consumer_offsets_are_compacted_and_reloaded_after_a_coordinator_restart(
    cluster: LocalCluster,
) -> None:
    bootstrap = cluster.bootstrap
    topic, group = "committed", "compacting-group"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(timeout=30)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
        }
    )
    commits = 400
    try:
        for i in range(commits):
            consumer.commit(
                offsets=[TopicPartition(topic, 0, i), TopicPartition(topic, 1, 2 * i)],
                asynchronous=False,
            )
    finally:
        consumer.close()

    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start()
    try:
        shard_map = ShardMap.from_json(zk.get(GROUP_COORDINATOR_SHARDS)[0])
    finally:
        zk.stop()
    partition = group_partition(group, shard_map.partitions)

    def compacted_everywhere() -> list[int] | None:
        counts = []
        for n in range(STORAGE_NODES):
            recs = replica_records(cluster, n, "__consumer_offsets", partition)
            if recs is None:
                return None
            counts.append(len(recs))
        # 2 x 400 commit records were written; compaction leaves a few segments' worth
        return counts if all(c < 100 for c in counts) else None

    wait_for("__consumer_offsets to be compacted on every replica", compacted_everywhere, 60)

    # the coordinator reloads the compacted shard: the last commits are all there
    cluster.kill(ROLE, 0, signal.SIGKILL)
    cluster.start_process(ROLE, 0, timeout=60)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:

        def committed() -> list[int] | None:
            try:
                tps = reader.committed(
                    [TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10
                )
            except Exception:  # coordinator still loading
                return None
            return [tp.offset for tp in tps]

        assert wait_for("the committed offsets", committed, 60) == [
            commits - 1,
            2 * (commits - 1),
        ]
    finally:
        reader.close()


def test_dump_log_reads_compacted_segments(
    cluster: LocalCluster, compacted_topic: tuple[str, dict[bytes, bytes | None], int]
) -> None:
    """dump-log (Kafka's DumpLogSegments) reads cleaned segments: the records it prints are
    the ones on disk, with the offsets compaction left (gaps), and the indexes check out."""
    topic, expected, _ = compacted_topic
    d = cluster.storage_dir(0) / f"{topic}-0"

    def compacted() -> list[Path] | None:
        views = replica_records(cluster, 0, topic, 0)
        if views is None:
            return None
        kept = [r for r in views if r[1] is not None and not r[1].startswith(b"filler")]
        return sorted(d.glob("*.log")) if len(kept) == len(expected) else None

    segments = wait_for("node 0's replica to be compacted", compacted, 60)
    on_disk = [
        (str(rec.offset), rec.key.decode())
        for seg in segments
        for _, rec in iter_batch_records(seg.read_bytes())
        if rec.key is not None
    ]
    assert int(on_disk[0][0]) > 0  # the first records were compacted away
    dumped = _dump_log("--files", *map(str, segments), "--print-data-log")
    assert re.findall(r"\| offset: (\d+) .* key: (\S+)", dumped) == on_disk
    indexes = [str(seg.with_suffix(".index")) for seg in segments]
    _dump_log("--files", *indexes, "--verify-index-only")


def _dump_log(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "dump-log", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Mismatches" not in done.stderr and "Index offset" not in done.stderr, done.stderr
    return done.stdout
