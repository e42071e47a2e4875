"""Crash recovery reads only the unflushed tail (issue 12 §3, acceptance 4).

A storage node holding ~200 MB (RF 3, Kafka's 1 GiB segments: every partition is one active
segment) is killed with SIGKILL right after more data arrived. On restart it must validate
only what follows the checkpointed recovery point of each partition (asserted from its
``log_recovered`` lines against the ``recovery-point-offset-checkpoint`` it left), and
rejoin every ISR the controller took it out of. How long that took is printed (reported, not
asserted as a bound).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from services.storage.log.checkpoint import RECOVERY_POINT_CHECKPOINT, read_offset_checkpoint
from tests.integration.kafka_support import running_cluster, wait_for

pytestmark = pytest.mark.e2e

TOPIC = "recovery"
PARTITIONS = 4
VALUE = 16 * 1024
BULK_BYTES = 200 * 1024 * 1024
TAIL_BYTES = 4 * 1024 * 1024
CHECKPOINT_MS = 1000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path,
        gateways=1,
        storage_nodes=3,
        controllers=1,
        group_coordinators=0,
        extra={
            "storage": [
                "--log.flush.offset.checkpoint.interval.ms",
                str(CHECKPOINT_MS),
                "--log.recovery.flush.interval.ms",
                str(CHECKPOINT_MS),
                "--replica.lag.time.max.ms",
                "5000",
            ]
        },
    ) as c:
        yield c


def produce(bootstrap: str, total_bytes: int, tag: bytes) -> int:
    """Write ``total_bytes`` in 16 KiB values (about 1 MB batches); returns records acked."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 262144,
            "message.timeout.ms": 120000,
        }
    )
    failed: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    value = tag * (VALUE // len(tag))
    count = total_bytes // VALUE
    for i in range(count):
        while True:
            try:
                producer.produce(
                    TOPIC,
                    value,
                    partition=i % PARTITIONS,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0
    assert not failed, failed[:3]
    return count


def states(zk: KazooClient) -> dict[int, dict[str, Any]]:
    out = {}
    for p in range(PARTITIONS):
        data, _ = zk.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")
        out[p] = json.loads(data)
    return out


def json_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def partition_size(storage_dir: Path, partition: int) -> int:
    return sum(p.stat().st_size for p in (storage_dir / f"{TOPIC}-{partition}").glob("*.log"))


def test_kill_9_recovers_only_the_tail_and_rejoins_the_isr(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(10)
    try:
        wait_for("every partition led", lambda: all(s["leader"] >= 0 for s in states(zk).values()))
        started = time.monotonic()
        count = produce(bootstrap, BULK_BYTES, b"bulk")
        produce_s = time.monotonic() - started
        victim = states(zk)[0]["leader"]
        vdir = cluster.storage_dir(victim)

        # The background flush and the checkpoint task bring the victim's checkpointed
        # recovery points up to its log ends (every partition is one 1 GiB active segment:
        # without them nothing rolls, nothing is fsynced, the recovery point stays 0).
        def checkpointed() -> dict[tuple[str, int], int] | None:
            points = read_offset_checkpoint(vdir / RECOVERY_POINT_CHECKPOINT)
            mine = [points.get((TOPIC, p), 0) for p in range(PARTITIONS)]
            return points if mine == [count // PARTITIONS] * PARTITIONS else None

        wait_for("recovery points checkpointed", checkpointed, timeout=60)
        # More data, then kill -9 at once: this tail is (mostly) not yet flushed.
        produce(bootstrap, TAIL_BYTES, b"tail")
        sizes = {p: partition_size(vdir, p) for p in range(PARTITIONS)}
        cluster.kill("storage", victim, signal.SIGKILL)
        killed_at = time.monotonic()
        points = read_offset_checkpoint(vdir / RECOVERY_POINT_CHECKPOINT)
        log_path = cluster.data_dir / "logs" / f"storage-{victim}.log"
        seen = len(json_lines(log_path))
        # the controller takes the dead node out of every ISR once its session expires
        wait_for(
            "the killed node out of every ISR",
            lambda: all(victim not in s["isr"] for s in states(zk).values()),
            timeout=60,
            interval=0.05,
        )
        out_s = time.monotonic() - killed_at

        restart = time.monotonic()
        cluster.start_process("storage", victim, timeout=90)
        ready_s = time.monotonic() - restart
        wait_for(
            "the restarted node back in every ISR",
            lambda: all(victim in s["isr"] for s in states(zk).values()),
            timeout=90,
            interval=0.05,
        )
        isr_s = time.monotonic() - restart
    finally:
        zk.stop()
        zk.close()

    events = json_lines(log_path)[seen:]
    recovered = {
        e["partition"]: e
        for e in events
        if e.get("event") == "log_recovered" and e.get("topic") == TOPIC
    }
    assert sorted(recovered) == list(range(PARTITIONS)), "no recovery logged"
    total = sum(sizes.values())
    scanned = sum(e["bytes_scanned"] for e in recovered.values())
    for p, e in recovered.items():
        # recovery started at the checkpointed recovery point, not at 0, and validated
        # exactly the bytes from its batch to the end of the file
        assert e["recovery_point"] == points[(TOPIC, p)] > 0, e
        assert e["segments_skipped"] == 0 and e["segments_recovered"] == 1, e
        assert e["from_position"] > 0, e
        assert e["from_position"] + e["bytes_scanned"] == sizes[p], (e, sizes[p])
    assert scanned < total // 10, f"scanned {scanned} of {total} bytes"
    loaded = [e for e in events if e.get("event") == "logs loaded"]
    assert loaded and loaded[-1]["clean_shutdown"] == []  # the log dirs that were shut down cleanly
    load_ms = sum(
        e["ms"] for e in events if e.get("event") == "loaded log" and e.get("topic") == TOPIC
    )
    print(
        f"\nrecovery: {total / 2**20:.0f} MiB on the node ({BULK_BYTES / 2**20:.0f} MiB written "
        f"in {produce_s:.1f}s), {scanned / 2**20:.2f} MiB rescanned after kill -9; "
        f"logs opened in {load_ms:.0f} ms (sum over partitions); ready {ready_s:.1f}s and "
        f"back in every ISR {isr_s:.1f}s after the restart (the controller had taken it out "
        f"{out_s:.1f}s after the kill)"
    )
