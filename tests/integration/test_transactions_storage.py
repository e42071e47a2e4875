"""Storage side of transactions (issue 15 §2) on the real cluster: transactional batches built
with the project's encoder and appended through Storage.Append, COMMIT/ABORT markers through
Storage.WriteTxnMarkers (what the transaction coordinator calls), read by confluent-kafka
with ``isolation.level=read_committed`` / ``read_uncommitted``; fencing errors; the same
``.txnindex`` on every replica; after a kill -9 of the leader the new leader answers
read_committed fetches exactly as the old one did.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from services.cli.local_cluster import LocalCluster
from services.common.errors import ErrorCode
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from tests.integration.kafka_support import (
    STORAGE_NODES,
    TopicFactory,
    cli_ok,
    wait_for,
    zk_partition_state,
)
from tests.integration.txn_support import (
    READ_COMMITTED,
    TxnPartition,
    confluent_values,
    init_producer_id,
    read_committed_position,
    txn_index_files,
)

pytestmark = pytest.mark.integration

COORDINATOR_EPOCH = 3


def committed_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    return confluent_values(bootstrap, topic, [0], expected, "read_committed")[0]


def all_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    return confluent_values(bootstrap, topic, [0], expected, "read_uncommitted")[0]


def test_markers_bound_read_committed_and_survive_leader_failover(
    cluster: LocalCluster, topic: TopicFactory, bootstrap: str
) -> None:
    name = topic(partitions=1)
    pid, epoch = init_producer_id(bootstrap)
    t = TxnPartition(cluster, name, pid, epoch, coordinator_epoch=COORDINATOR_EPOCH)

    async def scenario() -> dict[str, Any]:
        # a committed transaction, an aborted one, and one left open
        assert await t.append([b"c0", b"c1"]) == 0
        assert await t.append([b"c2"]) == 2
        committed = await t.marker(True)
        assert (committed.error_code, committed.offset) == (0, 3)
        assert await t.append([b"a0", b"a1"]) == 4
        aborted = await t.marker(False)
        assert (aborted.error_code, aborted.offset) == (0, 6)
        assert await t.append([b"o0", b"o1"]) == 7

        rc = await t.fetch(READ_COMMITTED)
        ru = await t.fetch(0)
        assert (rc.error_code, rc.high_watermark, rc.last_stable_offset) == (0, 9, 7)
        assert [(a.producer_id, a.first_offset) for a in rc.aborted_transactions] == [(pid, 4)]
        assert len(rc.records) < len(ru.records)  # stops at the open transaction
        assert list(ru.aborted_transactions) == []
        assert await t.latest(READ_COMMITTED) == 7
        assert await t.latest(0) == 9

        # fencing, as Kafka: an older coordinator epoch (an older producer epoch: below)
        stale = await t.marker(False, coordinator_epoch=COORDINATOR_EPOCH - 1)
        assert stale.error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED, stale
        # not the leader / unknown partition
        follower = next(b for b in t.isr() if b != t.leader())
        wrong = await t.marker(False, node=follower)
        assert wrong.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, wrong
        unknown = await t.marker(False, topic=name + "-nope")
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, unknown
        return {"rc": rc}

    before = asyncio.run(scenario())
    # a real read_committed client sees the committed transaction only and stops at the LSO
    assert committed_values(bootstrap, name, 3) == [b"c0", b"c1", b"c2"]
    assert read_committed_position(bootstrap, name) == 7
    assert all_values(bootstrap, name, 7) == [b"c0", b"c1", b"c2", b"a0", b"a1", b"o0", b"o1"]

    # every replica built the same transaction index from the replicated markers
    indexes = txn_index_files(cluster, name)
    assert len(indexes) == 3 and len(set(indexes.values())) == 1, indexes
    assert len(indexes[t.leader()]) == 34  # one aborted transaction, Kafka's entry size

    # dump-log shows the markers and the index as Kafka's DumpLogSegments does
    pdir = cluster.storage_dirs(t.leader())[0] / f"{name}-0"
    seg = pdir / "00000000000000000000.log"
    dump = cli_ok("dump-log", "--print-data-log", "--files", str(seg)).splitlines()
    markers = [line for line in dump if "isControl: true" in line]
    assert len(markers) == 2 and all("isTransactional: true" in m for m in markers), dump
    assert any(line.endswith("endTxnMarker: COMMIT coordinatorEpoch: 3") for line in dump)
    assert any(line.endswith("endTxnMarker: ABORT coordinatorEpoch: 3") for line in dump)
    assert "| offset: 0 " in dump[3] and dump[3].endswith("payload: c0")
    txn_dump = cli_ok("dump-log", "--files", str(seg.with_suffix(".txnindex"))).splitlines()
    assert txn_dump[1] == (
        f"version: 0 producerId: {pid} firstOffset: 4 lastOffset: 6 lastStableOffset: 7"
    )

    # kill -9 of the leader: the new leader has the same LSO and aborted list
    old = t.leader()
    cluster.kill("storage", old)
    try:
        wait_for("a new leader", lambda: t.leader() not in (old, -1), 30)

        async def after_failover() -> pb.PartitionFetchResult:
            deadline = time.monotonic() + 30
            while True:  # until the new leader's HW covers its log (first fetches of followers)
                rc = await t.fetch(READ_COMMITTED)
                if rc.error_code == 0 and rc.high_watermark == 9:
                    return rc
                assert time.monotonic() < deadline, rc
                await asyncio.sleep(0.2)

        rc2 = asyncio.run(after_failover())
        rc1 = before["rc"]
        assert rc2.last_stable_offset == rc1.last_stable_offset == 7
        assert rc2.records == rc1.records
        assert list(rc2.aborted_transactions) == list(rc1.aborted_transactions)

        # the new leader ends the open transaction with a bumped epoch (abort after timeout)
        async def finish() -> None:
            done = await t.marker(False, epoch=epoch + 1)
            assert (done.error_code, done.offset) == (0, 9)
            fenced = await t.marker(True)  # the old epoch is fenced now
            assert fenced.error_code == ErrorCode.INVALID_PRODUCER_EPOCH, fenced
            rc = await t.fetch(READ_COMMITTED)
            assert rc.last_stable_offset == rc.high_watermark == 10
            assert [(a.producer_id, a.first_offset) for a in rc.aborted_transactions] == [
                (pid, 4),
                (pid, 7),
            ]

        asyncio.run(finish())
        assert committed_values(bootstrap, name, 3) == [b"c0", b"c1", b"c2"]
    finally:
        cluster.start_process("storage", old)
    wait_for(
        "the restarted node back in the ISR",
        lambda: (
            sorted(zk_partition_state(cluster.zk_connect, name, 0)["isr"])
            == sorted(range(STORAGE_NODES))
        ),
        60,
    )
    # the restarted replica rebuilt its index from its own log and the leader's
    indexes = txn_index_files(cluster, name)
    assert len(set(indexes.values())) == 1 and len(indexes[old]) == 68, indexes
