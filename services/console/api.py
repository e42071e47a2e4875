"""The REST admin API: cluster, topics, groups and records, under ``/api``.

Errors are ``{"error": "<the CLI's one line>"}`` with 400 (bad request), 403 (read-only console
or not authorized), 404, 409 (conflict: exists, active group) or 503 (cluster unreachable).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from services.cli.common import CliError
from services.console import models as m
from services.console.cluster_admin import ConsoleAdmin
from services.console.lag_history import LagHistory
from services.console.records import RecordReader, TestProducer

T = TypeVar("T")
STATUS = {"invalid": 400, "forbidden": 403, "not_found": 404, "conflict": 409, "unavailable": 503}
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": m.ErrorBody} for code in (400, 403, 404, 409, 503)
}
TopicName = Annotated[str, Path(pattern=m.TOPIC_NAME)]
GroupId = Annotated[str, Path(min_length=1, max_length=255)]


@dataclass
class ConsoleState:
    admin: ConsoleAdmin
    reader: RecordReader
    producer: TestProducer
    lag: LagHistory
    read_only: bool
    bootstrap: str
    records_max: int


def state(request: Request) -> ConsoleState:
    return request.app.state.console  # type: ignore[no-any-return]


StateDep = Annotated[ConsoleState, Depends(state)]


def writable(request: Request) -> None:
    if state(request).read_only:
        raise CliError("the console is read-only (console.read.only=true)", kind="forbidden")


async def call(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking admin call off the event loop."""
    return await asyncio.to_thread(fn, *args)


def install_error_handler(app: FastAPI) -> None:
    @app.exception_handler(CliError)
    async def cli_error(_request: Request, exc: CliError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=STATUS.get(exc.kind, 400))


router = APIRouter(prefix="/api", responses=_ERRORS)


@router.get("/info", response_model=m.Info)
async def info(s: StateDep) -> dict[str, Any]:
    return {"read_only": s.read_only, "bootstrap_servers": s.bootstrap}


@router.get("/cluster", response_model=m.ClusterOverview)
async def cluster(s: StateDep) -> dict[str, Any]:
    return await call(s.admin.overview)


@router.get("/topics", response_model=list[m.TopicSummary])
async def topics(s: StateDep) -> list[dict[str, Any]]:
    return await call(s.admin.topics)


@router.post(
    "/topics",
    response_model=m.TopicDetail,
    status_code=201,
    dependencies=[Depends(writable)],
)
async def create_topic(body: m.TopicCreate, s: StateDep) -> dict[str, Any]:
    await call(
        s.admin.create_topic, body.name, body.partitions, body.replication_factor, body.configs
    )
    return await call(s.admin.topic, body.name)


@router.get("/topics/{name}", response_model=m.TopicDetail)
async def topic(name: TopicName, s: StateDep) -> dict[str, Any]:
    return await call(s.admin.topic, name)


@router.delete("/topics/{name}", status_code=204, dependencies=[Depends(writable)])
async def delete_topic(name: TopicName, s: StateDep) -> Response:
    await call(s.admin.delete_topic, name)
    return Response(status_code=204)


@router.patch(
    "/topics/{name}/configs",
    response_model=list[m.ConfigInfo],
    dependencies=[Depends(writable)],
)
async def alter_configs(name: TopicName, body: m.ConfigChange, s: StateDep) -> Any:
    return await call(s.admin.alter_topic_configs, name, body.set, body.delete)


@router.get("/topics/{name}/partitions/{partition}/records", response_model=m.RecordPage)
async def records(
    name: TopicName,
    partition: Annotated[int, Path(ge=0, le=2**31 - 1)],
    s: StateDep,
    offset: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    timestamp: Annotated[
        int | None, Query(ge=0, le=2**63 - 1, description="ms since the epoch")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 50,
) -> dict[str, Any]:
    if offset is not None and timestamp is not None:
        raise CliError("give offset or timestamp, not both")
    return await call(s.reader.page, name, partition, offset, timestamp, min(limit, s.records_max))


@router.post(
    "/topics/{name}/records",
    response_model=m.ProduceResult,
    status_code=201,
    dependencies=[Depends(writable)],
)
async def produce(name: TopicName, body: m.ProduceRequest, s: StateDep) -> dict[str, Any]:
    headers = [(h.key, h.value) for h in body.headers]
    return await call(s.producer.produce, name, body.partition, body.key, body.value, headers)


@router.get("/groups", response_model=list[m.GroupSummary])
async def groups(s: StateDep) -> list[dict[str, str]]:
    return await call(s.admin.group_list)


@router.get("/groups/{group}", response_model=m.GroupDetail)
async def group(group: GroupId, s: StateDep) -> dict[str, Any]:
    doc = await call(s.admin.group, group)
    s.lag.looked_at(group)
    history = s.lag.samples(group)
    if not history:  # the first look: start the chart with this answer
        s.lag.record(group, doc["total_lag"])
        history = s.lag.samples(group)
    doc["lag_history"] = [{"time": t, "lag": lag} for t, lag in history]
    return doc


@router.post(
    "/groups/{group}/reset-offsets",
    response_model=m.ResetResult,
    dependencies=[Depends(writable)],
)
async def reset_offsets(group: GroupId, body: m.ResetRequest, s: StateDep) -> dict[str, Any]:
    if not body.all_topics and not body.topics:
        raise CliError("a reset needs topics or all_topics")
    needs_value = body.scenario in ("to_offset", "to_datetime", "by_duration", "shift_by")
    if needs_value and body.value is None:
        raise CliError(f"reset {body.scenario} needs a value")
    rows = await call(
        s.admin.reset_offsets,
        group,
        body.scenario,
        body.value,
        body.topics,
        body.all_topics,
        body.execute,
    )
    return {"group": group, "executed": body.execute, "offsets": rows}
