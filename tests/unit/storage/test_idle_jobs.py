"""The periodic jobs of an idle node visit nothing (issue 19): the flush pass, the usage report
and the high-watermark checkpoint follow the logs marked as changed, over the real log engine,
and still see every change (appends, DeleteRecords, retention, deletion)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.appends import append
from services.storage.changes import FLUSH, HIGH_WATERMARKS, USAGE
from services.storage.delete_records import delete_records
from services.storage.log import checkpoint as ckpt
from services.storage.metrics import StorageMetrics
from services.storage.replica_manager import ReplicaManager

PARTITIONS = 20


def state(p: int, replicas: tuple[int, ...] = (1,)) -> pb.PartitionState:
    return pb.PartitionState(
        topic="t", partition=p, leader=1, leader_epoch=1, isr=[1], replicas=list(replicas)
    )


async def produce(rm: ReplicaManager, p: int, n: int = 1) -> None:
    for i in range(n):
        batch = build_batch([Record(timestamp=1000 + i, value=b"x" * 50)])
        r = await append(
            rm,
            pb.AppendRequest(
                acks=1,
                timeout_ms=1000,
                partitions=[
                    pb.PartitionAppend(
                        topic="t", partition=p, records=batch, current_leader_epoch=-1
                    )
                ],
            ),
        )
        assert r.partitions[0].error_code == 0


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
