"""CreateTopics: forwarded to the active controller, answered once the topics are visible."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.controller_client import ControllerError
from services.gateway.handlers.base import ApiHandler, Body, as_error_code, topic_name_error
from services.gateway.handlers.configs import topic_config_entries
from services.gateway.handlers.topic_admin import (
    answers_within_quota,
    deadline_of,
    duplicate_names,
    unique_by_name,
)
from services.gateway.handlers.visibility import wait_config_visible
from services.gateway.quota_enforcement import mutation_quota

log = get_logger("gateway.admin")


def _topic_results(resp: Any) -> Any:
    return resp.topics


def _name_of(r: Any) -> str:
    return str(r.name)


async def call_create(
    s: GatewayServices, specs: Sequence[Any], timeout_ms: int, validate_only: bool, deadline: float
) -> dict[str, Any]:
    """CreateTopics on the controller; result per name (missing = timed out)."""
    return await s.controller.call_items(
        "CreateTopics",
        specs,
        lambda items: pb.CreateTopicsRequest(
            topics=list(items), timeout_ms=timeout_ms, validate_only=validate_only
        ),
        lambda spec: spec.name,
        _topic_results,
        _name_of,
        deadline,
    )


async def create_with_defaults(s: GatewayServices, names: Sequence[str]) -> dict[str, ErrorCode]:
    """Auto-creation: num.partitions / default.replication.factor of the controller."""
    specs = [pb.TopicSpec(name=n, num_partitions=-1, replication_factor=-1) for n in names]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + s.request_timeout_s
    try:
        results = await call_create(s, specs, s.settings.request_timeout_ms, False, deadline)
    except ControllerError as exc:
        log.warning("auto_create_failed", topics=list(names), error=str(exc))
        return {n: ErrorCode.LEADER_NOT_AVAILABLE for n in names}
    out: dict[str, ErrorCode] = {}
    for n in names:
        r = results.get(n)
        out[n] = ErrorCode.REQUEST_TIMED_OUT if r is None else as_error_code(r.error_code)
        if r is not None and r.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.info("auto_create_refused", topic=n, error=out[n].name, message=r.error_message)
    return out


def _result(name: str, code: ErrorCode, message: str | None = None) -> Body:
    return {
        "name": name,
        "topic_id": None,
        "error_code": int(code),
        "error_message": message if code != ErrorCode.NONE else None,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": [],
    }


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    timeout_ms = int(req.get("timeout", 60000))
    validate_only = bool(req.get("validate_only", False))
    deadline = deadline_of(s, timeout_ms)
    topics = req.get("topics") or []
    dupes = duplicate_names(topics)
    results: dict[str, Body] = {}
    specs: list[Any] = []
    requested_configs: dict[str, dict[str, str]] = {}
    for t in topics:
        name = t["name"]
        if name in dupes:
            results[name] = _result(
                name,
                ErrorCode.INVALID_REQUEST,
                "Create topics request from client contains multiple entries "
                f"for the following topics: {name}",
            )
            continue
        if (why := topic_name_error(name)) is not None:
            results[name] = _result(name, ErrorCode.INVALID_TOPIC_EXCEPTION, why)
            continue
        configs: dict[str, str] = {}
        null_config = None
        for c in t.get("configs") or []:
            if c.get("value") is None:
                null_config = c["name"]
            configs[c["name"]] = c.get("value") or ""
        if null_config is not None:
            results[name] = _result(
                name,
                ErrorCode.INVALID_CONFIG,
                f"Null value not supported for topic configs: {null_config}",
            )
            continue
        requested_configs[name] = configs
        specs.append(
            pb.TopicSpec(
                name=name,
                num_partitions=int(t["num_partitions"]),
                replication_factor=int(t["replication_factor"]),
                assignments=[
                    pb.ReplicaAssignment(
                        partition=a["partition_index"], broker_ids=list(a.get("broker_ids") or [])
                    )
                    for a in t.get("assignments") or []
                ],
                configs=configs,
            )
        )
    quota = mutation_quota(ctx, validate_only)
    answers = await answers_within_quota(
        quota,
        lambda items: call_create(s, items, timeout_ms, validate_only, deadline),
        specs,
        results,
        _result,
        "create_topics_failed",
        lambda _spec, answer: int(answer.num_partitions),
    )
    waits = []
    for spec in specs:
        r = answers.get(spec.name)
        if r is None:
            continue
        code = as_error_code(r.error_code)
        res = _result(spec.name, code, r.error_message or None)
        if code == ErrorCode.NONE:
            res["num_partitions"] = r.num_partitions
            res["replication_factor"] = r.replication_factor
            if len(r.topic_id) == 16:
                res["topic_id"] = uuid.UUID(bytes=r.topic_id)
            res["configs"] = topic_config_entries(s, requested_configs[spec.name])
            if not validate_only and timeout_ms > 0:
                waits.append((spec.name, r.num_partitions, res, bool(requested_configs[spec.name])))
        results[spec.name] = res
    await asyncio.gather(
        *(_wait_visible(s, name, n, res, configs, deadline) for name, n, res, configs in waits)
    )
    return {
        "throttle_time": quota.throttle_ms,
        "topics": [results[t["name"]] for t in unique_by_name(topics)],
    }


async def _wait_visible(
    s: GatewayServices, name: str, partitions: int, res: Body, configs: bool, deadline: float
) -> None:
    def visible() -> bool:
        t = s.cache.topic(name)
        return t is not None and len(t.partitions) >= max(partitions, 1)

    remaining = deadline - asyncio.get_running_loop().time()
    if await s.cache.wait_for(visible, max(remaining, 0.0)):
        t = s.cache.topic(name)
        if t is not None and t.topic_id is not None:
            res["topic_id"] = t.topic_id
        if configs:  # the overrides too, for a DescribeConfigs that follows
            await wait_config_visible(s, name, deadline)
        return
    res.update(
        _result(
            name, ErrorCode.REQUEST_TIMED_OUT, f"Timed out waiting for topic {name} to be visible"
        )
    )


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {
        "throttle_time": 0,
        "topics": [_result(t["name"], code) for t in unique_by_name(req.get("topics") or [])],
    }


HANDLER = ApiHandler(ApiKey.CREATE_TOPICS, "CreateTopics", handle, error_response)
