"""The shape of a request handler and helpers shared by several handlers."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from services.common.errors import ErrorCode
from services.gateway.context import RequestContext

Body = dict[str, Any]
HandleFn = Callable[[RequestContext, Body], Awaitable[Body | None]]
ErrorFn = Callable[[Body, int, ErrorCode], Body]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    """``handle`` answers a decoded request (None = no response, only acks=0 Produce);
    ``error_response`` builds the response that reports ``code`` for everything in a request
    (used when the handler fails, or for an unsupported version)."""

    api_key: int
    name: str  # Kafka's request name, the ``request`` label of the request metrics
    handle: HandleFn
    error_response: ErrorFn


# Kafka's Topic.validate: legal characters, at most 249 characters, not "." or "..".
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def topic_name_error(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name, or None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > 249:
        return f"Topic name is illegal, it can't be longer than 249 characters, topic name: {name}"
    if not _LEGAL_TOPIC.match(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def error_message(code: ErrorCode, message: str | None = None) -> str | None:
    """Kafka puts the exception message in error_message fields; None for NONE."""
    if code == ErrorCode.NONE:
        return None
    return message or None


def as_error_code(value: int) -> ErrorCode:
    """An error code from an internal RPC (unknown values -> UNKNOWN_SERVER_ERROR)."""
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


# Authorized-operation bitfields (bit n = AclOperation n) while no authorizer is configured:
# Kafka then reports every operation the resource type supports.
_READ, _WRITE, _CREATE, _DELETE, _ALTER, _DESCRIBE = 3, 4, 5, 6, 7, 8
_CLUSTER_ACTION, _DESCRIBE_CONFIGS, _ALTER_CONFIGS, _IDEMPOTENT_WRITE = 9, 10, 11, 12
TOPIC_OPERATIONS = sum(
    1 << op
    for op in (
        _READ,
        _WRITE,
        _CREATE,
        _DELETE,
        _ALTER,
        _DESCRIBE,
        _DESCRIBE_CONFIGS,
        _ALTER_CONFIGS,
    )
)
CLUSTER_OPERATIONS = sum(
    1 << op
    for op in (
        _CREATE,
        _ALTER,
        _DESCRIBE,
        _CLUSTER_ACTION,
        _DESCRIBE_CONFIGS,
        _ALTER_CONFIGS,
        _IDEMPOTENT_WRITE,
    )
)
OPERATIONS_NOT_REQUESTED = -2147483648
