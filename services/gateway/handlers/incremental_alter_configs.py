"""IncrementalAlterConfigs (v0-1): SET / DELETE / APPEND / SUBTRACT through the controller."""

from __future__ import annotations

from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.gateway.context import RequestContext
from services.gateway.handlers.alter_configs import DELETE, SUBTRACT, alter
from services.gateway.handlers.alter_configs import error_response as _error_response
from services.gateway.handlers.base import ApiHandler, Body


def incremental_ops(res: Body) -> tuple[list[Any], str | None]:
    ops = []
    names: set[str] = set()
    for c in res.get("configs") or []:
        name, op, value = c["name"], c["config_operation"], c.get("value")
        if name in names:
            return [], "Error due to duplicate config keys"
        names.add(name)
        if not 0 <= op <= SUBTRACT:
            return [], f"Invalid config operation {op} for {name}"
        if value is None and op != DELETE:
            return [], f"Null value not supported for : {name}"
        ops.append(pb.ConfigOp(key=name, value=value or "", op=op))
    return ops, None


async def handle(ctx: RequestContext, req: Body) -> Body:
    return await alter(ctx, req, incremental_ops, incremental=True)


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return _error_response(req, version, code)


HANDLER = ApiHandler(
    ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", handle, error_response
)
