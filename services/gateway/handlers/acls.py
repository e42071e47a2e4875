"""CreateAcls, DescribeAcls, DeleteAcls over the ACLs in ZooKeeper (``services.common.zk.acls``).

Without an authorizer (``authorizer.class.name`` unset) they answer SECURITY_DISABLED, as Kafka.
Describe answers from the gateway's ACL cache; Create and Delete write ZooKeeper (with Kafka's
change notifications, so every gateway reloads) and reload this gateway's cache before
answering, so a client reads its own change at once.
"""

from __future__ import annotations

from collections import defaultdict

from services.common.acl import (
    Binding,
    BindingFilter,
    Entry,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    invalid_binding,
)
from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey
from services.common.zk.acls import read_acls, update_acls
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body, error_message

log = get_logger("gateway.acls")

_DISABLED = "No Authorizer is configured."


def _enum(enum_cls: type, value: int, fallback: int) -> int:
    return value if value in enum_cls._value2member_map_ else fallback  # type: ignore[attr-defined]


def _binding(c: Body) -> Binding:
    return Binding(
        Resource(
            ResourceType(_enum(ResourceType, c["resource_type"], 0)),
            c["resource_name"] or "",
            PatternType(_enum(PatternType, c.get("resource_pattern_type", 3), 0)),
        ),
        Entry(
            c["principal"] or "",
            c["host"] or "",
            Operation(_enum(Operation, c["operation"], 0)),
            Permission(_enum(Permission, c["permission_type"], 0)),
        ),
    )


def _filter(f: Body) -> BindingFilter:
    return BindingFilter(
        f["resource_type_filter"],
        f["resource_name_filter"],
        f.get("pattern_type_filter", PatternType.LITERAL),
        f["principal_filter"],
        f["host_filter"],
        f["operation"],
        f["permission_type"],
    )


async def _reload(ctx: RequestContext) -> None:
    s = ctx.services
    assert s.authorizer is not None and s.zk is not None
    s.authorizer.load(await read_acls(s.zk))


# ---- CreateAcls ------------------------------------------------------------------------------
def _create_result(code: ErrorCode, message: str | None = None) -> Body:
    return {"error_code": int(code), "error_message": error_message(code, message)}


