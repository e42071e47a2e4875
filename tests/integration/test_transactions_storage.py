"""Storage side of transactions (issue 15 §2) on the real cluster: transactional batches built
with the project's encoder and appended through Storage.Append, COMMIT/ABORT markers through
Storage.WriteTxnMarkers (what the transaction coordinator calls), read by confluent-kafka
with ``isolation.level=read_committed`` / ``read_uncommitted``; fencing errors; the same
``.txnindex`` on every replica; after a kill -9 of the leader the new leader answers
read_committed fetches exactly as the old one did.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Sequence
from typing import Any

import grpc
import pytest
from confluent_kafka import Consumer, TopicPartition

from services.cli.local_cluster import LocalCluster
from services.common.errors import ErrorCode
from services.common.protocol.api_keys import ApiKey
from services.common.protocol.messages import decode_response, encode_request
from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.rpc.kafkapy.v1 import storage_pb2_grpc as pb_grpc
from services.storage.log import files
from tests.integration.kafka_support import (
    STORAGE_NODES,
    TopicFactory,
    consume_confluent,
    read_frame,
    split_bootstrap,
    wait_for,
    zk_partition_state,
)

pytestmark = pytest.mark.integration

READ_COMMITTED = 1
COORDINATOR_EPOCH = 3


def init_producer_id(bootstrap: str) -> tuple[int, int]:
    """(producer id, epoch) from the gateway's InitProducerId (idempotent: no transactional id)."""
    host, port = split_bootstrap(bootstrap)
    with socket.create_connection((host, port), timeout=10) as sock:
        body = {"transactional_id": None, "transaction_timeout_ms": -1}
        sock.sendall(encode_request(ApiKey.INIT_PRODUCER_ID, 1, 9, "stxn-test", body))
        frame = read_frame(sock)
    assert frame is not None
    corr, resp = decode_response(ApiKey.INIT_PRODUCER_ID, 1, frame)
    assert corr == 9 and resp["error_code"] == 0, resp
    return resp["producer_id"], resp["producer_epoch"]


class Txns:
    """One producer writing transactional batches to one partition through its leader."""

    def __init__(self, cluster: LocalCluster, topic: str, pid: int, epoch: int) -> None:
        self.cluster = cluster
        self.topic = topic
        self.pid = pid
        self.epoch = epoch
        self.seq = 0

    def leader(self) -> int:
        return int(zk_partition_state(self.cluster.zk_connect, self.topic, 0)["leader"])

    async def call(self, node: int, method: str, request: Any) -> Any:
        async with grpc.aio.insecure_channel(self.cluster.address("storage", node)) as ch:
            return await getattr(pb_grpc.StorageStub(ch), method)(request, timeout=20)

    async def append(self, values: Sequence[bytes], *, epoch: int | None = None) -> int:
        recs = [Record(timestamp=int(time.time() * 1000), value=v) for v in values]
        batch = build_batch(
            recs,
            producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch,
            base_sequence=self.seq,
            is_transactional=True,
        )
        self.seq += len(values)
        req = pb.AppendRequest(
            acks=-1,
            timeout_ms=10000,
            transactional_id="stxn",
            partitions=[
                pb.PartitionAppend(
                    topic=self.topic, partition=0, records=batch, current_leader_epoch=-1
                )
            ],
        )
        resp = await self.call(self.leader(), "Append", req)
        r = resp.partitions[0]
        assert r.error_code == 0, r
        return int(r.base_offset)

    async def marker(
        self,
        commit: bool,
        *,
        epoch: int | None = None,
        coordinator_epoch: int = COORDINATOR_EPOCH,
        node: int | None = None,
        topic: str | None = None,
    ) -> pb.TxnMarkerPartitionResult:
        req = pb.WriteTxnMarkersRequest(
            timeout_ms=10000,
            markers=[
                pb.WritableTxnMarker(
                    producer_id=self.pid,
                    producer_epoch=self.epoch if epoch is None else epoch,
                    transaction_result=commit,
                    coordinator_epoch=coordinator_epoch,
                    partitions=[pb.TxnMarkerPartition(topic=topic or self.topic, partition=0)],
                )
            ],
        )
        resp = await self.call(self.leader() if node is None else node, "WriteTxnMarkers", req)
        assert [m.producer_id for m in resp.markers] == [self.pid]
        return resp.markers[0].partitions[0]

    async def fetch(self, isolation: int) -> pb.FetchResponse:
        req = pb.FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=isolation,
            partitions=[
                pb.PartitionFetch(
                    topic=self.topic,
                    partition=0,
                    fetch_offset=0,
                    partition_max_bytes=1 << 20,
                    current_leader_epoch=-1,
                )
            ],
        )
        return (await self.call(self.leader(), "Fetch", req)).partitions[0]

    async def latest(self, isolation: int) -> int:
        req = pb.ListOffsetsRequest(
            isolation_level=isolation,
            partitions=[
                pb.PartitionOffsetQuery(
                    topic=self.topic, partition=0, timestamp=-1, current_leader_epoch=-1
                )
            ],
        )
        r = (await self.call(self.leader(), "ListOffsets", req)).partitions[0]
        assert r.error_code == 0, r
        return int(r.offset)


