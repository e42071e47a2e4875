"""Replica manager logic: controller orders and fencing, appends, fetches, list offsets.

Uses a small in-memory log with the log engine's interface, so these tests cover the service's
own rules (roles, epochs, errors per partition, acks, HW bookkeeping, long poll) only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import BatchHeader, iter_headers, set_base_offset
from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.appends import append
from services.storage.delete_records import delete_records
from services.storage.fetches import fetch
from services.storage.metrics import StorageMetrics
from services.storage.offsets import list_offsets
from services.storage.replica_manager import ReplicaManager

ME = 1


# ---- an in-memory log with the engine's interface ---------------------------------------------
@dataclass
class FakeAppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    duplicate: bool = False


@dataclass
class FakeReadInfo:
    records: bytes
    first_offset: int | None
    log_start_offset: int
    log_end_offset: int


class FakeEpochCache:
    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        if not self.entries or epoch > self.entries[-1][0]:
            self.entries.append((epoch, start_offset))

    def assign_unwritten(self, epoch: int, start_offset: int) -> bool:
        before = len(self.entries)
        self.assign(epoch, start_offset)
        return len(self.entries) != before

    def write(self) -> None:
        pass

    def epoch_for_offset(self, offset: int) -> int | None:
        found = None
        for epoch, start in self.entries:
            if start <= offset:
                found = epoch
        return found


class FakeLog:
    def __init__(self, dir: Path, config: Mapping[str, Any]) -> None:
        self.dir = dir
        self.config = dict(config)
        self.batches: list[tuple[BatchHeader, bytes]] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self._hw = 0
        self.recovery_point = 0
        self.leader_epoch_cache = FakeEpochCache()
        self.closed = False
        self.deleted = False
        self.fail_appends = False
        self.topic_id: bytes | None = None
        self.retention_runs = 0

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._hw = min(max(value, self.log_start_offset), self.log_end_offset)

    @property
    def last_stable_offset(self) -> int:  # no transactions here
        return self._hw

    def append_as_leader(
        self,
        records: bytearray,
        headers: list[BatchHeader],
        leader_epoch: int,
        now_ms: int | None = None,
        *,
        origin: Any = None,
    ) -> FakeAppendInfo:
        if self.fail_appends:
            raise RuntimeError("disk on fire")
        first = self.log_end_offset
        for h in headers:
            set_base_offset(records, h.position, self.log_end_offset, leader_epoch)
            self.leader_epoch_cache.assign(leader_epoch, self.log_end_offset)
            data = bytes(records[h.position : h.position + h.size])
            self.batches.append((next(iter_headers(data)), data))
            self.log_end_offset += h.last_offset_delta + 1
        return FakeAppendInfo(
            first,
            self.log_end_offset - 1,
            -1,
            self.log_start_offset,
            sum(h.record_count for h in headers),
        )

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FakeReadInfo:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} out of range")
        out = b""
        first = None
        for h, data in self.batches:
            if h.last_offset < offset:
                continue
            if max_offset is not None and h.base_offset >= max_offset:
                break
            if len(out) + len(data) > max_bytes and not (min_one_batch and not out):
                break
            first = h.base_offset if first is None else first
            out += data
        return FakeReadInfo(out, first, self.log_start_offset, self.log_end_offset)

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        for h, _ in self.batches:
            if h.max_timestamp >= ts:
                return h.base_offset, h.max_timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        best = max(self.batches, key=lambda b: b[0].max_timestamp, default=None)
        return None if best is None else (best[0].base_offset, best[0].max_timestamp)

    def delete_retained_segments(self, now_ms: int) -> int:
        self.retention_runs += 1
        return 0

    def retention_due_ms(self) -> int | None:
        return None

    def maybe_flush(self, now_ms: int, max_unflushed_ms: int = 0) -> bool:
        return False

    def flush(self) -> None:
        self.recovery_point = self.log_end_offset

    def close(self) -> None:
        self.flush()
        self.closed = True

    def delete(self) -> None:
        self.deleted = True
        self.closed = True

    def update_config(self, cfg: Any) -> None:
        self.config = dict(cfg)


@dataclass
class FakeBackend:
    opened: dict[Path, FakeLog] = field(default_factory=dict)

    def open(
        self,
        dir: Path,
        topic: str,
        partition: int,
        config: Mapping[str, Any],
        *,
        topic_id: bytes | None,
        recovery_point: int,
        clean_shutdown: bool,
        log_start_offset: int | None,
    ) -> FakeLog:
        lg = self.opened.get(dir) or FakeLog(dir, config)
        lg.topic_id = lg.topic_id or topic_id
        self.opened[dir] = lg
        return lg

    def make_config(self, config: Mapping[str, Any]) -> Any:
        return dict(config)

    def size(self, log: FakeLog) -> int:
        return sum(len(d) for _, d in log.batches)

    def segment_count(self, log: FakeLog) -> int | None:
        return 1

    def topic_id(self, log: FakeLog) -> bytes | None:
        return log.topic_id

    def set_topic_id(self, log: FakeLog, topic_id: bytes) -> None:
        log.topic_id = topic_id


# ---- helpers --------------------------------------------------------------------------------
@pytest.fixture
def rm(tmp_path: Path) -> ReplicaManager:
    return ReplicaManager(
        ME,
        tmp_path,
        {},
        backend=FakeBackend(),  # type: ignore[arg-type]
        metrics=StorageMetrics(CollectorRegistry()),
    )


def batch(*values: bytes, ts: int = 1000) -> bytes:
    return build_batch([Record(timestamp=ts + i, value=v) for i, v in enumerate(values)])


def state(
    topic: str = "t",
    partition: int = 0,
    *,
    leader: int = ME,
    epoch: int = 0,
    isr: tuple[int, ...] = (ME,),
    replicas: tuple[int, ...] | None = None,
    config: dict[str, str] | None = None,
) -> pb.PartitionState:
    return pb.PartitionState(
        topic=topic,
        partition=partition,
        leader=leader,
        leader_epoch=epoch,
        isr=list(isr),
        replicas=list(replicas or isr),
        config=config or {},
    )


async def order(
    rm: ReplicaManager, *states: pb.PartitionState, controller_epoch: int = 1
) -> pb.UpdatePartitionsResponse:
    return await rm.update_partitions(
        pb.UpdatePartitionsRequest(
            controller_id=100, controller_epoch=controller_epoch, partitions=list(states)
        )
    )


async def produce(
    rm: ReplicaManager,
    *parts: tuple[str, int, bytes],
    acks: int = 1,
    timeout_ms: int = 1000,
    epoch: int = -1,
) -> list[pb.PartitionAppendResult]:
    req = pb.AppendRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        partitions=[
            pb.PartitionAppend(topic=t, partition=p, records=r, current_leader_epoch=epoch)
            for t, p, r in parts
        ],
    )
    return list((await append(rm, req)).partitions)


def fetch_req(
    *parts: tuple[str, int, int],
    replica_id: int = -1,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 1 << 20,
    partition_max_bytes: int = 1 << 20,
    epoch: int = -1,
) -> pb.FetchRequest:
    return pb.FetchRequest(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        partitions=[
            pb.PartitionFetch(
                topic=t,
                partition=p,
                fetch_offset=o,
                partition_max_bytes=partition_max_bytes,
                current_leader_epoch=epoch,
            )
            for t, p, o in parts
        ],
    )


def offsets_of(records: bytes) -> list[int]:
    return [h.base_offset for h in iter_headers(records)]


# ---- UpdatePartitions (LeaderAndIsr) -------------------------------------------------------
async def test_update_partitions_creates_log_and_leads(rm: ReplicaManager) -> None:
    resp = await order(rm, state(epoch=3))
    assert resp.error_code == 0
    assert [(e.topic, e.partition, e.error_code) for e in resp.partitions] == [("t", 0, 0)]
    p = rm.get("t", 0)
    assert p is not None and p.is_leader and p.leader_epoch == 3
    assert p.log.leader_epoch_cache.latest_epoch == 3
    [r] = await produce(rm, ("t", 0, batch(b"a", b"b")))
    assert (r.error_code, r.base_offset) == (0, 0)
    assert p.high_watermark == 2  # ISR = {self}: HW = LEO at once


async def test_stale_controller_epoch_is_rejected(rm: ReplicaManager) -> None:
    await order(rm, state(epoch=0), controller_epoch=5)
    resp = await order(rm, state(epoch=1, leader=2, isr=(2, ME)), controller_epoch=4)
    assert resp.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    p = rm.get("t", 0)
    assert p is not None and p.is_leader and p.leader_epoch == 0  # unchanged
    assert rm.controller_epoch == 5
    # the same epoch is accepted, and a newer one moves the highest seen
    assert (await order(rm, state(epoch=1), controller_epoch=5)).error_code == 0
    assert (await order(rm, state(epoch=2), controller_epoch=6)).error_code == 0
    assert rm.controller_epoch == 6


async def test_state_for_other_brokers_is_refused(rm: ReplicaManager) -> None:
    resp = await order(rm, state(leader=2, isr=(2, 3)), state("u", 0))
    assert [e.error_code for e in resp.partitions] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0]
    assert rm.get("t", 0) is None and rm.get("u", 0) is not None


async def test_older_leader_epoch_is_ignored_per_partition(rm: ReplicaManager) -> None:
    await order(rm, state("t", 0, epoch=5), state("t", 1, epoch=5))
    resp = await order(rm, state("t", 0, epoch=4, leader=2, isr=(2, ME)), state("t", 1, epoch=6))
    assert [e.error_code for e in resp.partitions] == [ErrorCode.STALE_CONTROLLER_EPOCH, 0]
    p0, p1 = rm.get("t", 0), rm.get("t", 1)
    assert p0 is not None and p0.is_leader and p0.leader_epoch == 5
    assert p1 is not None and p1.leader_epoch == 6


async def test_equal_leader_epoch_updates_config_and_isr(rm: ReplicaManager) -> None:
    await order(rm, state(epoch=2, isr=(ME,), replicas=(ME, 2)))
    p = rm.get("t", 0)
    assert p is not None and p.min_insync_replicas == 1
    resp = await order(
        rm,
        state(
            epoch=2,
            isr=(ME, 2),
            replicas=(ME, 2),
            config={"min.insync.replicas": "2", "retention.ms": "5000"},
        ),
    )
    assert resp.partitions[0].error_code == 0
    assert p.isr == (ME, 2) and p.min_insync_replicas == 2
    assert p.log.config["retention.ms"] == 5000  # pushed to the log
    assert p.log.leader_epoch_cache.entries == [(2, 0)]  # no new epoch entry


async def test_invalid_topic_config_is_a_partition_error(rm: ReplicaManager) -> None:
    resp = await order(rm, state(config={"retention.ms": "soon"}), state("u", 0))
    assert [e.error_code for e in resp.partitions] == [ErrorCode.INVALID_CONFIG, 0]
    assert rm.get("t", 0) is None


async def test_follower_does_not_take_appends(rm: ReplicaManager) -> None:
    await order(rm, state(leader=2, epoch=1, isr=(2, ME)))
    p = rm.get("t", 0)
    assert p is not None and not p.is_leader and p.leader_id == 2
    [r] = await produce(rm, ("t", 0, batch(b"x")))
    assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and r.base_offset == -1
    assert r.error_message


async def test_topic_id_is_recorded_and_mismatch_refused(rm: ReplicaManager) -> None:
    tid, other = bytes(range(16)), bytes(range(1, 17))
    s = state()
    s.topic_id = tid
    await order(rm, s)
    p = rm.get("t", 0)
    assert p is not None and p.topic_id == tid and p.log.topic_id == tid
    s2 = state(epoch=1)
    s2.topic_id = other
    resp = await order(rm, s2)
    assert resp.partitions[0].error_code == ErrorCode.INCONSISTENT_TOPIC_ID


# ---- StopReplicas ------------------------------------------------------------------------
async def test_stop_replicas_fencing_and_delete(rm: ReplicaManager) -> None:
    await order(rm, state("t", 0, epoch=3), state("t", 1, epoch=3), controller_epoch=2)
    stale = await rm.stop_replicas(
        pb.StopReplicasRequest(
            controller_epoch=1,
            delete_partitions=True,
            partitions=[pb.StopReplica(topic="t", partition=0, leader_epoch=3)],
        )
    )
    assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH and rm.get("t", 0) is not None
    log0 = rm.get("t", 0).log  # type: ignore[union-attr]
    resp = await rm.stop_replicas(
        pb.StopReplicasRequest(
            controller_epoch=2,
            delete_partitions=True,
            partitions=[
                pb.StopReplica(topic="t", partition=0, leader_epoch=3),
                pb.StopReplica(topic="t", partition=1, leader_epoch=2),
                pb.StopReplica(topic="gone", partition=0, leader_epoch=-2),
            ],
        )
    )
    assert [e.error_code for e in resp.partitions] == [0, ErrorCode.FENCED_LEADER_EPOCH, 0]
    assert rm.get("t", 0) is None and log0.deleted  # type: ignore[attr-defined]
    assert rm.get("t", 1) is not None
    [r] = await produce(rm, ("t", 0, batch(b"x")))
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_stop_without_delete_keeps_the_log_but_stops_serving(rm: ReplicaManager) -> None:
    await order(rm, state(epoch=1))
    await rm.stop_replicas(
        pb.StopReplicasRequest(
            controller_epoch=1, partitions=[pb.StopReplica(topic="t", partition=0, leader_epoch=-1)]
        )
    )
    p = rm.get("t", 0)
    assert p is not None and not p.is_leader and not p.log.deleted  # type: ignore[attr-defined]
    [r] = await produce(rm, ("t", 0, batch(b"x")))
    assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


# ---- Append -----------------------------------------------------------------------------------
async def test_append_errors_are_per_partition(rm: ReplicaManager) -> None:
    await order(rm, state("t", 0, epoch=4), state("t", 1, epoch=4), state("t", 2, epoch=4))
    corrupt = bytearray(batch(b"x"))
    corrupt[-1] ^= 0xFF  # CRC no longer matches
    old_magic = bytearray(batch(b"y"))
    old_magic[16] = 1
    rm.get("t", 2).log.fail_appends = True  # type: ignore[union-attr]
    results = await produce(
        rm,
        ("t", 0, bytes(corrupt)),
        ("t", 1, batch(b"ok")),
        ("nope", 0, batch(b"z")),
        ("t", 0, bytes(old_magic)),
        ("t", 2, batch(b"boom")),
    )
    assert [r.error_code for r in results] == [
        ErrorCode.CORRUPT_MESSAGE,
        0,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    ]
    assert all(r.error_message for r in results if r.error_code)
    assert results[1].base_offset == 0 and results[1].log_start_offset == 0
    # the service keeps working for the failed partition once the fault is gone
    rm.get("t", 2).log.fail_appends = False  # type: ignore[union-attr]
    [r] = await produce(rm, ("t", 2, batch(b"again")))
    assert r.error_code == 0


async def test_leader_epoch_checks_on_append(rm: ReplicaManager) -> None:
    await order(rm, state(epoch=4))
    assert (await produce(rm, ("t", 0, batch(b"x")), epoch=3))[
        0
    ].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert (await produce(rm, ("t", 0, batch(b"x")), epoch=5))[
        0
    ].error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert (await produce(rm, ("t", 0, batch(b"x")), epoch=4))[0].error_code == 0


async def test_invalid_acks(rm: ReplicaManager) -> None:
    await order(rm, state())
    [r] = await produce(rm, ("t", 0, batch(b"x")), acks=2)
    assert r.error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert rm.get("t", 0).log.log_end_offset == 0  # type: ignore[union-attr]


async def test_acks_all_needs_min_insync_replicas(rm: ReplicaManager) -> None:
    await order(rm, state(isr=(ME,), replicas=(ME, 2), config={"min.insync.replicas": "2"}))
    [r] = await produce(rm, ("t", 0, batch(b"x")), acks=-1)
    assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert rm.get("t", 0).log.log_end_offset == 0  # type: ignore[union-attr]
    [r] = await produce(rm, ("t", 0, batch(b"x")), acks=1)  # acks=1 does not care
    assert r.error_code == 0


async def test_acks_all_rf1_answers_at_once(rm: ReplicaManager) -> None:
    await order(rm, state())
    started = time.monotonic()
    [r] = await produce(rm, ("t", 0, batch(b"a", b"b", b"c")), acks=-1, timeout_ms=5000)
    assert r.error_code == 0 and r.base_offset == 0
    assert time.monotonic() - started < 0.5


async def test_acks_all_waits_for_follower_fetch(rm: ReplicaManager) -> None:
    """The delayed produce completes when the follower's fetch moves the high watermark."""
    await order(rm, state(isr=(ME, 2), replicas=(ME, 2)))
    task = asyncio.create_task(produce(rm, ("t", 0, batch(b"a", b"b")), acks=-1, timeout_ms=5000))
    await asyncio.sleep(0.02)
    assert not task.done()
    p = rm.get("t", 0)
    assert p is not None and p.log.log_end_offset == 2 and p.high_watermark == 0
    # the follower fetches from 0 (has nothing): HW stays, produce still parked
    await fetch(rm, fetch_req(("t", 0, 0), replica_id=2))
    await asyncio.sleep(0.01)
    assert not task.done()
    started = time.monotonic()
    resp = await fetch(rm, fetch_req(("t", 0, 2), replica_id=2))  # follower now at LEO 2
    assert resp.partitions[0].high_watermark == 2
    [r] = await asyncio.wait_for(task, 1.0)
    assert r.error_code == 0 and r.base_offset == 0
    assert time.monotonic() - started < 0.5


