"""DescribeUserScramCredentials (v0) and AlterUserScramCredentials (v0), on ``/config/users``
(user_configs.py) with Kafka's validation and error codes: an empty user or an iteration count
outside 4096-16384 is UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM,
a user named twice DUPLICATE_RESOURCE, deleting or describing a credential that does not exist
RESOURCE_NOT_FOUND. The client sends the salted password; the stored and server keys are derived
here and only they are stored, as Kafka does."""

from __future__ import annotations

import hashlib
import hmac
from collections import Counter
from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramError,
    format_credential,
    parse_credential,
)
from services.common.zk.user_configs import list_users, read_user_config, update_user_config
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body

# ScramMechanism as the protocol numbers it
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_IDS = {name: i for i, name in MECHANISM_IDS.items()}


def _credential(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    digest = MECHANISMS[mechanism]
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return ScramCredential(
        salt,
        hashlib.new(digest, client_key).digest(),
        hmac.new(salted, b"Server Key", digest).digest(),
        iterations,
    )


def _result(user: str, code: ErrorCode, message: str | None = None) -> Body:
    return {"user": user, "error_code": int(code), "error_message": message}


async def handle_describe(ctx: RequestContext, req: Body) -> Body:
    zk = ctx.services.zk
    if zk is None:
        return describe_error(req, ctx.api_version, ErrorCode.UNKNOWN_SERVER_ERROR)
    asked = req.get("users")
    names = [u["name"] for u in asked] if asked else await list_users(zk)
    counts = Counter(names)
    results: list[Body] = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results.append(
                _result(
                    name,
                    ErrorCode.DUPLICATE_RESOURCE,
                    f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                )
                | {"credential_infos": []}
            )
            continue
        config, _ = await read_user_config(zk, name)
        infos = []
        for mech, mid in _IDS.items():
            if mech in config:
                try:
                    infos.append(
                        {"mechanism": mid, "iterations": parse_credential(config[mech]).iterations}
                    )
                except ScramError:
                    continue
        if not infos:
            if asked:
                results.append(
                    _result(
                        name,
                        ErrorCode.RESOURCE_NOT_FOUND,
                        f"Attempt to describe a user credential that does not exist: {name}",
                    )
                    | {"credential_infos": []}
                )
            continue
        results.append(_result(name, ErrorCode.NONE) | {"credential_infos": infos})
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "results": results}


def describe_error(req: Body, version: int, code: ErrorCode) -> Body:
    return {"throttle_time": 0, "error_code": int(code), "error_message": None, "results": []}


def _check(item: Body, upsert: bool) -> tuple[ErrorCode, str] | None:
    name = item.get("name") or ""
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if item.get("mechanism") not in MECHANISM_IDS:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if upsert:
        iterations = int(item.get("iterations") or 0)
        if iterations < MIN_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        if iterations > MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        if not item.get("salt") or not item.get("salted_password"):
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


async def handle_alter(ctx: RequestContext, req: Body) -> Body:
    zk = ctx.services.zk
    deletions = req.get("deletions") or []
    upsertions = req.get("upsertions") or []
    if zk is None:
        return alter_error(req, ctx.api_version, ErrorCode.UNKNOWN_SERVER_ERROR)
    per_user: dict[str, list[tuple[bool, Body]]] = {}
    for item in deletions:
        per_user.setdefault(item.get("name") or "", []).append((False, item))
    for item in upsertions:
        per_user.setdefault(item.get("name") or "", []).append((True, item))
    results: list[Body] = []
    for user, items in per_user.items():
        mechs = [i.get("mechanism") for _, i in items]
        if len(set(mechs)) != len(mechs):
            results.append(
                _result(
                    user,
                    ErrorCode.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                )
            )
            continue
        bad = next((e for up, i in items if (e := _check(i, up)) is not None), None)
        if bad is not None:
            results.append(_result(user, *bad))
            continue
        missing: list[str] = []

        def change(
            config: dict[str, str], items: Any = items, missing: list[str] = missing
        ) -> dict[str, str]:
            missing.clear()
            for upsert, item in items:
                mech = MECHANISM_IDS[item["mechanism"]]
                if upsert:
                    cred = _credential(
                        mech,
                        bytes(item["salt"]),
                        bytes(item["salted_password"]),
                        int(item["iterations"]),
                    )
                    config[mech] = format_credential(cred)
                elif config.pop(mech, None) is None:
                    missing.append(mech)
            if missing:
                raise LookupError(missing[0])
            return config

        try:
            await update_user_config(zk, user, change)
        except LookupError:
            results.append(
                _result(
                    user,
                    ErrorCode.RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist",
                )
            )
            continue
        results.append(_result(user, ErrorCode.NONE))
    return {"throttle_time": 0, "results": results}


def alter_error(req: Body, version: int, code: ErrorCode) -> Body:
    users = dict.fromkeys(
        (i.get("name") or "")
        for i in [*(req.get("deletions") or []), *(req.get("upsertions") or [])]
    )
    return {"throttle_time": 0, "results": [_result(u, code) for u in users]}


DESCRIBE_HANDLER = ApiHandler(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    "DescribeUserScramCredentials",
    handle_describe,
    describe_error,
)
ALTER_HANDLER = ApiHandler(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials", handle_alter, alter_error
)
