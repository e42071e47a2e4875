"""AlterPartitionReassignments (API 45, v0-1) and ListPartitionReassignments (API 46, v0): both
flexible, forwarded to the active controller (services/controller/reassignment.py), which
answers per partition with Kafka's error codes. v1 adds ``allow_replication_factor_change``
(KIP-860), echoed in the response; v0 always allows it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.gateway.context import RequestContext
from services.gateway.controller_client import ControllerError
from services.gateway.handlers.base import ApiHandler, Body, as_error_code

log = get_logger("gateway.admin")


async def _call_controller(
    ctx: RequestContext, method: str, request: Any, timeout_ms: int
) -> tuple[Any | None, ErrorCode, str]:
    """(response, error, message): one controller call, re-sent while NOT_CONTROLLER."""
    s = ctx.services
    deadline = asyncio.get_running_loop().time() + max(timeout_ms, 0) / 1000 + s.request_timeout_s
    try:
        answers = await s.controller.call_items(
            method, [0], lambda _: request, lambda key: key, lambda r: [r], lambda _r: 0, deadline
        )
    except ControllerError as exc:
        log.warning("controller call failed", rpc=method, error=str(exc))
        return None, ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)
    resp = answers.get(0)
    if resp is None:
        return None, ErrorCode.REQUEST_TIMED_OUT, "Timed out waiting for the controller"
    if resp.error_code != ErrorCode.NONE:
        return None, as_error_code(resp.error_code), resp.error_message
    return resp, ErrorCode.NONE, ""


# ---- AlterPartitionReassignments ------------------------------------------------------------
def _alter_body(req: Body, results: list[tuple[str, int, int, str]], code: int, msg: str) -> Body:
    topics: dict[str, list[Body]] = {}
    for topic, partition, pcode, pmsg in results:
        topics.setdefault(topic, []).append(
            {"partition_index": partition, "error_code": pcode, "error_message": pmsg or None}
        )
    return {
        "throttle_time": 0,
        "allow_replication_factor_change": bool(req.get("allow_replication_factor_change", True)),
        "error_code": code,
        "error_message": msg or None,
        "responses": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }


def _alter_failed(req: Body, code: ErrorCode, message: str = "") -> Body:
    named = [
        (t["name"], p["partition_index"], int(code), message)
        for t in req.get("topics") or []
        for p in t["partitions"]
    ]
    return _alter_body(req, named, int(code), message)


async def handle_alter(ctx: RequestContext, req: Body) -> Body:
    timeout_ms = int(req.get("timeout", 60000))
    request = pb.AlterPartitionReassignmentsRequest(
        partitions=[
            pb.ReassignmentTarget(
                topic=t["name"],
                partition=p["partition_index"],
                cancel=p.get("replicas") is None,
                replicas=list(p.get("replicas") or []),
            )
            for t in req.get("topics") or []
            for p in t["partitions"]
        ],
        allow_replication_factor_change=bool(req.get("allow_replication_factor_change", True)),
        timeout_ms=timeout_ms,
    )
    resp, code, message = await _call_controller(
        ctx, "AlterPartitionReassignments", request, timeout_ms
    )
    if resp is None:
        return _alter_failed(req, code, message)
    results = [(r.topic, r.partition, r.error_code, r.error_message) for r in resp.partitions]
    return _alter_body(req, results, 0, "")


# ---- ListPartitionReassignments -------------------------------------------------------------
def _list_body(topics: list[Body], code: int = 0, message: str = "") -> Body:
    return {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message or None,
        "topics": topics,
    }


async def handle_list(ctx: RequestContext, req: Body) -> Body:
    named = req.get("topics")
    request = pb.ListPartitionReassignmentsRequest(
        all_partitions=named is None,
        partitions=[
            pb.PartitionRef(topic=t["name"], partition=p)
            for t in named or []
            for p in t.get("partition_indexes") or []
        ],
    )
    resp, code, message = await _call_controller(
        ctx, "ListPartitionReassignments", request, int(req.get("timeout", 60000))
    )
    if resp is None:
        return _list_body([], int(code), message)
    topics: dict[str, list[Body]] = {}
    for r in resp.reassignments:
        topics.setdefault(r.topic, []).append(
            {
                "partition_index": r.partition,
                "replicas": list(r.replicas),
                "adding_replicas": list(r.adding_replicas),
                "removing_replicas": list(r.removing_replicas),
            }
        )
    return _list_body([{"name": t, "partitions": ps} for t, ps in topics.items()])


def _error(build: Callable[[Body, ErrorCode], Body]) -> Callable[[Body, int, ErrorCode], Body]:
    return lambda req, _version, code: build(req, code)


ALTER_HANDLER = ApiHandler(
    ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    "AlterPartitionReassignments",
    handle_alter,
    _error(_alter_failed),
)
LIST_HANDLER = ApiHandler(
    ApiKey.LIST_PARTITION_REASSIGNMENTS,
    "ListPartitionReassignments",
    handle_list,
    _error(lambda _req, code: _list_body([], int(code))),
)
