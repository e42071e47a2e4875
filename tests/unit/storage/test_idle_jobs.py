"""The periodic jobs of an idle node visit nothing (issue 19): the flush pass, the usage report,
the three offset checkpoints, retention and the cleaner's pick follow the logs marked as changed
(retention also its schedule of logs due by time), over the real log engine, and still see every
change (appends, DeleteRecords, retention, deletion, config changes, time passing)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage import log_cleaner
from services.storage.appends import append
from services.storage.changes import (
    CLEANER,
    FLUSH,
    HIGH_WATERMARKS,
    JOBS,
    LOG_STARTS,
    RECOVERY_POINTS,
    USAGE,
)
from services.storage.delete_records import delete_records
from services.storage.log import checkpoint as ckpt
from services.storage.log.cleaner import CleanerSettings
from services.storage.log.log import Log
from services.storage.log_cleaner import LogCleaner
from services.storage.metrics import StorageMetrics
from services.storage.replica_manager import ReplicaManager

PARTITIONS = 20


def state(
    p: int, replicas: tuple[int, ...] = (1,), topic: str = "t", **config: str
) -> pb.PartitionState:
    return pb.PartitionState(
        topic=topic,
        partition=p,
        leader=1,
        leader_epoch=1,
        isr=[1],
        replicas=list(replicas),
        config=config,
    )


async def produce(
    rm: ReplicaManager,
    p: int,
    n: int = 1,
    topic: str = "t",
    timestamp: int = 1000,
    key: Callable[[int], bytes | None] = lambda i: None,
    step: int = 1,
) -> None:
    for i in range(n):
        batch = build_batch([Record(timestamp=timestamp + step * i, key=key(i), value=b"x" * 50)])
        r = await append(
            rm,
            pb.AppendRequest(
                acks=1,
                timeout_ms=1000,
                partitions=[
                    pb.PartitionAppend(
                        topic=topic, partition=p, records=batch, current_leader_epoch=-1
                    )
                ],
            ),
        )
        assert r.partitions[0].error_code == 0


async def order(rm: ReplicaManager, *states: pb.PartitionState) -> None:
    resp = await rm.update_partitions(
        pb.UpdatePartitionsRequest(controller_epoch=1, partitions=list(states))
    )
    assert all(r.error_code == 0 for r in resp.partitions)


class Visits:
    """Counts the log engine's calls that mean "this job looked at a log"."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count: dict[str, int] = {}
        for name in ("delete_retained_segments", "maybe_flush"):
            self._wrap(monkeypatch, Log, name)
        self._wrap(monkeypatch, log_cleaner, "compute_cleanable_range")

    def _wrap(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        original = getattr(owner, name)
        self.count[name] = 0

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    def reset(self) -> None:
        self.count = dict.fromkeys(self.count, 0)


def one_key(i: int) -> bytes | None:
    return b"k"


def cleaner_of(rm: ReplicaManager, log_dir: Path) -> LogCleaner:
    """The cleaner as the storage node wires it (services.storage.node)."""
    c = LogCleaner(
        log_dir,
        rm.logs,
        CleanerSettings(),
        rm.metrics,
        rm.clock,
        rm.mark_changed,
        lambda: rm.changes.take(CLEANER),
    )
    c.load_checkpoint()
    return c


def checkpoints_match_a_full_rebuild(rm: ReplicaManager) -> None:
    for job in (RECOVERY_POINTS, HIGH_WATERMARKS, LOG_STARTS):
        name = rm.checkpoints[job].name
        for d, offsets in rm.rebuild_checkpoint(job).items():
            assert ckpt.read_offset_checkpoint(d / name) == offsets, (job, d)


def real_size(rm: ReplicaManager) -> int:
    return sum(h.log.size_bytes() for h in rm.hosted.values())


async def test_idle_jobs_visit_only_changed_logs(tmp_path: Path) -> None:
    rm = ReplicaManager(
        1, tmp_path, {"log.segment.bytes": 1024}, metrics=StorageMetrics(CollectorRegistry())
    )
    orders = [state(p) for p in range(PARTITIONS - 1)] + [state(PARTITIONS - 1, (1, 2))]
    resp = await rm.update_partitions(
        pb.UpdatePartitionsRequest(controller_epoch=1, partitions=orders)
    )
    assert all(r.error_code == 0 for r in resp.partitions)
    # only the replicated partition this node leads is looked at by the ISR shrink check
    assert rm.led_with_followers == {("t", PARTITIONS - 1)}

    # first runs: every new log was marked once, and is seen once
    await rm.run_flush(0)
    assert rm.usage_bytes() == real_size(rm)
    await rm.checkpoint_high_watermarks()
    hw_file = tmp_path / ckpt.REPLICATION_OFFSET_CHECKPOINT
    assert ckpt.read_offset_checkpoint(hw_file) == {("t", p): 0 for p in range(PARTITIONS)}

    # idle: nothing is marked, nothing is visited, the checkpoint is not rewritten
    for job in (FLUSH, USAGE, HIGH_WATERMARKS):
        assert rm.changes.take(job) == set()
    hw_file.unlink()
    await rm.checkpoint_high_watermarks()
    assert not hw_file.exists()

    # appends (several segments: rolls) to two logs: marked, flushed, counted, checkpointed
    await produce(rm, 3, 40)
    await produce(rm, 7, 2)
    await rm.run_flush(0)
    for p in (3, 7):
        lg = rm.hosted[("t", p)].log
        assert lg.recovery_point == lg.log_end_offset > 0
    assert rm.usage_bytes() == real_size(rm)
    await rm.checkpoint_high_watermarks()
    written = ckpt.read_offset_checkpoint(hw_file)
    assert written[("t", 3)] == 40 and written[("t", 7)] == 2
    assert written[("t", 0)] == 0 and len(written) == PARTITIONS

    # DeleteRecords moves the log start; retention (retention.bytes) deletes segments
    await delete_records(
        rm,
        pb.DeleteRecordsRequest(
            timeout_ms=1000,
            partitions=[pb.PartitionDeleteRecords(topic="t", partition=3, offset=30)],
        ),
    )
    rm.hosted[("t", 3)].log.update_config(rm.backend.make_config({"retention.bytes": "1"}))
    await rm.run_retention()
    assert rm.hosted[("t", 3)].log.log_start_offset >= 30
    assert rm.usage_bytes() == real_size(rm)

    # a deleted replica leaves the usage total and the checkpoint
    await rm.stop_replicas(
        pb.StopReplicasRequest(
            controller_epoch=1,
            delete_partitions=True,
            partitions=[pb.StopReplica(topic="t", partition=7, leader_epoch=-1)],
        )
    )
    assert rm.usage_bytes() == real_size(rm)
    await rm.checkpoint_high_watermarks()
    assert ("t", 7) not in ckpt.read_offset_checkpoint(hw_file)
    await rm.close()


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


T0 = 1_800_000_000_000


async def test_an_idle_node_visits_no_log_yet_retention_deletes_by_time_when_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(T0)
    rm = ReplicaManager(
        1,
        tmp_path,
        {"log.segment.bytes": 300, "log.segment.delete.delay.ms": 60_000},
        metrics=StorageMetrics(CollectorRegistry()),
        clock=clock,
    )
    await order(rm, *(state(p, **{"retention.ms": "10000"}) for p in range(10)))
    # partition 0: three segments of records at T0, then one at T0 + 5 s (the active segment)
    await produce(rm, 0, 6, timestamp=T0, step=0)
    await produce(rm, 0, 1, timestamp=T0 + 5000)
    lg = rm.hosted[("t", 0)].log
    assert isinstance(lg, Log) and len(lg.segments) >= 3
    cleaner = cleaner_of(rm, tmp_path)
    visits = Visits(monkeypatch)

    async def every_job() -> None:
        await rm.run_flush(0)
        rm.usage_bytes()
        await rm.run_retention()
        await rm.checkpoint_recovery_points()
        await rm.checkpoint_high_watermarks()
        await rm.checkpoint_log_start_offsets()
        await cleaner.run_pass()

    await every_job()  # first runs: every log is new
    assert visits.count["delete_retained_segments"] == 10
    # T0's records leave retention.ms at T0 + 10,001: that is when partition 0 is due
    assert rm.retention_schedule.due_at(("t", 0)) == T0 + 10_001
    assert len(rm.retention_schedule) == 1  # the empty logs wait for an append

    # idle, up to the moment before the due time: nothing is visited, nothing rewritten
    files = [tmp_path / name for name in (c.name for c in rm.checkpoints.values())]
    written = [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files]  # noqa: ASYNC240
    visits.reset()
    clock.now = T0 + 10_000
    await every_job()
    assert visits.count == dict.fromkeys(visits.count, 0)
    assert [(f.stat().st_ino, f.stat().st_mtime_ns) for f in files] == written  # noqa: ASYNC240
    for job in JOBS:
        assert rm.changes.take(job) == set(), job

    # due: only partition 0 is visited, its T0 segments go, the T0 + 5 s one stays
    clock.now += 1
    start_before = lg.log_start_offset
    await rm.run_retention()
    assert visits.count["delete_retained_segments"] == 1
    assert lg.log_start_offset > start_before and lg.log_start_offset == lg.segments[0].base_offset
    assert lg.segments[0].largest_timestamp() == T0 + 5000
    deleted = sorted((tmp_path / "t-0").glob("*.deleted"))  # noqa: ASYNC240
    assert deleted  # file.delete.delay.ms: renamed now, removed 60 s later
    # next due: the last segment's retention (T0 + 15 s) before the files' removal (T0 + 70 s)
    assert rm.retention_schedule.due_at(("t", 0)) == T0 + 5000 + 10_001
    await rm.checkpoint_log_start_offsets()
    assert ckpt.read_offset_checkpoint(tmp_path / ckpt.LOG_START_OFFSET_CHECKPOINT) == {
        ("t", 0): lg.log_start_offset
    }
    clock.now = T0 + 5000 + 10_001
    await rm.run_retention()  # the active segment is due: rolled and deleted
    assert lg.log_start_offset == lg.log_end_offset == 7
    assert rm.retention_schedule.due_at(("t", 0)) == T0 + 10_001 + 60_000
    visits.reset()
    clock.now = T0 + 10_001 + 60_000
    await rm.run_retention()
    assert visits.count["delete_retained_segments"] == 1
    assert not any(p.exists() for p in deleted)
    await every_job()
    checkpoints_match_a_full_rebuild(rm)
    await rm.close()


async def test_a_retention_ms_altered_at_runtime_takes_effect(tmp_path: Path) -> None:
    clock = Clock(T0)
    rm = ReplicaManager(
        1,
        tmp_path,
        {"log.segment.bytes": 300, "log.segment.delete.delay.ms": 0},
        metrics=StorageMetrics(CollectorRegistry()),
        clock=clock,
    )
    await order(rm, state(0), state(1))
    await produce(rm, 0, 6, timestamp=T0, step=0)
    lg = rm.hosted[("t", 0)].log
    await rm.run_retention()  # 7 days of retention: due in a week
    assert rm.retention_schedule.due_at(("t", 0)) == T0 + 7 * 24 * 3600 * 1000 + 1
    clock.now = T0 + 60_000
    await rm.run_retention()
    assert lg.log_start_offset == 0
    # a new broker default (dynamic broker config): one minute of retention, applied at once
    rm.set_broker_defaults(
        {"log.segment.bytes": 300, "log.segment.delete.delay.ms": 0, "log.retention.ms": 1000}
    )
    await rm.run_retention()
    assert lg.log_start_offset == lg.log_end_offset == 6
    await rm.close()


async def test_the_checkpoints_equal_a_full_rebuild(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    rm = ReplicaManager(
        1, dirs, {"log.segment.bytes": 300}, metrics=StorageMetrics(CollectorRegistry())
    )

    now = int(time.time() * 1000)  # records within retention.ms: only DeleteRecords moves starts

    async def checkpoints() -> None:
        await rm.checkpoint_recovery_points()
        await rm.checkpoint_high_watermarks()
        await rm.checkpoint_log_start_offsets()

    async def all_checkpoints() -> None:
        await checkpoints()  # the marks taken before the flush pass moves the recovery points
        await rm.run_flush(0)
        await rm.run_retention()
        await checkpoints()
        checkpoints_match_a_full_rebuild(rm)

    await order(rm, *(state(p) for p in range(6)))
    assert {rm.log_dirs.dir_of[("t", p)] for p in range(6)} == set(dirs)
    await all_checkpoints()
    await produce(rm, 1, 9, timestamp=now)
    await produce(rm, 2, 3, timestamp=now)
    await all_checkpoints()  # recovery points moved by the flush pass
    await delete_records(
        rm,
        pb.DeleteRecordsRequest(
            timeout_ms=1000,
            partitions=[pb.PartitionDeleteRecords(topic="t", partition=1, offset=5)],
        ),
    )
    await all_checkpoints()  # log start moved (and the retention that followed)
    await produce(rm, 3, 2, timestamp=now)
    await rm.stop_replicas(
        pb.StopReplicasRequest(
            controller_epoch=1,
            delete_partitions=True,
            partitions=[pb.StopReplica(topic="t", partition=2, leader_epoch=-1)],
        )
    )
    await order(rm, state(6), state(7))
    await all_checkpoints()  # a replica deleted, two created, an append not flushed yet
    for d in dirs:
        written = ckpt.read_offset_checkpoint(d / ckpt.LOG_START_OFFSET_CHECKPOINT)
        assert written == ({("t", 1): 5} if rm.log_dirs.dir_of[("t", 1)] == d else {})
    await rm.close()


async def test_the_cleaner_cleans_a_log_made_dirty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rm = ReplicaManager(
        1, tmp_path, {"log.segment.bytes": 300}, metrics=StorageMetrics(CollectorRegistry())
    )
    await order(rm, *(state(p, topic="c", **{"cleanup.policy": "compact"}) for p in range(5)))
    cleaner = cleaner_of(rm, tmp_path)
    await produce(rm, 0, 6, topic="c", key=one_key)
    assert await cleaner.run_pass() == 1  # the first pass looks at every log
    assert cleaner.checkpoints[("c", 0)] > 0
    visits = Visits(monkeypatch)
    assert await cleaner.run_pass() == 0
    assert visits.count["compute_cleanable_range"] <= 1  # only the log it just cleaned
    visits.reset()
    assert await cleaner.run_pass() == 0
    assert visits.count["compute_cleanable_range"] == 0  # idle: no log looked at
    # partition 3 made dirty (several segments of one key): marked, looked at, cleaned
    await produce(rm, 3, 6, topic="c", key=one_key)
    lg = rm.hosted[("c", 3)].log
    size = lg.size_bytes()
    assert await cleaner.run_pass() == 1
    assert visits.count["compute_cleanable_range"] >= 1
    assert cleaner.checkpoints[("c", 3)] == 4
    assert lg.size_bytes() < size  # offsets 0-2 of the key removed
    # two logs made dirty at once: one pick takes one, the other is looked at again next pick
    await produce(rm, 1, 6, topic="c", key=one_key)
    await produce(rm, 2, 6, topic="c", key=one_key)
    assert await cleaner.run_pass() == 2
    assert cleaner.checkpoints[("c", 1)] == cleaner.checkpoints[("c", 2)] == 4
    # a compacted topic turned to delete: forgotten by the cleaner at its next pick
    await order(rm, state(3, topic="c", **{"cleanup.policy": "delete"}))
    await cleaner.run_pass()
    assert ("c", 3) not in cleaner.checkpoints
    await rm.close()


async def test_the_cleaner_looks_again_at_a_log_whose_compaction_lag_passes(
    tmp_path: Path,
) -> None:
    clock = Clock(T0)
    rm = ReplicaManager(
        1,
        tmp_path,
        {"log.segment.bytes": 300},
        metrics=StorageMetrics(CollectorRegistry()),
        clock=clock,
    )
    lagged = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}
    await order(
        rm, state(0, topic="c", **lagged), state(1, topic="c", **{"cleanup.policy": "compact"})
    )
    cleaner = cleaner_of(rm, tmp_path)
    await produce(rm, 0, 6, topic="c", key=one_key, timestamp=T0, step=0)
    assert await cleaner.run_pass() == 0  # records younger than min.compaction.lag.ms
    clock.now = T0 + 60_001
    assert await cleaner.run_pass() == 1  # nothing marked it: time alone made it cleanable
    assert cleaner.checkpoints[("c", 0)] == 4
    await rm.close()