async def test_acks_all_times_out(rm: ReplicaManager) -> None:
    await order(rm, state(isr=(ME, 2), replicas=(ME, 2)))
    started = time.monotonic()
    [r] = await produce(rm, ("t", 0, batch(b"a")), acks=-1, timeout_ms=50)
    assert r.error_code == ErrorCode.REQUEST_TIMED_OUT and r.base_offset == -1
    assert 0.04 <= time.monotonic() - started < 1.0
    assert rm.produce_waiters.watcher_count() == 0


async def test_acks_all_fails_when_leadership_moves(rm: ReplicaManager) -> None:
    await order(rm, state(epoch=1, isr=(ME, 2), replicas=(ME, 2)))
    task = asyncio.create_task(produce(rm, ("t", 0, batch(b"a")), acks=-1, timeout_ms=5000))
    await asyncio.sleep(0.02)
    await order(rm, state(epoch=2, leader=2, isr=(ME, 2), replicas=(ME, 2)))
    [r] = await asyncio.wait_for(task, 1.0)
    assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_acks_zero_and_one_answer_after_append(rm: ReplicaManager) -> None:
    await order(rm, state(isr=(ME, 2), replicas=(ME, 2)))
    for acks in (0, 1):
        [r] = await produce(rm, ("t", 0, batch(b"a")), acks=acks, timeout_ms=5000)
        assert r.error_code == 0
    assert rm.get("t", 0).log.log_end_offset == 2  # type: ignore[union-attr]


