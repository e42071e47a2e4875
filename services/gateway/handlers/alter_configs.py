"""AlterConfigs (v0-2): replace a resource's dynamic config through the controller.

Shared with IncrementalAlterConfigs: validation of the request shape happens here (resource
types, duplicates, null values, unknown topics); the controller validates names and values and
writes ``/config/...``. After a change the answer waits (bounded) until this gateway's
view (metadata cache, dynamic broker configs) holds what ZooKeeper now holds, so a
DescribeConfigs that follows sees it. A BROKER resource names a broker id (gateway and/or
storage node, ``services.common.broker_ids``) or ``""``, the cluster-wide default.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.controller_client import ControllerError
from services.gateway.handlers.base import ApiHandler, Body, as_error_code, topic_name_error
from services.gateway.handlers.configs import is_broker_id
from services.gateway.handlers.visibility import (
    wait_broker_config_visible,
    wait_config_visible,
)

log = get_logger("gateway.admin")

TOPIC = 2
BROKER = 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

OpsBuilder = Callable[[Body], tuple[list[Any], str | None]]


def _result(res: Body, code: ErrorCode, message: str | None = None) -> Body:
    return {
        "error_code": int(code),
        "error_message": message if code != ErrorCode.NONE else None,
        "resource_type": res["resource_type"],
        "resource_name": res["resource_name"],
    }


def replace_ops(res: Body) -> tuple[list[Any], str | None]:
    """AlterConfigs: the new full override set (SET per entry)."""
    ops = []
    for c in res.get("configs") or []:
        if c.get("value") is None:
            return [], f"Null value not supported for : {c['name']}"
        ops.append(pb.ConfigOp(key=c["name"], value=c["value"], op=SET))
    return ops, None


async def alter(ctx: RequestContext, req: Body, build_ops: OpsBuilder, incremental: bool) -> Body:
    s = ctx.services
    loop = asyncio.get_running_loop()
    deadline = loop.time() + s.request_timeout_s
    validate_only = bool(req.get("validate_only", False))
    resources = req.get("resources") or []
    counts: dict[tuple[int, str], int] = {}
    for r in resources:
        key = (r["resource_type"], r["resource_name"])
        counts[key] = counts.get(key, 0) + 1
    results: list[Body] = []
    changes: dict[tuple[int, str], tuple[Any, Body]] = {}
    for r in resources:
        rtype, name = r["resource_type"], r["resource_name"]
        if counts[(rtype, name)] > 1:
            results.append(_result(r, ErrorCode.INVALID_REQUEST, "Duplicate resource."))
            continue
        if rtype == TOPIC:
            if (why := topic_name_error(name)) is not None:
                results.append(_result(r, ErrorCode.INVALID_TOPIC_EXCEPTION, why))
                continue
            if s.cache.topic(name) is None:
                results.append(
                    _result(r, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
                )
                continue
        elif rtype == BROKER:
            if name and not name.isdigit():
                results.append(
                    _result(
                        r,
                        ErrorCode.INVALID_REQUEST,
                        f"Broker id must be an integer, but it is: {name}",
                    )
                )
                continue
            if name and not is_broker_id(s, int(name)):
                results.append(
                    _result(
                        r,
                        ErrorCode.INVALID_REQUEST,
                        f"Unexpected broker id {name}: no gateway or storage node has it",
                    )
                )
                continue
        else:
            results.append(
                _result(r, ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}")
            )
            continue
        ops, problem = build_ops(r)
        if problem is not None:
            results.append(_result(r, ErrorCode.INVALID_REQUEST, problem))
            continue
        res = _result(r, ErrorCode.NONE)
        results.append(res)
        changes[(rtype, name)] = (
            pb.ConfigResourceChange(
                resource_type=rtype, name=name, ops=ops, incremental=incremental
            ),
            res,
        )
    if changes:
        await _forward(s, changes, validate_only, deadline)
    return {"throttle_time": 0, "responses": results}


async def _forward(
    s: GatewayServices,
    changes: dict[tuple[int, str], tuple[Any, Body]],
    validate_only: bool,
    deadline: float,
) -> None:
    items = [c for c, _ in changes.values()]
    try:
        answers = await s.controller.call_items(
            "AlterConfigs",
            items,
            lambda batch: pb.AlterConfigsRequest(
                resources=list(batch), validate_only=validate_only
            ),
            lambda c: (c.resource_type, c.name),
            lambda resp: resp.resources,
            lambda r: (r.resource_type, str(r.name)),
            deadline,
        )
    except ControllerError as exc:
        log.warning("alter_configs_failed", error=str(exc))
        for _, res in changes.values():
            res.update(error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR), error_message=str(exc))
        return
    waits: list[Coroutine[Any, Any, bool]] = []
    for key, (_, res) in changes.items():
        r = answers.get(key)
        if r is None:
            res.update(
                error_code=int(ErrorCode.REQUEST_TIMED_OUT),
                error_message="Timed out waiting for the controller",
            )
        elif r.error_code:
            res.update(
                error_code=int(as_error_code(r.error_code)), error_message=r.error_message or None
            )
        elif key[0] == TOPIC and not validate_only:
            waits.append(wait_config_visible(s, key[1], deadline))
        elif key[0] == BROKER and not validate_only:
            waits.append(wait_broker_config_visible(s, key[1], deadline))
    await asyncio.gather(*waits)


async def handle(ctx: RequestContext, req: Body) -> Body:
    return await alter(ctx, req, replace_ops, incremental=False)


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {"throttle_time": 0, "responses": [_result(r, code) for r in req.get("resources") or []]}


HANDLER = ApiHandler(ApiKey.ALTER_CONFIGS, "AlterConfigs", handle, error_response)
