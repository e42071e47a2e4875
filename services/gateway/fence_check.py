"""Lifting a stale produce fence (produce_order.py): the leader already holds the failed batch.

A connection's fence holds back an idempotent producer's later batches of a partition until
the client resends the batch that failed. The resend may go elsewhere - over another of the
client's connections to this gateway (several broker ids can name one gateway) or through
another gateway - and then never meets this fence, which would refuse every later batch of
the connection for good. So a batch that meets a fence starts (at most one at a time per
fence) a look at the leader's producer state: if the failed batch's sequence is stored, or the
producer moved to a newer epoch, the fence goes and the client's next retry passes.
"""

from __future__ import annotations

from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.gateway.context import GatewayServices
from services.gateway.leader_calls import call_leader
from services.gateway.produce_order import ProduceOrder, TopicPartition, sequence_after


def fence_is_stale(
    result: pb.DescribeProducersPartitionResult | None, fence: tuple[int, int, int]
) -> bool:
    """Whether the leader's producer state (``result``) holds the fenced producer's failed
    batch (``fence``: producer id, epoch, base sequence) or a newer epoch of that producer."""
    if result is None or result.error_code != 0:
        return False
    producer_id, epoch, sequence = fence
    for p in result.active_producers:
        if p.producer_id != producer_id:
            continue
        if p.producer_epoch != epoch:
            return p.producer_epoch > epoch
        return p.last_sequence >= 0 and not sequence_after(sequence, p.last_sequence)
    return False


async def check_fence(
    s: GatewayServices,
    order: ProduceOrder,
    tp: TopicPartition,
    leader: int,
    fence: tuple[int, int, int],
) -> None:
    """Ask ``leader`` whether ``fence`` (taken with ``order.fence_to_check``) is stale and
    tell ``order``; any failure leaves the fence (the next fenced batch asks again)."""
    stale = False
    try:
        got = await call_leader(
            s,
            leader,
            "DescribeProducers",
            pb.DescribeProducersRequest(
                partitions=[pb.DescribeProducersPartition(topic=tp[0], partition=tp[1])]
            ),
        )
        stale = isinstance(got, dict) and fence_is_stale(got.get(tp), fence)
    finally:
        order.fence_checked(tp, fence, stale)
