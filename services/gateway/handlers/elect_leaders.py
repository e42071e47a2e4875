"""ElectLeaders (v0-2: ``kafka-leader-election.sh``, AdminClient.electLeaders): forwarded to the
active controller (services/controller/elect_leaders.py), which answers per partition.

v0 has no election type (preferred only) and no top-level error code. A request without
partitions means every partition; then, as Kafka does, partitions that needed no election are
left out of the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.gateway.context import RequestContext
from services.gateway.controller_client import ControllerError
from services.gateway.handlers.base import ApiHandler, Body, as_error_code

log = get_logger("gateway.admin")


def _by_topic(results: Iterable[tuple[str, int, int, str]]) -> list[Body]:
    topics: dict[str, list[Body]] = {}
    for topic, partition, code, message in results:
        topics.setdefault(topic, []).append(
            {"partition_id": partition, "error_code": code, "error_message": message or None}
        )
    return [{"topic": t, "partition_result": ps} for t, ps in topics.items()]


def _named(req: Body) -> list[tuple[str, int]]:
    named = req.get("topic_partitions") or []
    return list(dict.fromkeys((t["topic"], p) for t in named for p in t["partitions"]))


def _failed(req: Body, code: ErrorCode, message: str = "") -> Body:
    results = [(t, p, int(code), message) for t, p in _named(req)]
    return {
        "throttle_time": 0,
        "error_code": int(code),
        "replica_election_results": _by_topic(results),
    }


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    timeout_ms = int(req.get("timeout", 60000))
    request = pb.ElectLeadersRequest(
        election_type=int(req.get("election_type") or 0),
        all_partitions=req.get("topic_partitions") is None,
        partitions=[pb.PartitionRef(topic=t, partition=p) for t, p in _named(req)],
        timeout_ms=timeout_ms,
    )
    # the controller answers by the request's timeout; the call may take that long plus a hop
    deadline = asyncio.get_running_loop().time() + max(timeout_ms, 0) / 1000 + s.request_timeout_s
    try:
        answers = await s.controller.call_items(
            "ElectLeaders",
            [0],
            lambda _: request,
            lambda key: key,
            lambda resp: [resp],
            lambda _resp: 0,
            deadline,
        )
    except ControllerError as exc:
        log.warning("elect_leaders_failed", error=str(exc))
        return _failed(req, ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
    resp = answers.get(0)
    if resp is None:
        return _failed(req, ErrorCode.REQUEST_TIMED_OUT, "Timed out waiting for the controller")
    if resp.error_code != ErrorCode.NONE:
        return _failed(req, as_error_code(resp.error_code), resp.error_message)
    results = ((r.topic, r.partition, r.error_code, r.error_message) for r in resp.partitions)
    return {"throttle_time": 0, "error_code": 0, "replica_election_results": _by_topic(results)}


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return _failed(req, code)


HANDLER = ApiHandler(ApiKey.ELECT_LEADERS, "ElectLeaders", handle, error_response)
