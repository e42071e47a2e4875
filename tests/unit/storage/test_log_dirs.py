"""Several log dirs on the real log engine: placement, per-dir checkpoints and loading, and a
failed dir taking only its own replicas offline (KIP-112)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from services.common.errors import ErrorCode, KafkaError
from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.appends import append
from services.storage.log import checkpoint as ckpt
from services.storage.log_dirs import LogDirs
from services.storage.metrics import StorageMetrics
from services.storage.replica_manager import ReplicaManager


def new_rm(dirs: list[Path]) -> tuple[ReplicaManager, CollectorRegistry]:
    registry = CollectorRegistry()
    return ReplicaManager(1, dirs, {}, metrics=StorageMetrics(registry)), registry


def order(partitions: list[int], *, is_new: bool = True) -> pb.UpdatePartitionsRequest:
    return pb.UpdatePartitionsRequest(
        controller_epoch=1,
        partitions=[
            pb.PartitionState(
                topic="t",
                partition=p,
                leader=1,
                leader_epoch=0,
                isr=[1],
                replicas=[1],
                is_new=is_new,
            )
            for p in partitions
        ],
    )


async def produce(rm: ReplicaManager, partition: int, n: int) -> int:
    records = build_batch([Record(timestamp=1000 + i, value=b"v%d" % i) for i in range(n)])
    resp = await append(
        rm,
        pb.AppendRequest(
            acks=1,
            timeout_ms=1000,
            partitions=[
                pb.PartitionAppend(
                    topic="t", partition=partition, records=records, current_leader_epoch=-1
                )
            ],
        ),
    )
    return resp.partitions[0].error_code


def codes(resp: pb.UpdatePartitionsResponse) -> dict[int, int]:
    return {e.partition: e.error_code for e in resp.partitions}


def test_next_dir_is_the_online_dir_with_fewest_partitions(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    dirs = LogDirs([a, b, c])
    placed = []
    for p in range(6):
        d = dirs.next_dir()
        dirs.assign(("t", p), d)
        placed.append(d)
    assert placed == [a, b, c, a, b, c]
    dirs.forget(("t", 1))
    assert dirs.next_dir() == b
    assert dirs.mark_offline(b, "gone") == [("t", 4)]
    assert dirs.mark_offline(b, "again") is None
    assert dirs.next_dir() in (a, c) and dirs.is_offline(("t", 4))
    dirs.mark_offline(a, "gone")
    dirs.mark_offline(c, "gone")
    with pytest.raises(KafkaError) as e:
        dirs.next_dir()
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR


async def test_replicas_spread_over_dirs_and_reload_with_each_dirs_checkpoints(
    tmp_path: Path,
) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    rm, _ = new_rm(dirs)
    assert set(codes(await rm.update_partitions(order([0, 1, 2, 3]))).values()) == {0}
    assert {p.name for p in dirs[0].iterdir()} == {"t-0", "t-2"}
    assert {p.name for p in dirs[1].iterdir()} == {"t-1", "t-3"}
    for p in range(4):
        assert await produce(rm, p, p + 1) == 0
    assert await rm.close()
    for d, mine in ((dirs[0], [0, 2]), (dirs[1], [1, 3])):
        hw = ckpt.read_offset_checkpoint(d / ckpt.REPLICATION_OFFSET_CHECKPOINT)
        assert hw == {("t", p): p + 1 for p in mine}
        rp = ckpt.read_offset_checkpoint(d / ckpt.RECOVERY_POINT_CHECKPOINT)
        assert rp == {("t", p): p + 1 for p in mine}

    again, _ = new_rm(dirs)
    assert await again.load_logs({}, clean_shutdown=True) == 4
    assert {tp: d.name for tp, d in again.log_dirs.dir_of.items()} == {
        ("t", 0): "d0",
        ("t", 1): "d1",
        ("t", 2): "d0",
        ("t", 3): "d1",
    }
    for p in range(4):
        lg = again.hosted[("t", p)].log
        assert (lg.log_end_offset, lg.high_watermark) == (p + 1, p + 1)
    await again.close()


async def test_the_same_partition_in_two_dirs_refuses_the_start(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    rm, _ = new_rm(dirs)
    await rm.update_partitions(order([0]))
    await rm.close()
    shutil.copytree(dirs[0] / "t-0", dirs[1] / "t-0")
    again, _ = new_rm(dirs)
    with pytest.raises(KafkaError, match="Duplicate log directories for t-0"):
        await again.load_logs({}, clean_shutdown=True)


async def test_a_failed_dir_takes_only_its_replicas_offline(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    rm, registry = new_rm(dirs)
    reported: list[Path] = []
    rm.on_log_dir_failure = lambda d, why: reported.append(d)
    await rm.update_partitions(order([0, 1]))  # t-0 in d0, t-1 in d1
    assert await produce(rm, 0, 2) == 0 and await produce(rm, 1, 2) == 0

    shutil.rmtree(dirs[1])  # root can write into a chmod 000 dir, not into a file
    dirs[1].write_text("")
    await rm.checkpoint_high_watermarks()  # how a running node notices it

    assert reported == [dirs[1]]
    assert rm.log_dirs.offline.keys() == {dirs[1]} and rm.get("t", 1) is None
    assert await produce(rm, 1, 1) == ErrorCode.KAFKA_STORAGE_ERROR
    assert await produce(rm, 0, 1) == 0  # the good dir keeps serving
    text = generate_latest(registry).decode()
    assert "kafka_log_logmanager_offlinelogdirectorycount 1.0" in text
    assert f'kafka_log_logmanager_logdirectoryoffline{{logDirectory="{dirs[1]}"}} 1.0' in text

    # the controller's next orders: the offline replica and any replica not called new are
    # refused (they may be on the failed disk), a new one goes to the good dir
    resp = await rm.update_partitions(order([1]))
    assert codes(resp) == {1: ErrorCode.KAFKA_STORAGE_ERROR}
    resp = await rm.update_partitions(order([5], is_new=False))
    assert codes(resp) == {5: ErrorCode.KAFKA_STORAGE_ERROR}
    assert codes(await rm.update_partitions(order([6]))) == {6: 0}
    assert rm.log_dirs.dir_of[("t", 6)] == dirs[0]
    await rm.checkpoint_high_watermarks()
    assert reported == [dirs[1]]  # reported once
    assert ckpt.read_offset_checkpoint(dirs[0] / ckpt.REPLICATION_OFFSET_CHECKPOINT) == {
        ("t", 0): 3,
        ("t", 6): 0,
    }
    # deleting the topic forgets the offline replica (its files stay on the failed disk)
    stop = pb.StopReplicasRequest(
        controller_epoch=1,
        delete_partitions=True,
        partitions=[pb.StopReplica(topic="t", partition=1, leader_epoch=-2)],
    )
    assert (await rm.stop_replicas(stop)).partitions[0].error_code == 0
    assert not rm.log_dirs.is_offline(("t", 1))
    await rm.close()


async def test_describe_log_dirs_reports_sizes_and_a_failed_dir(tmp_path: Path) -> None:
    from services.storage.log_dir_info import describe_log_dirs

    a, b = tmp_path / "a", tmp_path / "b"
    rm, _ = new_rm([a, b])
    await rm.update_partitions(order([0, 1]))  # one in each dir
    assert await produce(rm, 0, 5) == 0
    resp = await describe_log_dirs(rm, pb.DescribeLogDirsRequest(all_topics=True))
    assert resp.broker_id == 1
    by_path = {d.path: d for d in resp.log_dirs}
    assert set(by_path) == {str(a), str(b)}
    replicas = {(r.topic, r.partition): r for d in resp.log_dirs for r in d.replicas}
    assert replicas[("t", 0)].size == rm.backend.size(rm.hosted[("t", 0)].log) > 0
    assert replicas[("t", 1)].size == 0 and replicas[("t", 1)].offset_lag == 0  # a leader
    assert all(
        d.total_bytes > 0 and d.usable_bytes >= 0 and d.error_code == 0 for d in resp.log_dirs
    )

    failed = rm.log_dirs.dir_of[("t", 1)]
    rm.handle_log_dir_failure(failed, "test")
    resp = await describe_log_dirs(rm, pb.DescribeLogDirsRequest(all_topics=True))
    by_path = {d.path: d for d in resp.log_dirs}
    bad = by_path[str(failed)]
    assert (bad.error_code, bad.total_bytes, bad.usable_bytes) == (
        56,
        -1,
        -1,
    )  # KAFKA_STORAGE_ERROR
    assert list(bad.replicas) == []
    (good,) = [d for d in resp.log_dirs if d.path != str(failed)]
    assert [(r.topic, r.partition) for r in good.replicas] == [("t", 0)]
    await rm.close()
