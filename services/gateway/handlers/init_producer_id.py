"""InitProducerId (v0-4).

Idempotent producers (null transactional id), as Kafka's TransactionCoordinator answers them:
always a fresh producer id with epoch 0, whatever producer_id/epoch the request carries
(KIP-360 clients asking to bump get a new id, which resets their sequences just the same). Ids
come from blocks claimed in ``/latest_producer_id_block``. A transactional id is forwarded to
its transaction coordinator (``transactions.forward``).
"""

from __future__ import annotations

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.protocol import ApiKey
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.handlers.transactions import forward

log = get_logger("gateway.producer_ids")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


async def handle(ctx: RequestContext, req: Body) -> Body:
    v = ctx.api_version
    txn_id = req.get("transactional_id")
    if txn_id is not None:
        return await forward(ctx, req)
    pid, epoch = (
        req.get("producer_id", NO_PRODUCER_ID),
        req.get("producer_epoch", NO_PRODUCER_EPOCH),
    )
    if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
        return error_response(req, v, ErrorCode.INVALID_REQUEST)
    manager = ctx.services.producer_ids
    if manager is None:
        return error_response(req, v, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    try:
        new_pid = await manager.next_id()
    except KafkaError as exc:
        log.error("producer_id_allocation_failed", error=str(exc))
        return error_response(req, v, exc.code)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: retriable for the client
        # COORDINATOR_LOAD_IN_PROGRESS: clients re-send without a coordinator lookup (which an
        # idempotent producer, having no transactional id, cannot do).
        log.warning("producer_id_allocation_failed", error=repr(exc))
        return error_response(req, v, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    return {"throttle_time": 0, "error_code": 0, "producer_id": new_pid, "producer_epoch": 0}


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {
        "throttle_time": 0,
        "error_code": int(code),
        "producer_id": NO_PRODUCER_ID,
        "producer_epoch": NO_PRODUCER_EPOCH,
    }


HANDLER = ApiHandler(ApiKey.INIT_PRODUCER_ID, "InitProducerId", handle, error_response)
