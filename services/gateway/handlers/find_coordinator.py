"""FindCoordinator (v0-4; v4 batches keys).

Groups (key type 0): the coordinator of a group is the group coordinator process that owns the
group's ``__consumer_offsets`` partition, but clients are always pointed at a GATEWAY - the one
that zone-aware routing makes "leader" of that partition for this client - which forwards the
group requests. As in Kafka, the first lookup creates ``__consumer_offsets`` (through the
controller) and is answered COORDINATOR_NOT_AVAILABLE until its shard is placed on a live
coordinator; clients retry. Transactions (key type 1) answer COORDINATOR_NOT_AVAILABLE: there is
no transaction coordinator yet.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as cpb
from services.common.zk.layout import CONSUMER_OFFSETS_TOPIC
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.controller_client import ControllerError
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.handlers.metadata import live_gateways
from services.gateway.routing import candidates, client_zone, leader_for, topic_hash

log = get_logger("gateway.find_coordinator")

GROUP, TRANSACTION = 0, 1
_NOT_AVAILABLE = "The coordinator is not available."


def _answer(key: str, code: ErrorCode, node: Any = None, message: str | None = None) -> Body:
    if node is None:
        return {
            "key": key,
            "node_id": -1,
            "host": "",
            "port": -1,
            "error_code": int(code),
            "error_message": message or (_NOT_AVAILABLE if code else None),
        }
    return {
        "key": key,
        "node_id": node.node_id,
        "host": node.host,
        "port": node.port,
        "error_code": 0,
        "error_message": None,
    }


def _create_offsets_topic(s: GatewayServices) -> None:
    """Ask the controller for __consumer_offsets, at most one call in flight."""
    if s.offsets_topic_creation is not None and not s.offsets_topic_creation.done():
        return

    async def create() -> None:
        deadline = asyncio.get_running_loop().time() + s.request_timeout_s
        try:
            resp = await s.controller.call(
                "CreateInternalTopic",
                cpb.CreateInternalTopicRequest(name=CONSUMER_OFFSETS_TOPIC),
                deadline,
            )
        except (TimeoutError, ControllerError) as exc:
            log.warning("offsets_topic_creation_failed", error=repr(exc))
            return
        if resp.error_code:
            log.info(
                "offsets_topic_not_created",
                error=ErrorCode(resp.error_code).name,
                message=resp.error_message,
            )
        else:
            log.info("offsets_topic_requested", topic=CONSUMER_OFFSETS_TOPIC)

    s.offsets_topic_creation = s.spawn(create(), "create __consumer_offsets")


def find_group_coordinator(ctx: RequestContext, key: str) -> Body:
    s = ctx.services
    if s.cache.topic(CONSUMER_OFFSETS_TOPIC) is None:
        _create_offsets_topic(s)
        return _answer(key, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if s.coordinators is None:
        return _answer(key, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    route = s.coordinators.route(key)
    if route.error != ErrorCode.NONE:
        return _answer(key, route.error)
    gateways = live_gateways(s)
    ids = candidates(gateways, client_zone(ctx.client_id, s.endpoint.rack))
    chosen = leader_for(topic_hash(CONSUMER_OFFSETS_TOPIC), route.partition, ids)
    return _answer(key, ErrorCode.NONE, gateways[chosen])


def _find(ctx: RequestContext, key_type: int, key: str) -> Body:
    if key_type == GROUP:
        return find_group_coordinator(ctx, key)
    if key_type == TRANSACTION:
        return _answer(key, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return _answer(key, ErrorCode.INVALID_REQUEST, message=f"Unknown coordinator type {key_type}")


async def handle(ctx: RequestContext, req: Body) -> Body:
    key_type = int(req.get("key_type", GROUP))
    if ctx.api_version >= 4:
        keys = req.get("coordinator_keys") or []
        return {"throttle_time": 0, "coordinators": [_find(ctx, key_type, k) for k in keys]}
    one = _find(ctx, key_type, req.get("key", ""))
    one.pop("key")
    return {"throttle_time": 0, **one}


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    if version >= 4:
        return {
            "throttle_time": 0,
            "coordinators": [_answer(k, code) for k in req.get("coordinator_keys") or []],
        }
    one = _answer("", code)
    one.pop("key")
    return {"throttle_time": 0, **one}


HANDLER = ApiHandler(ApiKey.FIND_COORDINATOR, "FindCoordinator", handle, error_response)
