"""KIP-890 part 1, the gateway's half: ask the transaction coordinator of a transactional id
whether partitions are in the ongoing transaction of a producer id and epoch (Kafka's
AddPartitionsToTxnManager, with AddPartitionsToTxn v4 verify-only forwarded between services).

The answer per partition is already the Produce error for old Produce versions (v9 and below
here), as Kafka maps it: NONE (verified); INVALID_TXN_STATE (not in the transaction: the
client aborts); PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH; the coordinator being moved,
loading, busy with the previous transaction's markers (CONCURRENT_TRANSACTIONS) or unreachable
becomes NOT_ENOUGH_REPLICAS, which old clients retry.
"""

from __future__ import annotations

from services.common.coordinator.clients import ForwardError
from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey
from services.gateway import metrics
from services.gateway.context import RequestContext
from services.gateway.handlers.base import as_error_code
from services.gateway.handlers.group_requests import client_host

log = get_logger("gateway.txn_verification")

VERIFY_VERSION = 4  # AddPartitionsToTxn with verify_only
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
    clients = ctx.services.txn_coordinators
    if clients is None:
        return dict.fromkeys(wanted, _RETRY)
    route = clients.route(txn_id)
    if route.error != ErrorCode.NONE:
        return dict.fromkeys(wanted, _RETRY)
    by_producer: dict[tuple[int, int], dict[str, list[int]]] = {}
    for topic, partition, (pid, epoch, _) in batches:
        by_producer.setdefault((pid, epoch), {}).setdefault(topic, []).append(partition)
    body = {
        "transactions": [
            {
                "transactional_id": txn_id,
                "producer_id": pid,
                "producer_epoch": epoch,
                "verify_only": True,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            for (pid, epoch), topics in by_producer.items()
        ]
    }
    try:
        reply = await clients.forward(
            route.coordinator,
            ApiKey.ADD_PARTITIONS_TO_TXN,
            VERIFY_VERSION,
            body,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx.peer),
            timeout_s=ctx.services.request_timeout_s,
        )
    except ForwardError as exc:
        log.info("txn_verification_failed", transactional_id=txn_id, error=exc.code.name)
        return dict.fromkeys(wanted, _RETRY)
    out: dict[TopicPartition, ErrorCode] = {}
    top = int(reply.get("error_code") or 0)
    for result in reply.get("results_by_transaction") or ():
        for topic in result.get("topic_results") or ():
            for r in topic.get("results_by_partition") or ():
                code = as_error_code(top or int(r.get("partition_error_code") or 0))
                tp = (topic.get("name") or "", int(r.get("partition_index", -1)))
                out[tp] = _PRODUCE_CODES.get(code, _RETRY)
    return {tp: out.get(tp, _RETRY) for tp in wanted}