def committed_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    got = consume_confluent(
        bootstrap, topic, [0], expected, extra_config={"isolation.level": "read_committed"}
    )
    return [r.rec.value for r in got[0]]


def all_values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    got = consume_confluent(
        bootstrap, topic, [0], expected, extra_config={"isolation.level": "read_uncommitted"}
    )
    return [r.rec.value for r in got[0]]


def txn_indexes(cluster: LocalCluster, topic: str) -> dict[int, bytes]:
    """Each replica's ``.txnindex`` bytes of the first segment."""
    out = {}
    for i in range(STORAGE_NODES):
        for d in cluster.storage_dirs(i):
            path = files.txn_index_file(d / f"{topic}-0", 0)
            if path.parent.exists():
                out[i] = path.read_bytes() if path.exists() else b""
    return out


def blocked_at_lso(bootstrap: str, topic: str, lso: int) -> int:
    """A read_committed consumer's position after polling a while: it stops at the LSO."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lso-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for msg in c.consume(100, timeout=0.3):
                assert msg.error() is None, msg.error()
        return int(c.position([TopicPartition(topic, 0)])[0].offset)
    finally:
        c.close()


def test_markers_bound_read_committed_and_survive_leader_failover(
    cluster: LocalCluster, topic: TopicFactory, bootstrap: str
) -> None:
    name = topic(partitions=1)
    pid, epoch = init_producer_id(bootstrap)
    t = Txns(cluster, name, pid, epoch)

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

        # fencing, as Kafka: an older coordinator epoch, then an older producer epoch
        stale = await t.marker(False, coordinator_epoch=COORDINATOR_EPOCH - 1)
        assert stale.error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED, stale
        # not the leader / unknown partition
        follower = next(b for b in rc_replicas() if b != t.leader())
        wrong = await t.marker(False, node=follower)
        assert wrong.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, wrong
        unknown = await t.marker(False, topic=name + "-nope")
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, unknown
        return {"rc": rc}

    def rc_replicas() -> list[int]:
        return [int(b) for b in zk_partition_state(cluster.zk_connect, name, 0)["isr"]]

    before = asyncio.run(scenario())
    # a real read_committed client sees the committed transaction only and stops at the LSO
    assert committed_values(bootstrap, name, 3) == [b"c0", b"c1", b"c2"]
    assert blocked_at_lso(bootstrap, name, 7) == 7
    assert all_values(bootstrap, name, 7) == [b"c0", b"c1", b"c2", b"a0", b"a1", b"o0", b"o1"]

    # every replica built the same transaction index from the replicated markers
    indexes = txn_indexes(cluster, name)
    assert len(indexes) == 3 and len(set(indexes.values())) == 1, indexes
    assert len(indexes[t.leader()]) == 34  # one aborted transaction, Kafka's entry size

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
    indexes = txn_indexes(cluster, name)
    assert len(set(indexes.values())) == 1 and len(indexes[old]) == 68, indexes
