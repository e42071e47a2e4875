"""The files of one UpdatePartitions order (new logs, leader-epoch checkpoints): written off the
event loop, all of them on disk when the order is answered, a failed write answered for its own
partition."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.log import leader_epoch
from services.storage.log.checkpoint import read_epoch_checkpoint
from services.storage.log.files import LEADER_EPOCH_CHECKPOINT
from services.storage.metrics import StorageMetrics
from services.storage.replica_manager import ReplicaManager

ME = 1


def order(partitions: range, leader: int, epoch: int) -> pb.UpdatePartitionsRequest:
    return pb.UpdatePartitionsRequest(
        controller_epoch=1,
        partitions=[
            pb.PartitionState(
                topic="t",
                partition=p,
                leader=leader,
                leader_epoch=epoch,
                isr=[ME, 2],
                replicas=[ME, 2],
                is_new=True,
                topic_id=bytes(range(16)),
            )
            for p in partitions
        ],
    )


def epochs(log_dir: Path, partition: int) -> list[tuple[int, int]]:
    return read_epoch_checkpoint(log_dir / f"t-{partition}" / LEADER_EPOCH_CHECKPOINT)


async def test_every_new_epoch_is_on_disk_when_answered_and_written_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writers: list[str] = []
    real = leader_epoch.write_epoch_checkpoint

    def spy(path: Path, entries: Any, *, sync: bool = True) -> None:
        writers.append(threading.current_thread().name)
        real(path, entries, sync=sync)

    monkeypatch.setattr(leader_epoch, "write_epoch_checkpoint", spy)
    rm = ReplicaManager(ME, tmp_path, {}, metrics=StorageMetrics(CollectorRegistry()))
    resp = await rm.update_partitions(order(range(40), ME, 3))
    assert [e.error_code for e in resp.partitions] == [0] * 40
    assert all(epochs(tmp_path, p) == [(3, 0)] for p in range(40))
    assert all((tmp_path / f"t-{p}" / "partition.metadata").exists() for p in range(40))
    assert len(writers) == 40
    assert threading.main_thread().name not in writers
    # a new epoch for some; the same epoch again writes nothing
    resp = await rm.update_partitions(order(range(0, 40, 2), ME, 4))
    resp = await rm.update_partitions(order(range(1, 40, 2), ME, 3))
    assert [e.error_code for e in resp.partitions] == [0] * 20
    assert len(writers) == 60
    assert all(epochs(tmp_path, p) == ([(4, 0)] if p % 2 == 0 else [(3, 0)]) for p in range(40))
    await rm.close()


async def test_a_failed_checkpoint_write_fails_only_its_partition(tmp_path: Path) -> None:
    rm = ReplicaManager(ME, tmp_path, {}, metrics=StorageMetrics(CollectorRegistry()))
    resp = await rm.update_partitions(order(range(3), 2, 1))  # followers: no epoch written
    assert [e.error_code for e in resp.partitions] == [0, 0, 0]
    broken = tmp_path / "t-1" / LEADER_EPOCH_CHECKPOINT
    broken.unlink()
    broken.mkdir()  # the rename over it fails
    resp = await rm.update_partitions(order(range(3), ME, 2))
    assert [(e.partition, e.error_code) for e in resp.partitions] == [(0, 0), (1, -1), (2, 0)]
    assert epochs(tmp_path, 0) == epochs(tmp_path, 2) == [(2, 0)]
    shutil.rmtree(broken)
    await rm.close()
