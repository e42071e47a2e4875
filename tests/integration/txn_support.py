"""Helpers for the storage-side transaction tests: a producer id from the gateway, transactional
batches appended through Storage.Append, markers through Storage.WriteTxnMarkers, and the
read_committed view of a partition (storage Fetch answers, real clients, ``.txnindex`` files).
Until the transaction coordinator exists, the tests play its part with these."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from typing import Any

import grpc
from confluent_kafka import Consumer, TopicPartition

from services.cli.local_cluster import LocalCluster
from services.common.protocol.api_keys import ApiKey
from services.common.protocol.messages import decode_response, encode_request
from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.rpc.kafkapy.v1 import storage_pb2_grpc as pb_grpc
from services.storage.log import files
from tests.integration.kafka_support import (
    STORAGE_NODES,
    consume_confluent,
    read_frame,
    split_bootstrap,
    zk_partition_state,
)

READ_COMMITTED = 1
READ_UNCOMMITTED = 0


def init_producer_id(bootstrap: str) -> tuple[int, int]:
    """(producer id, epoch) from the gateway's InitProducerId (idempotent: no transactional id)."""
    host, port = split_bootstrap(bootstrap)
    with socket.create_connection((host, port), timeout=10) as sock:
        body = {"transactional_id": None, "transaction_timeout_ms": -1}
        sock.sendall(encode_request(ApiKey.INIT_PRODUCER_ID, 1, 9, "txn-test", body))
        frame = read_frame(sock)
    assert frame is not None
    corr, resp = decode_response(ApiKey.INIT_PRODUCER_ID, 1, frame)
    assert corr == 9 and resp["error_code"] == 0, resp
    return resp["producer_id"], resp["producer_epoch"]


class TxnPartition:
    """One producer's transactional writes to one partition, through its current leader."""

    def __init__(
        self,
        cluster: LocalCluster,
        topic: str,
        pid: int,
        epoch: int,
        partition: int = 0,
        coordinator_epoch: int = 3,
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partition = partition
        self.pid = pid
        self.epoch = epoch
        self.coordinator_epoch = coordinator_epoch
        self.seq = 0

    def leader(self) -> int:
        return int(
            zk_partition_state(self.cluster.zk_connect, self.topic, self.partition)["leader"]
        )

    def isr(self) -> list[int]:
        state = zk_partition_state(self.cluster.zk_connect, self.topic, self.partition)
        return [int(b) for b in state["isr"]]

    async def call(self, node: int, method: str, request: Any) -> Any:
        async with grpc.aio.insecure_channel(self.cluster.address("storage", node)) as ch:
            return await getattr(pb_grpc.StorageStub(ch), method)(request, timeout=20)

    async def append(
        self, values: Sequence[bytes], *, epoch: int | None = None, timestamp: int | None = None
    ) -> int:
        """Append one transactional batch (acks=all, records stamped ``timestamp``, default
        now); returns its base offset."""
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        recs = [Record(timestamp=ts, value=v) for v in values]
        batch = build_batch(
            recs,
            producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch,
            base_sequence=self.seq,
            is_transactional=True,
        )
        self.seq += len(values)
        part = pb.PartitionAppend(
            topic=self.topic, partition=self.partition, records=batch, current_leader_epoch=-1
        )
        # no transactional id: the test plays a coordinator-verified append (no KIP-890 check)
        req = pb.AppendRequest(acks=-1, timeout_ms=10000, partitions=[part])
        r = (await self.call(self.leader(), "Append", req)).partitions[0]
        assert r.error_code == 0, r
        return int(r.base_offset)

    async def marker(
        self,
        commit: bool,
        *,
        epoch: int | None = None,
        coordinator_epoch: int | None = None,
        node: int | None = None,
        topic: str | None = None,
    ) -> pb.TxnMarkerPartitionResult:
        """WriteTxnMarkers for this partition, as the transaction coordinator sends it."""
        marker = pb.WritableTxnMarker(
            producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch,
            transaction_result=commit,
            coordinator_epoch=(
                self.coordinator_epoch if coordinator_epoch is None else coordinator_epoch
            ),
            partitions=[pb.TxnMarkerPartition(topic=topic or self.topic, partition=self.partition)],
        )
        req = pb.WriteTxnMarkersRequest(timeout_ms=10000, markers=[marker])
        resp = await self.call(self.leader() if node is None else node, "WriteTxnMarkers", req)
        assert [m.producer_id for m in resp.markers] == [self.pid]
        return resp.markers[0].partitions[0]

    async def fetch(self, isolation: int) -> pb.PartitionFetchResult:
        """The leader's whole answer to a consumer fetch from offset 0 (no wait)."""
        part = pb.PartitionFetch(
            topic=self.topic,
            partition=self.partition,
            fetch_offset=0,
            partition_max_bytes=1 << 24,
            current_leader_epoch=-1,
        )
        req = pb.FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 24,
            isolation_level=isolation,
            partitions=[part],
        )
        return (await self.call(self.leader(), "Fetch", req)).partitions[0]

    async def latest(self, isolation: int) -> int:
        """ListOffsets latest (-1) on the leader."""
        query = pb.PartitionOffsetQuery(
            topic=self.topic, partition=self.partition, timestamp=-1, current_leader_epoch=-1
        )
        req = pb.ListOffsetsRequest(isolation_level=isolation, partitions=[query])
        r = (await self.call(self.leader(), "ListOffsets", req)).partitions[0]
        assert r.error_code == 0, r
        return int(r.offset)


