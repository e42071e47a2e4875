"""Issue 15 acceptance 6: a restart of every storage node rebuilds the transaction state.

Transactions span the 3 partitions of a topic (RF 3, small segments, so markers, data and
``.txnindex`` files spread over many segments): committed, aborted, and one left open. The
read_committed view - each leader's Fetch answer from offset 0 (records, LSO, HW, aborted
transactions) compared byte for byte, ListOffsets, every replica's ``.txnindex`` files, and
what confluent-kafka, kafka-python and aiokafka read with read_committed - must be the same
after all storage nodes stop cleanly and start again, and again after all are killed with
SIGKILL and started again. Then the open transaction commits and becomes visible.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from services.cli.local_cluster import LocalCluster
from tests.integration.kafka_support import STORAGE_NODES, running_cluster, wait_for_topic
from tests.integration.txn_support import (
    READ_COMMITTED,
    TxnPartition,
    aiokafka_committed,
    confluent_values,
    init_producer_id,
    kafka_python_committed,
    txn_index_files,
)

pytestmark = pytest.mark.e2e

TOPIC = "txn-restart"
PARTITIONS = (0, 1, 2)
TRANSACTIONS = 12
RECORDS = 4  # per transaction and partition


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path, gateways=1, storage_nodes=STORAGE_NODES, controllers=1, group_coordinators=0
    ) as c:
        yield c


def outcome(i: int) -> bool | None:
    """Transaction i commits (True), aborts (False) or, the last one, stays open (None)."""
    if i == TRANSACTIONS - 1:
        return None
    return i % 3 != 1


async def write(parts: list[TxnPartition]) -> None:
    for i in range(TRANSACTIONS):
        for p in parts:
            await p.append([b"t%d-p%d-r%d" % (i, p.partition, r) for r in range(RECORDS)])
        result = outcome(i)
        if result is not None:
            for p in parts:
                done = await p.marker(result)
                assert done.error_code == 0, done


def committed_expected() -> dict[int, list[bytes]]:
    return {
        part: [
            b"t%d-p%d-r%d" % (i, part, r)
            for i in range(TRANSACTIONS)
            if outcome(i)
            for r in range(RECORDS)
        ]
        for part in PARTITIONS
    }


def client_views(bootstrap: str) -> list[dict[int, list[bytes]]]:
    n = sum(len(v) for v in committed_expected().values())
    return [
        confluent_values(bootstrap, TOPIC, PARTITIONS, n, "read_committed"),
        kafka_python_committed(bootstrap, TOPIC, PARTITIONS, n),
        asyncio.run(aiokafka_committed(bootstrap, TOPIC, PARTITIONS, n)),
    ]


def restart_all(cluster: LocalCluster, sig: int) -> None:
    for i in range(STORAGE_NODES):
        cluster.kill("storage", i, sig)
    for i in range(STORAGE_NODES):
        cluster.wait_exit("storage", i, timeout=30)
    for i in range(STORAGE_NODES):  # all at once: each waits for the others' logs as followers
        cluster.start_process("storage", i, wait=False)


def test_every_storage_node_restarts_into_the_same_read_committed_view(
    cluster: LocalCluster,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    config = {"segment.bytes": "1024", "min.insync.replicas": "2"}
    admin.create_topics([NewTopic(TOPIC, len(PARTITIONS), 3, config=config)])[TOPIC].result(60)
    wait_for_topic(admin, TOPIC, len(PARTITIONS))
    pid, epoch = init_producer_id(cluster.bootstrap)
    parts = [TxnPartition(cluster, TOPIC, pid, epoch, partition=p) for p in PARTITIONS]
    asyncio.run(write(parts))

    # every partition: the data of all transactions plus one marker per ended transaction
    end = {p: TRANSACTIONS * RECORDS + TRANSACTIONS - 1 for p in PARTITIONS}
    before = asyncio.run(view_at(parts, end))
    indexes = {p: txn_index_files(cluster, TOPIC, p) for p in PARTITIONS}
    for p in PARTITIONS:  # every replica has the same index; 4 aborted transactions
        assert len(set(indexes[p].values())) == 1 and len(indexes[p][0]) == 4 * 34, indexes[p]
        segments = list(cluster.storage_dirs(0)[0].joinpath(f"{TOPIC}-{p}").glob("*.log"))
        assert len(segments) >= 3  # the transactions spread over several segments
    first_open = {p: before[f"lso-{p}"][0] for p in PARTITIONS}
    assert all(lso < before[f"lso-{p}"][1] for p, lso in first_open.items())  # LSO < HW
    views = client_views(cluster.bootstrap)
    assert all(v == committed_expected() for v in views)

    for sig in (signal.SIGTERM, signal.SIGKILL):
        restart_all(cluster, sig)
        after = asyncio.run(view_at(parts, end))
        assert after == before, f"read_committed view changed after restart with {sig!r}"
        assert {p: txn_index_files(cluster, TOPIC, p) for p in PARTITIONS} == indexes
        n = sum(len(v) for v in committed_expected().values())
        assert confluent_values(cluster.bootstrap, TOPIC, PARTITIONS, n, "read_committed") == (
            committed_expected()
        )

    # the open transaction commits: its records become visible, the LSO reaches the HW
    async def commit_open() -> None:
        for p in parts:
            done = await p.marker(True)
            assert done.error_code == 0, done
        for p in parts:
            rc = await p.fetch(READ_COMMITTED)
            assert rc.last_stable_offset == rc.high_watermark

    asyncio.run(commit_open())
    last = TRANSACTIONS - 1
    expected = {
        part: committed_expected()[part]
        + [b"t%d-p%d-r%d" % (last, part, r) for r in range(RECORDS)]
        for part in PARTITIONS
    }
    n = sum(len(v) for v in expected.values())
    assert confluent_values(cluster.bootstrap, TOPIC, PARTITIONS, n, "read_committed") == expected


async def view_at(parts: list[TxnPartition], expected_hw: dict[int, int]) -> dict[str, Any]:
    """Each leader's read_committed Fetch answer from offset 0 (serialized) and its latest
    offsets (read_committed, read_uncommitted), once the partition's high watermark is at
    ``expected_hw`` with a full ISR."""
    out: dict[str, Any] = {}
    for p in parts:
        deadline = time.monotonic() + 90
        last: Any = None
        while True:
            try:
                rc = await p.fetch(READ_COMMITTED)
                last = rc
                if (
                    rc.error_code == 0
                    and rc.high_watermark == expected_hw[p.partition]
                    and len(p.isr()) == STORAGE_NODES
                ):
                    break
            except Exception as exc:  # the node is still starting
                last = exc
            assert time.monotonic() < deadline, f"partition {p.partition}: {last}"
            await asyncio.sleep(0.3)
        out[f"fetch-{p.partition}"] = rc.SerializeToString(deterministic=True)
        out[f"lso-{p.partition}"] = (await p.latest(READ_COMMITTED), await p.latest(0))
    return out
