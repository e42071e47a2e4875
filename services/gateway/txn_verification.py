"""KIP-890 part 1, the gateway's half: ask the transaction coordinator of a transactional id
whether partitions are in the ongoing transaction of a producer id and epoch (Kafka's
AddPartitionsToTxnManager, with AddPartitionsToTxn v4 verify-only forwarded between services,
batched per coordinator by ``txn_verify_batch``).

The answer per partition is already the Produce error for old Produce versions (v9 and below
here), as Kafka maps it: NONE (verified); INVALID_TXN_STATE (not in the transaction: the
client aborts); PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH; the coordinator being moved,
loading, busy with the previous transaction's markers (CONCURRENT_TRANSACTIONS) or unreachable
becomes NOT_ENOUGH_REPLICAS, which old clients retry.
"""

from __future__ import annotations

import asyncio

from services.common.errors import ErrorCode
from services.gateway import metrics
from services.gateway.context import RequestContext
from services.gateway.txn_verify_batch import VerificationBatcher

_RETRY = ErrorCode.NOT_ENOUGH_REPLICAS
_PRODUCE_CODES = {
    ErrorCode.NONE: ErrorCode.NONE,
    ErrorCode.INVALID_TXN_STATE: ErrorCode.INVALID_TXN_STATE,
    ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.INVALID_PRODUCER_EPOCH: ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    ),
}

TopicPartition = tuple[str, int]


async def verify_partitions(
    ctx: RequestContext, txn_id: str, batches: list[tuple[str, int, tuple[int, int, int]]]
) -> dict[TopicPartition, ErrorCode]:
    """Each (topic, partition) of ``batches`` (topic, partition, (producer id, epoch, seq))
    mapped to its Produce error code (NONE: verified), counted in TXN_VERIFICATIONS."""
    answer = await _verify(ctx, txn_id, batches)
    for code in answer.values():
        metrics.TXN_VERIFICATIONS.labels(code.name).inc()
    return answer


async def _verify(
    ctx: RequestContext, txn_id: str, batches: list[tuple[str, int, tuple[int, int, int]]]
) -> dict[TopicPartition, ErrorCode]:
    wanted = [(t, p) for t, p, _ in batches]
    s = ctx.services
    clients = s.txn_coordinators
    if clients is None:
        return dict.fromkeys(wanted, _RETRY)
    route = clients.route(txn_id)
    if route.error != ErrorCode.NONE:
        return dict.fromkeys(wanted, _RETRY)
    if s.txn_verifier is None:
        s.txn_verifier = VerificationBatcher(clients, s.request_timeout_s)
    by_producer: dict[tuple[int, int], list[TopicPartition]] = {}
    for topic, partition, (pid, epoch, _) in batches:
        by_producer.setdefault((pid, epoch), []).append((topic, partition))
    answers = await asyncio.gather(
        *(
            s.txn_verifier.verify(route.coordinator, txn_id, pid, epoch, tps)
            for (pid, epoch), tps in by_producer.items()
        )
    )
    out: dict[TopicPartition, ErrorCode] = {}
    for codes in answers:
        for tp, code in codes.items():
            out[tp] = _PRODUCE_CODES.get(code, _RETRY)
    return {tp: out.get(tp, _RETRY) for tp in wanted}