def confluent_values(
    bootstrap: str, topic: str, partitions: Sequence[int], expected: int, isolation: str
) -> dict[int, list[bytes]]:
    """Values per partition read by confluent-kafka with ``isolation.level`` = ``isolation``."""
    got = consume_confluent(
        bootstrap, topic, partitions, expected, extra_config={"isolation.level": isolation}
    )
    return {p: [r.rec.value for r in recs] for p, recs in got.items()}


def txn_index_files(cluster: LocalCluster, topic: str, partition: int = 0) -> dict[int, bytes]:
    """Every replica's ``.txnindex`` files of the partition, concatenated in offset order."""
    out = {}
    for i in range(STORAGE_NODES):
        for d in cluster.storage_dirs(i):
            pdir = d / f"{topic}-{partition}"
            if pdir.exists():
                paths = sorted(pdir.glob("*" + files.TXN_INDEX_SUFFIX))
                out[i] = b"".join(p.read_bytes() for p in paths)
    return out


def read_committed_position(bootstrap: str, topic: str, partition: int = 0) -> int:
    """Where a confluent-kafka read_committed consumer stands after polling a while: an open
    transaction holds it at the LSO."""
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
        c.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for msg in c.consume(100, timeout=0.3):
                assert msg.error() is None, msg.error()
        return int(c.position([TopicPartition(topic, partition)])[0].offset)
    finally:
        c.close()


def kafka_python_committed(
    bootstrap: str, topic: str, partitions: Sequence[int], expected: int, timeout: float = 60.0
) -> dict[int, list[bytes]]:
    """Values per partition read by kafka-python with ``isolation_level='read_committed'``;
    after ``expected`` records, a further poll must bring nothing (the LSO holds it)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_wait_ms=100,
    )
    out: dict[int, list[bytes]] = {p: [] for p in partitions}
    try:
        consumer.assign([KafkaTopicPartition(topic, p) for p in partitions])
        consumer.seek_to_beginning()
        total, deadline = 0, time.monotonic() + timeout
        while total < expected:
            assert time.monotonic() < deadline, f"kafka-python read {total}/{expected}"
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                out[tp.partition] += [m.value for m in msgs]
                total += len(msgs)
        assert not any(consumer.poll(timeout_ms=1000).values())
    finally:
        consumer.close()
    return out


async def aiokafka_committed(
    bootstrap: str, topic: str, partitions: Sequence[int], expected: int, limit_s: float = 60.0
) -> dict[int, list[bytes]]:
    """The same with aiokafka's ``isolation_level='read_committed'``."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    out: dict[int, list[bytes]] = {p: [] for p in partitions}
    try:
        tps = [AioTopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        total, deadline = 0, time.monotonic() + limit_s
        while total < expected:
            assert time.monotonic() < deadline, f"aiokafka read {total}/{expected}"
            for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                out[tp.partition] += [m.value for m in msgs]
                total += len(msgs)
        assert not any((await consumer.getmany(timeout_ms=1000)).values())
    finally:
        await consumer.stop()
    return out