async def test_metrics_count_messages_from_headers(rm: ReplicaManager) -> None:
    await order(rm, state())
    data = batch(b"a", b"b", b"c") + batch(b"d")
    await produce(rm, ("t", 0, data))
    reg = rm.metrics.registry
    assert (
        reg.get_sample_value("kafka_server_brokertopicmetrics_messagesin_total", {"topic": "t"})
        == 4
    )
    assert reg.get_sample_value(
        "kafka_server_brokertopicmetrics_bytesin_total", {"topic": "t"}
    ) == len(data)
    assert reg.get_sample_value("kafka_server_replicamanager_leadercount") == 1
    assert reg.get_sample_value("kafka_server_replicamanager_partitioncount") == 1
    assert reg.get_sample_value("kafka_log_log_logendoffset", {"topic": "t", "partition": "0"}) == 4
    await fetch(rm, fetch_req(("t", 0, 0)))
    assert reg.get_sample_value(
        "kafka_server_brokertopicmetrics_bytesout_total", {"topic": "t"}
    ) == len(data)


# ---- Fetch ------------------------------------------------------------------------------------
async def test_consumer_reads_up_to_hw_follower_up_to_leo(rm: ReplicaManager) -> None:
    await order(rm, state(isr=(ME, 2), replicas=(ME, 2)))
    await produce(rm, ("t", 0, batch(b"a")), ("t", 0, batch(b"b")))
    consumer = (await fetch(rm, fetch_req(("t", 0, 0)))).partitions[0]
    assert consumer.error_code == 0 and consumer.records == b"" and consumer.high_watermark == 0
    follower = (await fetch(rm, fetch_req(("t", 0, 0), replica_id=2))).partitions[0]
    assert offsets_of(follower.records) == [0, 1]
    await fetch(rm, fetch_req(("t", 0, 1), replica_id=2))  # follower has offset 0 now
    consumer = (await fetch(rm, fetch_req(("t", 0, 0)))).partitions[0]
    assert offsets_of(consumer.records) == [0] and consumer.high_watermark == 1
    assert consumer.last_stable_offset == 1 and consumer.log_start_offset == 0


