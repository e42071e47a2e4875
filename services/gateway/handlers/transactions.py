"""The transaction APIs, forwarded to the transaction coordinator that owns each transactional
id's shard of ``__transaction_state``: InitProducerId with a transactional id (see
``init_producer_id``), AddPartitionsToTxn (v0-3), AddOffsetsToTxn, EndTxn;
DescribeTransactions is split per coordinator (answers merged in request order) and
ListTransactions asks every registered transaction coordinator (a coordinator that fails sets
the top-level error, next to the others' transactions).

As Kafka's KafkaApis, AddPartitionsToTxn naming a partition the cluster does not have is
answered here: UNKNOWN_TOPIC_OR_PARTITION for those, OPERATION_NOT_ATTEMPTED for the others.
Routing failures are answered in each API's shape (``services.common.txn_errors``): a shard not
placed is COORDINATOR_NOT_AVAILABLE, a coordinator that cannot be reached NOT_COORDINATOR (the
client looks the coordinator up again).
"""

from __future__ import annotations

import asyncio

from services.common.coordinator.clients import ForwardError
from services.common.errors import ErrorCode
from services.common.internal_topics.transaction_state import TxnState
from services.common.protocol import ApiKey
from services.common.txn_errors import (
    API_NAMES,
    describe_entry,
    error_response,
    partitions_response,
    transactional_ids,
)
from services.gateway.context import RequestContext
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
    return await _ask(ctx, route.coordinator, req)


async def _ask(ctx: RequestContext, coordinator: int, req: Body) -> Body:
    key, version = ctx.api_key, ctx.api_version
    clients = ctx.services.txn_coordinators
    assert clients is not None
    try:
        return await clients.forward(
            coordinator,
            key,
            version,
            req,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx.peer),
            timeout_s=ctx.services.request_timeout_s,
        )
    except ForwardError as exc:
        return error_response(key, version, req, exc.code)


async def _describe(ctx: RequestContext, req: Body) -> Body:
    clients = ctx.services.txn_coordinators
    ids = list(req.get("transactional_ids") or ())
    answers: dict[str, Body] = {}
    by_coordinator: dict[int, list[str]] = {}
    for txn_id in dict.fromkeys(ids):
        route = clients.route(txn_id) if clients is not None else None
        if route is None or route.error != ErrorCode.NONE:
            code = route.error if route is not None else ErrorCode.COORDINATOR_NOT_AVAILABLE
            answers[txn_id] = describe_entry(txn_id, code)
        else:
            by_coordinator.setdefault(route.coordinator, []).append(txn_id)
    replies = await asyncio.gather(
        *(_ask(ctx, c, {**req, "transactional_ids": part}) for c, part in by_coordinator.items())
    )
    for reply in replies:
        for entry in reply.get("transaction_states") or ():
            answers.setdefault(entry.get("transactional_id") or "", entry)
    return {
        "throttle_time": 0,
        "transaction_states": [
            answers.get(t) or describe_entry(t, ErrorCode.UNKNOWN_SERVER_ERROR) for t in ids
        ],
    }


async def _list(ctx: RequestContext, req: Body) -> Body:
    clients = ctx.services.txn_coordinators
    coordinators = sorted(ctx.services.cache.transaction_coordinators)
    if clients is None:
        return error_response(
            ctx.api_key, ctx.api_version, req, ErrorCode.COORDINATOR_NOT_AVAILABLE
        )
    replies = await asyncio.gather(*(_ask(ctx, c, req) for c in coordinators))
    error = 0
    states: list[Body] = []
    unknown: list[str] = []
    for reply in replies:
        error = error or int(reply.get("error_code") or 0)
        states.extend(reply.get("transaction_states") or ())
        unknown = unknown or list(reply.get("unknown_state_filters") or ())
    if not replies:
        unknown = [
            s for s in req.get("state_filters") or () if s not in {t.kafka_name for t in TxnState}
        ]
    return {
        "throttle_time": 0,
        "error_code": error,
        "unknown_state_filters": unknown,
        "transaction_states": states,
    }


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
    _handler(ApiKey.DESCRIBE_TRANSACTIONS, _describe),
    _handler(ApiKey.LIST_TRANSACTIONS, _list),
]
