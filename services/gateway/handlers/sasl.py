"""SaslHandshake (v0-1) and SaslAuthenticate (v0-2): the connection's Session does the work
(sasl.py). A failed authentication answers SASL_AUTHENTICATION_FAILED with Kafka's message and
the connection is closed after ``connection.failed.authentication.delay.ms``; the log line names
the client address and user, never a secret."""

from __future__ import annotations

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey
from services.gateway import metrics
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.sasl import SaslFailure

log = get_logger("gateway.sasl")


async def handle_handshake(ctx: RequestContext, req: Body) -> Body:
    session = ctx.session
    mechanism = str(req.get("mechanism") or "")
    enabled = list(session.sasl.mechanisms) if session and session.sasl else []
    if session is None:
        return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "mechanisms": enabled}
    code = session.handshake(mechanism, ctx.api_version)
    if code != ErrorCode.NONE:
        log.info("sasl_handshake_refused", peer=ctx.peer, mechanism=mechanism, error=code.name)
        if code == ErrorCode.ILLEGAL_SASL_STATE or not session.authenticated:
            session.failed = True  # Kafka closes the connection after a failed handshake
    return {"error_code": int(code), "mechanisms": enabled}


def handshake_error(req: Body, version: int, code: ErrorCode) -> Body:
    return {"error_code": int(code), "mechanisms": []}


async def handle_authenticate(ctx: RequestContext, req: Body) -> Body:
    session = ctx.session
    if session is None:
        return authenticate_error(req, ctx.api_version, ErrorCode.ILLEGAL_SASL_STATE)
    mechanism = session.mechanism
    try:
        token, lifetime, done = await session.authenticate(
            bytes(req.get("auth_bytes") or b""), ctx.services.zk
        )
    except SaslFailure as exc:
        session.failed = True
        metrics.SASL_FAILURES.labels(session.listener.name, mechanism or "none").inc()
        log.warning(
            "sasl_authentication_failed",
            peer=ctx.peer,
            listener=session.listener.name,
            mechanism=mechanism,
            user=session.user,
            error=exc.message,
        )
        return {
            "error_code": int(exc.code),
            "error_message": exc.message,
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
    if done:
        metrics.SASL_SUCCESSES.labels(session.listener.name, mechanism or "none").inc()
        log.info(
            "sasl_authenticated",
            peer=ctx.peer,
            listener=session.listener.name,
            mechanism=mechanism,
            principal=session.principal,
        )
    return {
        "error_code": 0,
        "error_message": None,
        "auth_bytes": token,
        "session_lifetime": lifetime,
    }


def authenticate_error(req: Body, version: int, code: ErrorCode) -> Body:
    return {
        "error_code": int(code),
        "error_message": None,
        "auth_bytes": b"",
        "session_lifetime": 0,
    }


HANDSHAKE_HANDLER = ApiHandler(
    ApiKey.SASL_HANDSHAKE, "SaslHandshake", handle_handshake, handshake_error
)
AUTHENTICATE_HANDLER = ApiHandler(
    ApiKey.SASL_AUTHENTICATE, "SaslAuthenticate", handle_authenticate, authenticate_error
)
