"""DescribeClientQuotas (v0-1) and AlterClientQuotas (v0-1), on ZooKeeper's quota entities
(``/config/users``, ``/config/clients``; common/client_quotas.py) as Kafka's ZooKeeper-mode
broker serves them, written by the gateway directly as SCRAM credentials are.

Describe filters as Kafka's handleDescribeClientQuotas: a component per entity type matches an
exact name (match_type 0), the default entity (1) or any named entity (2); ``strict`` leaves out
entities with parts no component names. A duplicate or empty entity type, or a match string that
does not fit its match type, is INVALID_REQUEST for the whole request; an unknown entity type
UNSUPPORTED_VERSION (Kafka: "Custom entity type ... not supported"). Alter answers per entry:
an empty, duplicate or unknown entity part, an unknown key or a value that is not a positive
number (a whole one for the byte rates) is INVALID_REQUEST with Kafka's message; with
``validate_only`` nothing is written.
"""

from __future__ import annotations

from typing import Any

from services.common.client_quotas import (
    CLIENT_ID,
    DEFAULT,
    IP,
    USER,
    Entity,
    QuotaError,
    entity_from_parts,
    entity_parts,
    entity_path,
    sanitize,
    validate_value,
)
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.zk.quota_configs import read_quota_entities
from services.common.zk.user_configs import update_entity_config
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _filters(components: list[Body]) -> dict[str, tuple[int, str | None]]:
    """entity type -> (match type, sanitized name); raises _Refused as Kafka refuses."""
    out: dict[str, tuple[int, str | None]] = {}
    for comp in components:
        etype = comp.get("entity_type") or ""
        mtype, match = int(comp.get("match_type", 0)), comp.get("match")
        if etype == "":
            raise _Refused(
                ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type"
            )
        if etype not in (USER, CLIENT_ID, IP):
            raise _Refused(
                ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{etype}' not supported"
            )
        if etype in out:
            what = "client" if etype == CLIENT_ID else etype
            raise _Refused(
                ErrorCode.INVALID_REQUEST, f"Duplicate {what} filter component entity type"
            )
        if mtype == MATCH_EXACT and match is None:
            raise _Refused(
                ErrorCode.INVALID_REQUEST,
                "Request specified MATCH_TYPE_EXACT, but set match string to null",
            )
        if mtype in (MATCH_DEFAULT, MATCH_SPECIFIED) and match is not None:
            raise _Refused(
                ErrorCode.INVALID_REQUEST,
                f"Request specified MATCH_TYPE {mtype}, but also specified a match string",
            )
        if mtype not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unexpected match type: {mtype}")
        out[etype] = (mtype, sanitize(match) if match is not None else None)
    if IP in out and (USER in out or CLIENT_ID in out):
        raise _Refused(
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination, IP filter component should not be "
            "used with user or clientId filter component.",
        )
    return out


def _matches(filt: tuple[int, str | None] | None, name: str | None, strict: bool) -> bool:
    if filt is None:
        return name is None or not strict
    mtype, match = filt
    if mtype == MATCH_EXACT:
        return name == match
    if mtype == MATCH_DEFAULT:
        return name == DEFAULT
    return name is not None


def _entity_body(entity: Entity) -> list[Body]:
    return [{"entity_type": t, "entity_name": n} for t, n in entity_parts(entity)]


async def handle_describe(ctx: RequestContext, req: Body) -> Body:
    zk = ctx.services.zk
    if zk is None:
        return describe_error(req, ctx.api_version, ErrorCode.UNKNOWN_SERVER_ERROR)
    try:
        filters = _filters(list(req.get("components") or []))
    except _Refused as exc:
        return describe_error(req, ctx.api_version, exc.code) | {"error_message": exc.message}
    strict = bool(req.get("strict"))
    entries: list[Body] = []
    if IP not in filters:  # kafka-py keeps no IP quotas
        for entity, values in sorted(
            (await read_quota_entities(zk)).items(), key=lambda kv: entity_path(kv[0])
        ):
            if _matches(filters.get(USER), entity[0], strict) and _matches(
                filters.get(CLIENT_ID), entity[1], strict
            ):
                entries.append(
                    {
                        "entity": _entity_body(entity),
                        "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
                    }
                )
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": entries}


def describe_error(req: Body, version: int, code: ErrorCode) -> Body:
    return {"throttle_time": 0, "error_code": int(code), "error_message": None, "entries": None}


def _changes(ops: list[Body]) -> dict[str, str | None]:
    """key -> new znode value (None: removed); raises QuotaError."""
    out: dict[str, str | None] = {}
    for op in ops:
        key = op.get("key") or ""
        if op.get("remove"):
            validate_value(key, 1.0)  # the key must be known
            out[key] = None
        else:
            out[key] = validate_value(key, float(op.get("value", 0.0)))
    return out


async def _alter_one(ctx: RequestContext, entry: Body, validate_only: bool) -> Body:
    result: Body = {"error_code": 0, "error_message": None, "entity": entry.get("entity") or []}
    try:
        parts = [(e.get("entity_type") or "", e.get("entity_name")) for e in result["entity"]]
        entity = entity_from_parts(parts)
        changes = _changes(list(entry.get("ops") or []))
    except QuotaError as exc:
        return result | {"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": str(exc)}
    if validate_only:
        return result

    def change(config: dict[str, str]) -> dict[str, str]:
        for key, value in changes.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        return config

    assert ctx.services.zk is not None
    await update_entity_config(ctx.services.zk, entity_path(entity), change)
    return result


async def handle_alter(ctx: RequestContext, req: Body) -> Body:
    if ctx.services.zk is None:
        return alter_error(req, ctx.api_version, ErrorCode.UNKNOWN_SERVER_ERROR)
    validate_only = bool(req.get("validate_only"))
    entries = [await _alter_one(ctx, e, validate_only) for e in req.get("entries") or []]
    return {"throttle_time": 0, "entries": entries}


def alter_error(req: Body, version: int, code: ErrorCode) -> Body:
    entries: list[Any] = [
        {"error_code": int(code), "error_message": None, "entity": e.get("entity") or []}
        for e in req.get("entries") or []
    ]
    return {"throttle_time": 0, "entries": entries}


DESCRIBE_HANDLER = ApiHandler(
    ApiKey.DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", handle_describe, describe_error
)
ALTER_HANDLER = ApiHandler(
    ApiKey.ALTER_CLIENT_QUOTAS, "AlterClientQuotas", handle_alter, alter_error
)
