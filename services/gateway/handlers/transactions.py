"""The transaction APIs, forwarded to the transaction coordinator that owns each transactional
id's shard of ``__transaction_state``: InitProducerId with a transactional id (see
``init_producer_id``), AddPartitionsToTxn (v0-3), AddOffsetsToTxn, EndTxn.

As Kafka's KafkaApis, AddPartitionsToTxn naming a partition the cluster does not have is
answered here: UNKNOWN_TOPIC_OR_PARTITION for those, OPERATION_NOT_ATTEMPTED for the others.
Routing failures are answered in each API's shape (``services.common.txn_errors``): a shard not
placed is COORDINATOR_NOT_AVAILABLE, a coordinator that cannot be reached NOT_COORDINATOR (the
client looks the coordinator up again).
"""

from __future__ import annotations

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.txn_errors import (
    API_NAMES,
    error_response,
    partitions_response,
    transactional_ids,
)
from services.gateway.context import RequestContext
from services.gateway.coordinators import ForwardError
from services.gateway.handlers.base import ApiHandler, Body, HandleFn
from services.gateway.handlers.group_requests import client_host


async def forward(ctx: RequestContext, req: Body) -> Body:
    """``req`` answered by the coordinator of its transactional id."""
    key, version = ctx.api_key, ctx.api_version
    clients = ctx.services.txn_coordinators
    ids = transactional_ids(key, req)
    if not ids:
        return error_response(key, version, req, ErrorCode.INVALID_REQUEST)
    if clients is None:
        return error_response(key, version, req, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    route = clients.route(ids[0])
    if route.error != ErrorCode.NONE:
        return error_response(key, version, req, route.error)
    try:
        return await clients.forward(
            route.coordinator,
            key,
            version,
            req,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx.peer),
            timeout_s=ctx.services.request_timeout_s,
        )
    except ForwardError as exc:
        return error_response(key, version, req, exc.code)


async def _add_partitions(ctx: RequestContext, req: Body) -> Body:
    cache = ctx.services.cache
    wanted = [
        (t.get("name") or "", int(p))
        for t in req.get("v3_and_below_topics") or []
        for p in t.get("partitions") or []
    ]
    unknown = {tp for tp in wanted if cache.partition(*tp) is None}
    if unknown:
        return partitions_response(
            [
                (
                    tp,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    if tp in unknown
                    else ErrorCode.OPERATION_NOT_ATTEMPTED,
                )
                for tp in dict.fromkeys(wanted)
            ]
        )
    return await forward(ctx, req)


def _handler(key: ApiKey, handle: HandleFn) -> ApiHandler:
    def error(req: Body, version: int, code: ErrorCode) -> Body:
        return error_response(key, version, req, code)

    return ApiHandler(key, API_NAMES[key], handle, error)


HANDLERS = [
    _handler(ApiKey.ADD_PARTITIONS_TO_TXN, _add_partitions),
    _handler(ApiKey.ADD_OFFSETS_TO_TXN, forward),
    _handler(ApiKey.END_TXN, forward),
]