async def create_acls(ctx: RequestContext, req: Body) -> Body:
    creations = req.get("creations") or []
    if ctx.services.authorizer is None:
        return create_error(req, ctx.api_version, ErrorCode.SECURITY_DISABLED)
    results: list[Body] = [_create_result(ErrorCode.NONE)] * len(creations)
    per_resource: dict[Resource, list[tuple[int, Entry]]] = defaultdict(list)
    for i, c in enumerate(creations):
        b = _binding(c)
        if (why := invalid_binding(b)) is not None:
            results[i] = _create_result(ErrorCode.INVALID_REQUEST, why)
        else:
            per_resource[b.resource].append((i, b.entry))
    assert ctx.services.zk is not None
    for resource, items in per_resource.items():

        def add(old: list[Entry], items: list[tuple[int, Entry]] = items) -> list[Entry]:
            return old + [e for e in dict.fromkeys(e for _, e in items) if e not in old]

        try:
            await update_acls(ctx.services.zk, resource, add)
        except Exception as exc:  # noqa: BLE001 - reported per creation, as Kafka
            log.warning("create_acls_failed", resource=str(resource), error=repr(exc))
            for i, _ in items:
                results[i] = _create_result(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
    if per_resource:
        await _reload(ctx)
    return {"throttle_time": 0, "results": results}


def create_error(req: Body, version: int, code: ErrorCode) -> Body:
    message = _DISABLED if code == ErrorCode.SECURITY_DISABLED else None
    return {
        "throttle_time": 0,
        "results": [_create_result(code, message) for _ in req.get("creations") or []],
    }


# ---- DescribeAcls ----------------------------------------------------------------------------
def _grouped(bindings: list[Binding]) -> list[Body]:
    by_resource: dict[Resource, list[Entry]] = defaultdict(list)
    for b in bindings:
        by_resource[b.resource].append(b.entry)
    return [
        {
            "resource_type": int(r.type),
            "resource_name": r.name,
            "pattern_type": int(r.pattern),
            "acls": [
                {
                    "principal": e.principal,
                    "host": e.host,
                    "operation": int(e.operation),
                    "permission_type": int(e.permission),
                }
                for e in entries
            ],
        }
        for r, entries in by_resource.items()
    ]


async def describe_acls(ctx: RequestContext, req: Body) -> Body:
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return describe_error(req, ctx.api_version, ErrorCode.SECURITY_DISABLED)
    flt = _filter(req)
    if (why := flt.invalid()) is not None:
        return describe_error(req, ctx.api_version, ErrorCode.INVALID_REQUEST, why)
    matching = [b for b in authorizer.bindings if flt.matches(b)]
    return {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "resources": _grouped(matching),
    }


def describe_error(req: Body, version: int, code: ErrorCode, message: str | None = None) -> Body:
    if code == ErrorCode.SECURITY_DISABLED:
        message = _DISABLED
    return {
        "throttle_time": 0,
        "error_code": int(code),
        "error_message": error_message(code, message),
        "resources": [],
    }


# ---- DeleteAcls ------------------------------------------------------------------------------
def _matching_acl(b: Binding) -> Body:
    return {
        "error_code": 0,
        "error_message": None,
        "resource_type": int(b.resource.type),
        "resource_name": b.resource.name,
        "pattern_type": int(b.resource.pattern),
        "principal": b.entry.principal,
        "host": b.entry.host,
        "operation": int(b.entry.operation),
        "permission_type": int(b.entry.permission),
    }


def _filter_result(code: ErrorCode, message: str | None, matching: list[Body]) -> Body:
    return {
        "error_code": int(code),
        "error_message": error_message(code, message),
        "matching_acls": matching,
    }


async def delete_acls(ctx: RequestContext, req: Body) -> Body:
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return delete_error(req, ctx.api_version, ErrorCode.SECURITY_DISABLED)
    assert ctx.services.zk is not None
    filters = [_filter(f) for f in req.get("filters") or []]
    invalid = [f.invalid() for f in filters]
    valid = [f for f, why in zip(filters, invalid, strict=True) if why is None]
    removed: dict[int, list[Binding]] = defaultdict(list)  # filter index -> bindings removed
    failed: dict[int, str] = {}
    resources = dict.fromkeys(
        b.resource for b in await read_acls(ctx.services.zk) if any(f.matches(b) for f in valid)
    )
    for resource in resources:
        taken: dict[int, list[Binding]] = {}

        def drop(
            old: list[Entry],
            resource: Resource = resource,
            taken: dict[int, list[Binding]] = taken,
        ) -> list[Entry]:
            taken.clear()
            keep = []
            for e in old:
                b = Binding(resource, e)
                hits = [i for i, f in enumerate(filters) if invalid[i] is None and f.matches(b)]
                for i in hits:
                    taken.setdefault(i, []).append(b)
                if not hits:
                    keep.append(e)
            return keep

        try:
            await update_acls(ctx.services.zk, resource, drop)
        except Exception as exc:  # noqa: BLE001 - reported per filter, as Kafka
            log.warning("delete_acls_failed", resource=str(resource), error=repr(exc))
            for i in taken:
                failed[i] = str(exc)
            continue
        for i, bindings in taken.items():
            removed[i].extend(bindings)
    if resources:
        await _reload(ctx)
    results = []
    for i, why in enumerate(invalid):
        if why is not None:
            results.append(_filter_result(ErrorCode.INVALID_REQUEST, why, []))
        elif i in failed:
            results.append(_filter_result(ErrorCode.UNKNOWN_SERVER_ERROR, failed[i], []))
        else:
            results.append(
                _filter_result(ErrorCode.NONE, None, [_matching_acl(b) for b in removed[i]])
            )
    return {"throttle_time": 0, "filter_results": results}


def delete_error(req: Body, version: int, code: ErrorCode) -> Body:
    message = _DISABLED if code == ErrorCode.SECURITY_DISABLED else None
    return {
        "throttle_time": 0,
        "filter_results": [_filter_result(code, message, []) for _ in req.get("filters") or []],
    }


CREATE_HANDLER = ApiHandler(ApiKey.CREATE_ACLS, "CreateAcls", create_acls, create_error)
DESCRIBE_HANDLER = ApiHandler(
    ApiKey.DESCRIBE_ACLS,
    "DescribeAcls",
    describe_acls,
    lambda req, version, code: describe_error(req, version, code),
)
DELETE_HANDLER = ApiHandler(ApiKey.DELETE_ACLS, "DeleteAcls", delete_acls, delete_error)
