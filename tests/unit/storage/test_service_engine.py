"""The replica manager over the real log engine: create, append, read back, restart."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from services.common.records.batch import iter_headers
from services.common.records.record import Record, build_batch, iter_batch_records
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.appends import append
from services.storage.fetches import fetch
from services.storage.log import checkpoint as ckpt
from services.storage.metrics import StorageMetrics
from services.storage.offsets import list_offsets
from services.storage.replica_manager import ReplicaManager


def new_rm(log_dir: Path) -> ReplicaManager:
    return ReplicaManager(
        1, log_dir, {"log.segment.bytes": 1024}, metrics=StorageMetrics(CollectorRegistry())
    )


async def test_engine_round_trip_and_reload(tmp_path: Path) -> None:
    rm = new_rm(tmp_path)
    topic_id = bytes(range(16))
    resp = await rm.update_partitions(
        pb.UpdatePartitionsRequest(
            controller_epoch=1,
            partitions=[
                pb.PartitionState(
                    topic="orders",
                    partition=0,
                    leader=1,
                    leader_epoch=3,
                    isr=[1],
                    replicas=[1],
                    topic_id=topic_id,
                    config={"retention.ms": "-1"},
                )
            ],
        )
    )
    assert resp.partitions[0].error_code == 0
    assert (tmp_path / "orders-0" / "partition.metadata").exists()
    for i in range(20):  # ~20 * 80 bytes: several 1 KiB segments
        batch = build_batch([Record(timestamp=1000 + i, value=b"v%03d" % i + b"." * 40)])
        r = (
            await append(
                rm,
                pb.AppendRequest(
                    acks=-1,
                    timeout_ms=1000,
                    partitions=[
                        pb.PartitionAppend(
                            topic="orders", partition=0, records=batch, current_leader_epoch=-1
                        )
                    ],
                ),
            )
        ).partitions[0]
        assert (r.error_code, r.base_offset) == (0, i)
    got = (
        await fetch(
            rm,
            pb.FetchRequest(
                replica_id=-1,
                max_bytes=1 << 20,
                partitions=[
                    pb.PartitionFetch(
                        topic="orders",
                        partition=0,
                        fetch_offset=5,
                        partition_max_bytes=1 << 20,
                        current_leader_epoch=-1,
                    )
                ],
            ),
        )
    ).partitions[0]
    assert got.error_code == 0 and got.high_watermark == 20
    headers = list(iter_headers(got.records))
    assert headers[0].base_offset <= 5 and headers[-1].base_offset == 19
    assert all(h.partition_leader_epoch == 3 for h in headers)
    values = [rec.value for _, rec in iter_batch_records(got.records)]
    assert values[-1] == b"v019" + b"." * 40

    by_ts = list_offsets(
        rm,
        pb.ListOffsetsRequest(
            partitions=[
                pb.PartitionOffsetQuery(
                    topic="orders", partition=0, timestamp=1007, current_leader_epoch=-1
                ),
                pb.PartitionOffsetQuery(
                    topic="orders", partition=0, timestamp=-2, current_leader_epoch=-1
                ),
            ]
        ),
    ).partitions
    assert (by_ts[0].offset, by_ts[0].timestamp, by_ts[0].leader_epoch) == (7, 1007, 3)
    assert by_ts[1].offset == 0

    assert await rm.close()
    await_ckpt = ckpt.read_offset_checkpoint(tmp_path / ckpt.REPLICATION_OFFSET_CHECKPOINT)
    assert await_ckpt[("orders", 0)] == 20

    rm2 = new_rm(tmp_path)
    assert rm2.scan_log_dir() == [("orders", 0)]
    assert await rm2.load_logs({"orders": {"retention.ms": "-1"}}, clean_shutdown=True) == 1
    p = rm2.get("orders", 0)
    assert p is not None and not p.is_leader
    assert p.log.log_end_offset == 20 and p.high_watermark == 20 and p.topic_id == topic_id
    await rm2.update_partitions(
        pb.UpdatePartitionsRequest(
            controller_epoch=1,
            partitions=[
                pb.PartitionState(
                    topic="orders",
                    partition=0,
                    leader=1,
                    leader_epoch=4,
                    isr=[1],
                    replicas=[1],
                    topic_id=topic_id,
                )
            ],
        )
    )
    latest = list_offsets(
        rm2,
        pb.ListOffsetsRequest(
            partitions=[
                pb.PartitionOffsetQuery(
                    topic="orders", partition=0, timestamp=-1, current_leader_epoch=4
                )
            ]
        ),
    ).partitions[0]
    assert (latest.offset, latest.leader_epoch) == (20, 4)
    assert [(e.epoch, e.start_offset) for e in p.log.leader_epoch_cache.entries] == [
        (3, 0),
        (4, 20),
    ]
    assert await rm2.close()


async def test_engine_delete_removes_directory(tmp_path: Path) -> None:
    rm = new_rm(tmp_path)
    await rm.update_partitions(
        pb.UpdatePartitionsRequest(
            controller_epoch=1,
            partitions=[
                pb.PartitionState(
                    topic="gone", partition=2, leader=1, leader_epoch=0, isr=[1], replicas=[1]
                )
            ],
        )
    )
    assert (tmp_path / "gone-2").is_dir()
    resp = await rm.stop_replicas(
        pb.StopReplicasRequest(
            controller_epoch=1,
            delete_partitions=True,
            partitions=[pb.StopReplica(topic="gone", partition=2, leader_epoch=-2)],
        )
    )
    assert resp.partitions[0].error_code == 0
    assert not (tmp_path / "gone-2").exists()
    assert rm.get("gone", 2) is None


async def test_corrupt_checkpoint_means_recovery_not_failure(tmp_path: Path) -> None:
    rm = new_rm(tmp_path)
    await rm.update_partitions(
        pb.UpdatePartitionsRequest(
            controller_epoch=1,
            partitions=[
                pb.PartitionState(
                    topic="c", partition=0, leader=1, leader_epoch=0, isr=[1], replicas=[1]
                )
            ],
        )
    )
    batch = build_batch([Record(timestamp=1, value=b"x")])
    await append(
        rm,
        pb.AppendRequest(
            acks=1,
            partitions=[pb.PartitionAppend(topic="c", partition=0, records=batch)],
        ),
    )
    assert await rm.close()
    (tmp_path / ckpt.RECOVERY_POINT_CHECKPOINT).write_text("0\n5\nnot a checkpoint\n")
    rm2 = new_rm(tmp_path)
    assert await rm2.load_logs({}, clean_shutdown=False) == 1
    p = rm2.get("c", 0)
    assert p is not None and p.log.log_end_offset == 1
    assert await rm2.close()