async def test_fetch_errors(rm: ReplicaManager) -> None:
    await order(rm, state("t", 0, epoch=2), state("t", 1, leader=2, isr=(2, ME)))
    await produce(rm, ("t", 0, batch(b"a")))
    resp = await fetch(rm, fetch_req(("t", 0, 5), ("t", 1, 0), ("x", 0, 0)))
    assert [p.error_code for p in resp.partitions] == [
        ErrorCode.OFFSET_OUT_OF_RANGE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert all(p.high_watermark == -1 for p in resp.partitions)
    assert (await fetch(rm, fetch_req(("t", 0, 0), epoch=1))).partitions[
        0
    ].error_code == ErrorCode.FENCED_LEADER_EPOCH
    # a broker that is not a replica cannot fetch as a follower
    assert (await fetch(rm, fetch_req(("t", 0, 0), replica_id=7))).partitions[
        0
    ].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_fetch_byte_limits_kip74(rm: ReplicaManager) -> None:
    await order(rm, state("t", 0), state("t", 1))
    big = batch(b"x" * 500)
    await produce(rm, ("t", 0, big), ("t", 0, batch(b"y")), ("t", 1, batch(b"z")))
    # the first partition returns one whole batch even though it exceeds both limits
    resp = await fetch(
        rm, fetch_req(("t", 0, 0), ("t", 1, 0), max_bytes=100, partition_max_bytes=100)
    )
    p0, p1 = resp.partitions
    assert offsets_of(p0.records) == [0] and len(p0.records) == len(big)
    assert p1.error_code == 0 and p1.records == b""  # overall budget used up
    # an empty first partition does not use up the "at least one batch" allowance
    resp = await fetch(
        rm, fetch_req(("t", 0, 2), ("t", 1, 0), max_bytes=10, partition_max_bytes=10)
    )
    assert resp.partitions[0].records == b"" and offsets_of(resp.partitions[1].records) == [0]
    # partition_max_bytes caps each partition
    resp = await fetch(rm, fetch_req(("t", 0, 0), partition_max_bytes=len(big) + 10))
    assert offsets_of(resp.partitions[0].records) == [0]


async def test_long_poll_is_woken_by_append(rm: ReplicaManager) -> None:
    await order(rm, state())
    max_wait_ms = 3000
    task = asyncio.create_task(fetch(rm, fetch_req(("t", 0, 0), max_wait_ms=max_wait_ms)))
    await asyncio.sleep(0.05)
    assert not task.done() and rm.fetch_waiters.watcher_count(("t", 0)) == 1
    started = time.monotonic()
    await produce(rm, ("t", 0, batch(b"hello")))
    resp = await asyncio.wait_for(task, max_wait_ms / 1000)
    woke_after = time.monotonic() - started
    assert offsets_of(resp.partitions[0].records) == [0]
    assert woke_after < 0.1 * max_wait_ms / 1000  # woken, not expired
    assert rm.fetch_waiters.watcher_count() == 0


async def test_long_poll_waits_for_min_bytes(rm: ReplicaManager) -> None:
    await order(rm, state())
    small = batch(b"a")
    task = asyncio.create_task(
        fetch(rm, fetch_req(("t", 0, 0), max_wait_ms=3000, min_bytes=2 * len(small) + 1))
    )
    await asyncio.sleep(0.02)
    await produce(rm, ("t", 0, small))
    await asyncio.sleep(0.02)
    assert not task.done()  # one batch is not enough
    await produce(rm, ("t", 0, batch(b"b")), ("t", 0, batch(b"c")))
    resp = await asyncio.wait_for(task, 1.0)
    assert offsets_of(resp.partitions[0].records) == [0, 1, 2]


async def test_long_poll_expires_with_what_there_is(rm: ReplicaManager) -> None:
    await order(rm, state())
    started = time.monotonic()
    resp = await fetch(rm, fetch_req(("t", 0, 0), max_wait_ms=60))
    assert resp.partitions[0].error_code == 0 and resp.partitions[0].records == b""
    assert 0.05 <= time.monotonic() - started < 1.0


async def test_consumer_long_poll_waits_for_hw_not_leo(rm: ReplicaManager) -> None:
    await order(rm, state(isr=(ME, 2), replicas=(ME, 2)))
    task = asyncio.create_task(fetch(rm, fetch_req(("t", 0, 0), max_wait_ms=3000)))
    await asyncio.sleep(0.02)
    await produce(rm, ("t", 0, batch(b"a")))
    await asyncio.sleep(0.02)
    assert not task.done()  # appended but not committed
    await fetch(rm, fetch_req(("t", 0, 1), replica_id=2))  # follower catches up: HW 1
    resp = await asyncio.wait_for(task, 1.0)
    assert offsets_of(resp.partitions[0].records) == [0]


async def test_long_poll_returns_error_when_leadership_moves(rm: ReplicaManager) -> None:
    await order(rm, state(epoch=1))
    task = asyncio.create_task(fetch(rm, fetch_req(("t", 0, 0), max_wait_ms=3000)))
    await asyncio.sleep(0.02)
    await order(rm, state(epoch=2, leader=2, isr=(2, ME), replicas=(2, ME)))
    resp = await asyncio.wait_for(task, 1.0)
    assert resp.partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_cancelled_long_poll_leaves_nothing_behind(rm: ReplicaManager) -> None:
    await order(rm, state())
    task = asyncio.create_task(fetch(rm, fetch_req(("t", 0, 0), max_wait_ms=30000)))
    await asyncio.sleep(0.02)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert rm.fetch_waiters.watcher_count() == 0
    [r] = await produce(rm, ("t", 0, batch(b"a")))
    assert r.error_code == 0


async def test_fetch_with_an_error_does_not_wait(rm: ReplicaManager) -> None:
    await order(rm, state())
    started = time.monotonic()
    resp = await fetch(rm, fetch_req(("t", 0, 0), ("missing", 0, 0), max_wait_ms=3000))
    assert resp.partitions[1].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert time.monotonic() - started < 0.5


# ---- ListOffsets ------------------------------------------------------------------------------
async def test_list_offsets(rm: ReplicaManager) -> None:
    await order(rm, state(epoch=7), state("t", 1, leader=2, isr=(2, ME)))
    await produce(
        rm,
        ("t", 0, batch(b"a", b"b", ts=1000)),
        ("t", 0, batch(b"c", ts=5000)),
        ("t", 0, batch(b"d", ts=3000)),
    )

    def query(ts: int, partition: int = 0, epoch: int = -1) -> pb.PartitionOffsetResult:
        req = pb.ListOffsetsRequest(
            partitions=[
                pb.PartitionOffsetQuery(
                    topic="t", partition=partition, timestamp=ts, current_leader_epoch=epoch
                )
            ]
        )
        return list_offsets(rm, req).partitions[0]

    earliest, latest = query(-2), query(-1)
    assert (earliest.offset, earliest.timestamp, earliest.leader_epoch) == (0, -1, 7)
    assert (latest.offset, latest.timestamp, latest.leader_epoch) == (4, -1, 7)
    mx = query(-3)
    assert (mx.offset, mx.timestamp) == (2, 5000)
    by_ts = query(4000)
    assert (by_ts.error_code, by_ts.offset, by_ts.timestamp) == (0, 2, 5000)
    none = query(9999)
    assert (none.error_code, none.offset, none.timestamp) == (0, -1, -1)
    assert query(-1, partition=1).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert query(-1, epoch=6).error_code == ErrorCode.FENCED_LEADER_EPOCH


async def test_list_offsets_latest_is_the_high_watermark(rm: ReplicaManager) -> None:
    await order(rm, state(isr=(ME, 2), replicas=(ME, 2)))
    await produce(rm, ("t", 0, batch(b"a", b"b")))
    req = pb.ListOffsetsRequest(
        partitions=[
            pb.PartitionOffsetQuery(topic="t", partition=0, timestamp=-1),
            pb.PartitionOffsetQuery(topic="t", partition=0, timestamp=0),
        ]
    )
    latest, by_ts = list_offsets(rm, req).partitions
    assert latest.offset == 0  # nothing committed yet
    assert by_ts.offset == -1  # offset 0 exists but is above the HW


# ---- maintenance and shutdown ----------------------------------------------------------------
async def test_close_writes_checkpoints(rm: ReplicaManager, tmp_path: Path) -> None:
    await order(rm, state("t", 0), state("t", 1))
    await produce(rm, ("t", 0, batch(b"a", b"b")))
    await rm.run_retention()
    assert rm.get("t", 0).log.retention_runs == 1  # type: ignore[union-attr]
    assert await rm.close()
    assert rm.get("t", 0).log.closed  # type: ignore[union-attr]
    text = (tmp_path / "replication-offset-checkpoint").read_text()
    assert text.splitlines()[:2] == ["0", "2"] and "t 0 2" in text and "t 1 0" in text
    assert "t 0 2" in (tmp_path / "recovery-point-offset-checkpoint").read_text()
    assert (tmp_path / "log-start-offset-checkpoint").exists()


# ---- DeleteRecords (on real logs) -----------------------------------------------------------
@pytest.fixture
def engine_rm(tmp_path: Path) -> ReplicaManager:
    return ReplicaManager(ME, tmp_path, {}, metrics=StorageMetrics(CollectorRegistry()))


async def delete(
    rm: ReplicaManager, *parts: tuple[str, int, int], timeout_ms: int = 1000
) -> list[pb.PartitionDeleteRecordsResult]:
    req = pb.DeleteRecordsRequest(
        timeout_ms=timeout_ms,
        partitions=[pb.PartitionDeleteRecords(topic=t, partition=p, offset=o) for t, p, o in parts],
    )
    return list((await delete_records(rm, req)).partitions)


async def test_delete_records_moves_the_log_start_offset(engine_rm: ReplicaManager) -> None:
    rm = engine_rm
    await order(rm, state(), state(partition=1))
    await produce(rm, ("t", 0, batch(b"a", b"b", b"c", b"d")), ("t", 1, batch(b"x", b"y")))
    a, b = await delete(rm, ("t", 0, 3), ("t", 1, -1))
    assert (a.error_code, a.low_watermark, b.error_code, b.low_watermark) == (0, 3, 0, 2)
    [earliest] = list_offsets_of(rm, ("t", 0, -2))  # ListOffsets earliest follows
    assert earliest == 3
    resp = await fetch(rm, fetch_req(("t", 0, 0)))
    assert resp.partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    [again] = await delete(rm, ("t", 0, 1))  # below the start: nothing moves
    assert (again.error_code, again.low_watermark) == (0, 3)


def list_offsets_of(rm: ReplicaManager, *queries: tuple[str, int, int]) -> list[int]:
    req = pb.ListOffsetsRequest(
        partitions=[
            pb.PartitionOffsetQuery(topic=t, partition=p, timestamp=ts, current_leader_epoch=-1)
            for t, p, ts in queries
        ]
    )
    return [r.offset for r in list_offsets(rm, req).partitions]


async def test_delete_records_errors(engine_rm: ReplicaManager) -> None:
    rm = engine_rm
    await order(
        rm,
        state(),
        state("compacted", config={"cleanup.policy": "compact"}),
        state("led-elsewhere", leader=2, isr=(ME, 2)),
    )
    await produce(rm, ("t", 0, batch(b"a", b"b")))
    results = await delete(
        rm, ("t", 0, 3), ("t", 0, -2), ("compacted", 0, 0), ("led-elsewhere", 0, 0), ("no", 0, 0)
    )
    assert [r.error_code for r in results] == [
        ErrorCode.OFFSET_OUT_OF_RANGE,
        ErrorCode.OFFSET_OUT_OF_RANGE,
        ErrorCode.POLICY_VIOLATION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert all(r.low_watermark == -1 for r in results)
    assert "beyond the high watermark 2" in results[0].error_message
    p = rm.get("t", 0)
    assert p is not None and p.log.log_start_offset == 0


async def test_delete_records_waits_for_the_in_sync_followers(engine_rm: ReplicaManager) -> None:
    rm = engine_rm
    """The answer comes once the follower reports the new log start offset in a fetch."""
    await order(rm, state(isr=(ME, 2), replicas=(ME, 2)))
    task = asyncio.create_task(produce(rm, ("t", 0, batch(b"a", b"b", b"c")), acks=-1))
    await asyncio.sleep(0.02)  # appended, waiting for the follower
    await fetch(rm, fetch_req(("t", 0, 0), replica_id=2))
    await fetch(rm, fetch_req(("t", 0, 3), replica_id=2))  # HW 3
    await asyncio.wait_for(task, 1.0)
    waiting = asyncio.create_task(delete(rm, ("t", 0, 2), timeout_ms=5000))
    await asyncio.sleep(0.02)
    assert not waiting.done()  # the follower still starts at 0
    fetch_from = fetch_req(("t", 0, 3), replica_id=2)
    fetch_from.partitions[0].log_start_offset = 2
    await fetch(rm, fetch_from)
    [r] = await asyncio.wait_for(waiting, 1.0)
    assert (r.error_code, r.low_watermark) == (0, 2)
    assert rm.delete_records_waiters.watcher_count() == 0


async def test_delete_records_times_out_or_fails_with_leadership(engine_rm: ReplicaManager) -> None:
    rm = engine_rm
    await order(rm, state(epoch=1, isr=(ME, 2), replicas=(ME, 2)))
    task = asyncio.create_task(produce(rm, ("t", 0, batch(b"a", b"b")), acks=-1))
    await asyncio.sleep(0.02)
    await fetch(rm, fetch_req(("t", 0, 2), replica_id=2))
    await asyncio.wait_for(task, 1.0)
    [r] = await delete(rm, ("t", 0, 1), timeout_ms=50)
    assert (r.error_code, r.low_watermark) == (ErrorCode.REQUEST_TIMED_OUT, 0)
    waiting = asyncio.create_task(delete(rm, ("t", 0, 2), timeout_ms=5000))
    await asyncio.sleep(0.02)
    await order(rm, state(epoch=2, leader=2, isr=(ME, 2), replicas=(ME, 2)))
    [r] = await asyncio.wait_for(waiting, 1.0)
    assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_set_broker_defaults_refreshes_partitions(tmp_path: Path) -> None:
    """New broker-level topic defaults (dynamic broker configs) reach every hosted partition's
    log without a restart; topic overrides still win."""
    rm = ReplicaManager(
        ME,
        tmp_path,
        {"log.retention.ms": 604800000},
        backend=FakeBackend(),  # type: ignore[arg-type]
        metrics=StorageMetrics(CollectorRegistry()),
    )
    await order(rm, state("plain", 0), state("pinned", 0, config={"retention.ms": "1234"}))
    plain, pinned = rm.get("plain", 0), rm.get("pinned", 0)
    assert plain is not None and pinned is not None
    assert plain.log.config["retention.ms"] == 604800000
    rm.set_broker_defaults({"log.retention.ms": 1000, "min.insync.replicas": 2})
    assert plain.log.config["retention.ms"] == 1000  # pushed to the log
    assert plain.min_insync_replicas == 2
    assert pinned.log.config["retention.ms"] == 1234  # the topic override wins
    assert pinned.min_insync_replicas == 2
