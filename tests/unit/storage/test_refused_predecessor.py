"""A batch whose predecessor this leader just refused (not appended, retriable) is answered
with that refusal, not OUT_OF_ORDER_SEQUENCE_NUMBER.

Why: librdkafka answers an OUT_OF_ORDER_SEQUENCE_NUMBER on a batch that is not first in line
by bumping the producer epoch and renumbering every unacknowledged batch from 0 on *every*
partition ("skipped sequence numbers", librdkafka 2.16). A batch of another partition that was
stored but not acknowledged (NOT_ENOUGH_REPLICAS_AFTER_APPEND, a timeout) is then written a
second time under the new epoch: the acknowledged duplicates of checker seed 540026937. The
out-of-order answer comes from this window: R1 refused NOT_ENOUGH_REPLICAS while the ISR is
below min.insync.replicas, the ISR grows back, the pipelined R2 arrives. Real replica manager
and logs; the ISR moves by the controller's orders.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from services.common.errors import ErrorCode
from services.common.records.batch import validate_batches
from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.appends import append
from services.storage.metrics import StorageMetrics
from services.storage.refused_batches import TTL_MS, RefusedBatches
from services.storage.replica_manager import ReplicaManager

TOPIC = "orders"
PID = 4000


def batch(seq: int, count: int = 2, epoch: int = 0, pid: int = PID) -> bytes:
    return build_batch(
        [Record(timestamp=1000 + i, value=b"s%d" % (seq + i)) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


async def order(rm: ReplicaManager, leader_epoch: int, isr: list[int]) -> None:
    resp = await rm.update_partitions(
        pb.UpdatePartitionsRequest(
            controller_epoch=1,
            partitions=[
                pb.PartitionState(
                    topic=TOPIC,
                    partition=0,
                    leader=1,
                    leader_epoch=leader_epoch,
                    isr=isr,
                    replicas=[1, 2],
                    topic_id=bytes(range(16)),
                    config={"min.insync.replicas": "2"},
                )
            ],
        )
    )
    assert resp.partitions[0].error_code == 0


async def produce(rm: ReplicaManager, records: bytes, acks: int = -1) -> pb.PartitionAppendResult:
    resp = await append(
        rm,
        pb.AppendRequest(
            acks=acks,
            timeout_ms=50,
            partitions=[
                pb.PartitionAppend(
                    topic=TOPIC, partition=0, records=records, current_leader_epoch=-1
                )
            ],
        ),
    )
    return resp.partitions[0]


def new_rm(tmp_path: Path) -> ReplicaManager:
    return ReplicaManager(1, tmp_path, {}, metrics=StorageMetrics(CollectorRegistry()))


async def test_the_batch_after_a_refused_one_gets_the_refusal_not_out_of_order(
    tmp_path: Path,
) -> None:
    rm = new_rm(tmp_path)
    await order(rm, 0, [1, 2])
    assert (await produce(rm, batch(0), acks=1)).error_code == ErrorCode.NONE
    log = rm.get(TOPIC, 0).log  # type: ignore[union-attr]
    await order(rm, 1, [1])  # the ISR falls below min.insync.replicas (epoch bump, no move)
    r1 = await produce(rm, batch(2))
    assert r1.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    await order(rm, 2, [1, 2])  # and is back before the pipelined R2 arrives
    r2 = await produce(rm, batch(4))
    assert r2.error_code == ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode(r2.error_code).name
    assert "refused" in r2.error_message
    assert log.log_end_offset == 2  # neither R1 nor R2 was written
    # the client's retries, in order, are appended where they belong
    assert (await produce(rm, batch(2), acks=1)).base_offset == 2
    assert (await produce(rm, batch(4), acks=1)).base_offset == 4


async def test_a_gap_no_refusal_explains_is_still_out_of_order(tmp_path: Path) -> None:
    rm = new_rm(tmp_path)
    await order(rm, 0, [1, 2])
    assert (await produce(rm, batch(0), acks=1)).error_code == ErrorCode.NONE
    await order(rm, 1, [1])
    assert (await produce(rm, batch(2))).error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    await order(rm, 2, [1, 2])
    # a sequence that skips more than the refused batch; a new epoch that does not start at 0
    for records in (batch(6), batch(4, epoch=1)):
        r = await produce(rm, records, acks=1)
        assert r.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode(r.error_code).name
    # once the refused batch is appended, the refusal is forgotten
    assert (await produce(rm, batch(2), acks=1)).base_offset == 2
    assert (
        await produce(rm, batch(6), acks=1)
    ).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


async def test_a_batch_refused_before_this_node_led_explains_the_next_one(tmp_path: Path) -> None:
    """NOT_LEADER_OR_FOLLOWER on R1 (the LeaderAndIsr order was still on its way), then the
    order lands and R2, pinned to the same node by the gateway, arrives."""
    rm = new_rm(tmp_path)
    await order(rm, 0, [1, 2])
    assert (await produce(rm, batch(0), acks=1)).error_code == ErrorCode.NONE
    resp = await rm.update_partitions(
        pb.UpdatePartitionsRequest(
            controller_epoch=1,
            partitions=[
                pb.PartitionState(
                    topic=TOPIC,
                    partition=0,
                    leader=2,
                    leader_epoch=1,
                    isr=[2, 1],
                    replicas=[1, 2],
                    topic_id=bytes(range(16)),
                    config={"min.insync.replicas": "2"},
                )
            ],
        )
    )
    assert resp.partitions[0].error_code == 0
    assert (await produce(rm, batch(2), acks=1)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    await order(rm, 2, [1, 2])
    r2 = await produce(rm, batch(4), acks=1)
    assert r2.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode(r2.error_code).name


def test_refusals_expire_and_do_not_pile_up() -> None:
    refused = RefusedBatches()
    for pid in range(100):  # producers refused by a follower, never appending here
        refused.refused(validate_batches(batch(0, pid=pid)), ErrorCode.NOT_LEADER_OR_FOLLOWER, 0)
    assert len(refused) == 100
    assert refused.explains(validate_batches(batch(2, pid=7)), TTL_MS) is not None
    assert refused.explains(validate_batches(batch(2, pid=8)), TTL_MS + 1) is None
    refused.refused(
        validate_batches(batch(0, pid=500)), ErrorCode.NOT_LEADER_OR_FOLLOWER, TTL_MS + 1
    )
    assert len(refused) == 1
