"""What CreateTopics and CreatePartitions share: the request's deadline, duplicate names, the
controller's answers by topic name (within the client's controller mutation quota), and results
in request order."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.gateway.context import GatewayServices
from services.gateway.controller_client import ControllerError
from services.gateway.handlers.base import Body
from services.gateway.mutation_quota import THROTTLING_MESSAGE, MutationQuota

log = get_logger("gateway.admin")

ResultFn = Callable[[str, ErrorCode, str | None], Body]


def deadline_of(s: GatewayServices, timeout_ms: int) -> float:
    """Loop time by which the request is answered: its timeout, or the gateway's request timeout
    when the client sent none (0 or negative: answer as soon as the controller has)."""
    wait_s = timeout_ms / 1000.0 if timeout_ms > 0 else s.request_timeout_s
    return asyncio.get_running_loop().time() + wait_s


def duplicate_names(topics: Iterable[Body]) -> set[str]:
    """Names that appear more than once (each of their entries is refused, as in Kafka)."""
    return {name for name, n in Counter(t["name"] for t in topics).items() if n > 1}


def unique_by_name(topics: Iterable[Body]) -> list[Body]:
    """The first entry of each name, in request order."""
    seen: set[str] = set()
    out: list[Body] = []
    for t in topics:
        if t["name"] not in seen:
            seen.add(t["name"])
            out.append(t)
    return out


async def controller_answers(
    call: Callable[[Sequence[Any]], Awaitable[dict[str, Any]]],
    specs: Sequence[Any],
    results: dict[str, Body],
    result: ResultFn,
    event: str,
) -> dict[str, Any]:
    """The controller's answer per spec name, for the specs that got one. When the controller
    cannot be reached every spec fails with UNKNOWN_SERVER_ERROR; a spec it did not answer in
    time gets REQUEST_TIMED_OUT. Those outcomes are written to ``results``. No specs: no call."""
    if not specs:
        return {}
    try:
        answers = await call(specs)
    except ControllerError as exc:
        log.warning(event, error=str(exc))
        for spec in specs:
            results[spec.name] = result(spec.name, ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        return {}
    out: dict[str, Any] = {}
    for spec in specs:
        answer = answers.get(spec.name)
        if answer is None:
            results[spec.name] = result(
                spec.name, ErrorCode.REQUEST_TIMED_OUT, "Timed out waiting for the controller"
            )
        else:
            out[spec.name] = answer
    return out


async def answers_within_quota(
    quota: MutationQuota,
    call: Callable[[Sequence[Any]], Awaitable[dict[str, Any]]],
    specs: Sequence[Any],
    results: dict[str, Body],
    result: ResultFn,
    event: str,
    permits: Callable[[Any, Any], int],
) -> dict[str, Any]:
    """:func:`controller_answers` spending ``quota`` (KIP-599) by ``permits(spec, answer)`` per
    mutation done. A strict quota is checked before each spec, in request order, so specs go
    to the controller one at a time and those met with the bucket below zero are refused with
    THROTTLING_QUOTA_EXCEEDED, as Kafka's ZooKeeper-mode admin manager does topic by topic.
    Without a quota, or a permissive one, one call carries them all."""
    if not (quota.bounded and quota.strict):
        answers = await controller_answers(call, specs, results, result, event)
        quota.record(sum(permits(spec, a) for spec in specs if _done(a := answers.get(spec.name))))
        return answers
    out: dict[str, Any] = {}
    for spec in specs:
        if quota.exhausted():
            results[spec.name] = result(
                spec.name, ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_MESSAGE
            )
            continue
        answer = (await controller_answers(call, [spec], results, result, event)).get(spec.name)
        if answer is not None:
            out[spec.name] = answer
            if _done(answer):
                quota.record(permits(spec, answer))
    return out


def _done(answer: Any) -> bool:
    return answer is not None and answer.error_code == 0
