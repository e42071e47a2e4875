"""CreatePartitions (v0-3): forwarded to the controller, answered once the partitions are visible.

The controller validates counts and assignments (it has the authoritative state); the gateway
rejects duplicate topics (INVALID_REQUEST) and names it has never seen
(UNKNOWN_TOPIC_OR_PARTITION), as Kafka does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body, as_error_code
from services.gateway.handlers.topic_admin import (
    answers_within_quota,
    deadline_of,
    duplicate_names,
    unique_by_name,
)
from services.gateway.quota_enforcement import mutation_quota


def _result(name: str, code: ErrorCode, message: str | None = None) -> Body:
    return {
        "name": name,
        "error_code": int(code),
        "error_message": message if code != ErrorCode.NONE else None,
    }


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    timeout_ms = int(req.get("timeout", 30000))
    validate_only = bool(req.get("validate_only", False))
    deadline = deadline_of(s, timeout_ms)
    topics = req.get("topics") or []
    dupes = duplicate_names(topics)
    results: dict[str, Body] = {}
    specs: list[Any] = []
    existing: dict[str, int] = {}
    for t in topics:
        name = t["name"]
        if name in dupes:
            results[name] = _result(name, ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
            continue
        topic = s.cache.topic(name)
        if topic is None:
            results[name] = _result(
                name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
            )
            continue
        first_new = existing[name] = len(topic.partitions)
        assignments = [
            pb.ReplicaAssignment(
                partition=first_new + i, broker_ids=list(a.get("broker_ids") or [])
            )
            for i, a in enumerate(t.get("assignments") or [])
        ]
        specs.append(
            pb.PartitionCountSpec(name=name, count=int(t["count"]), assignments=assignments)
        )

    def call(items: Sequence[Any]) -> Awaitable[dict[str, Any]]:
        return s.controller.call_items(
            "CreatePartitions",
            items,
            lambda batch: pb.CreatePartitionsRequest(
                topics=list(batch), timeout_ms=timeout_ms, validate_only=validate_only
            ),
            lambda spec: spec.name,
            lambda resp: resp.topics,
            lambda r: str(r.name),
            deadline,
        )

    quota = mutation_quota(ctx, validate_only)
    answers = await answers_within_quota(
        quota,
        call,
        specs,
        results,
        _result,
        "create_partitions_failed",
        lambda spec, _answer: max(0, spec.count - existing[spec.name]),
    )
    waits = []
    for spec in specs:
        r = answers.get(spec.name)
        if r is None:
            continue
        results[spec.name] = _result(
            spec.name, as_error_code(r.error_code), r.error_message or None
        )
        if r.error_code == 0 and not validate_only and timeout_ms > 0:
            waits.append((spec.name, spec.count))

    async def wait_visible(name: str, count: int) -> None:
        def visible() -> bool:
            t = s.cache.topic(name)
            return t is not None and len(t.partitions) >= count

        remaining = deadline - asyncio.get_running_loop().time()
        if not await s.cache.wait_for(visible, max(remaining, 0.0)):
            results[name] = _result(
                name,
                ErrorCode.REQUEST_TIMED_OUT,
                f"Timed out waiting for the partitions of {name}",
            )

    await asyncio.gather(*(wait_visible(n, c) for n, c in waits))
    return {
        "throttle_time": quota.throttle_ms,
        "results": [results[t["name"]] for t in unique_by_name(topics)],
    }


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    names = dict.fromkeys(t["name"] for t in req.get("topics") or [])
    return {"throttle_time": 0, "results": [_result(n, code) for n in names]}


HANDLER = ApiHandler(ApiKey.CREATE_PARTITIONS, "CreatePartitions", handle, error_response)
