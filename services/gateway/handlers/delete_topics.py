"""DeleteTopics (v1-6): forwarded to the controller, answered once the topics are gone. Each
topic spends its partition count from the client's controller mutation quota (KIP-599), checked
and recorded topic by topic in request order before the deletion, as Kafka does."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.controller_client import ControllerError
from services.gateway.handlers.base import ApiHandler, Body, as_error_code, topic_name_error
from services.gateway.mutation_quota import THROTTLING_MESSAGE
from services.gateway.quota_enforcement import mutation_quota

log = get_logger("gateway.admin")


def _result(name: str | None, topic_id: Any, code: ErrorCode, message: str | None = None) -> Body:
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": int(code),
        "error_message": message if code != ErrorCode.NONE else None,
    }


def _requested(req: Body, version: int) -> list[tuple[str | None, uuid.UUID | None]]:
    if version >= 6:
        out = []
        for t in req.get("topics") or []:
            raw = t.get("topic_id")
            tid = uuid.UUID(bytes=bytes(raw)) if raw and any(raw) else None
            out.append((t.get("name"), tid))
        return out
    return [(n, None) for n in req.get("topic_names") or []]


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    loop = asyncio.get_running_loop()
    timeout_ms = int(req.get("timeout", 30000))
    deadline = loop.time() + (timeout_ms / 1000.0 if timeout_ms > 0 else s.request_timeout_s)
    results: list[Body] = []
    to_delete: dict[str, list[Body]] = {}
    quota = mutation_quota(ctx)
    for name, tid in _requested(req, ctx.api_version):
        if name is not None and tid is not None:
            results.append(
                _result(
                    name,
                    tid,
                    ErrorCode.INVALID_REQUEST,
                    "Topic name and topic id cannot both be specified",
                )
            )
            continue
        if name is None:
            topic = s.cache.topic_by_id(tid) if tid is not None else None
            if topic is None:
                results.append(
                    _result(
                        None,
                        tid,
                        ErrorCode.UNKNOWN_TOPIC_ID,
                        "This server does not host this topic ID.",
                    )
                )
                continue
            name = topic.name
        elif (why := topic_name_error(name)) is not None:
            results.append(_result(name, None, ErrorCode.INVALID_TOPIC_EXCEPTION, why))
            continue
        topic = s.cache.topic(name)
        if topic is None:
            results.append(
                _result(
                    name,
                    None,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "This server does not host this topic-partition.",
                )
            )
            continue
        if name not in to_delete:
            if quota.exhausted():
                results.append(
                    _result(
                        name,
                        topic.topic_id,
                        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                        THROTTLING_MESSAGE,
                    )
                )
                continue
            quota.record(len(topic.partitions))
        res = _result(name, topic.topic_id, ErrorCode.NONE)
        results.append(res)
        to_delete.setdefault(name, []).append(res)
    if to_delete:
        await _delete(s, to_delete, timeout_ms, deadline)
    return {"throttle_time": quota.throttle_ms, "responses": results}


async def _delete(
    s: GatewayServices, to_delete: dict[str, list[Body]], timeout_ms: int, deadline: float
) -> None:
    def set_all(name: str, code: ErrorCode, message: str | None) -> None:
        for res in to_delete[name]:
            res.update(error_code=int(code), error_message=message if code else None)

    names = list(to_delete)
    try:
        answers = await s.controller.call_items(
            "DeleteTopics",
            names,
            lambda items: pb.DeleteTopicsRequest(names=list(items), timeout_ms=timeout_ms),
            lambda n: n,
            lambda resp: resp.topics,
            lambda r: str(r.name),
            deadline,
        )
    except ControllerError as exc:
        log.warning("delete_topics_failed", error=str(exc))
        for n in names:
            set_all(n, ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        return
    waits = []
    for n in names:
        r = answers.get(n)
        if r is None:
            set_all(n, ErrorCode.REQUEST_TIMED_OUT, "Timed out waiting for the controller")
        elif r.error_code:
            set_all(n, as_error_code(r.error_code), r.error_message or None)
        elif timeout_ms > 0:
            waits.append(n)

    async def wait_gone(name: str) -> None:
        remaining = deadline - asyncio.get_running_loop().time()
        if not await s.cache.wait_for(lambda: s.cache.topic(name) is None, max(remaining, 0.0)):
            set_all(
                name, ErrorCode.REQUEST_TIMED_OUT, f"Timed out waiting for {name} to be deleted"
            )

    await asyncio.gather(*(wait_gone(n) for n in waits))


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {
        "throttle_time": 0,
        "responses": [_result(n, tid, code) for n, tid in _requested(req, version)],
    }


HANDLER = ApiHandler(ApiKey.DELETE_TOPICS, "DeleteTopics", handle, error_response)
