"""FindCoordinator (v0-4; v4 batches keys, one answer per key).

Groups (key type 0): the coordinator of a group is the group coordinator process that owns the
group's ``__consumer_offsets`` partition, but clients are always pointed at a GATEWAY - the one
that zone-aware routing makes "leader" of that partition for this client - which forwards the
group requests. As in Kafka, the first lookup creates ``__consumer_offsets`` (through the
controller) and is answered COORDINATOR_NOT_AVAILABLE until its shard is placed on a registered
coordinator; clients retry. Unlike Kafka, such a lookup first waits, at most
``kafkapy.coordinator.lookup.wait.ms``, for the coordinator to become available
(``_await_coordinators``). Any string is a group key, the empty one included (Kafka hashes it
like any other: partition 0).

Transactions (key type 1): the same with ``__transaction_state`` and the transaction
coordinators; an empty transactional id is INVALID_REQUEST. Other key types: INVALID_REQUEST
for every key.

Error messages as Kafka's: v0-3 carry the error's default message; v4 answers a lookup failure
without one, and a request it rejects (an unknown key type) with the default message per key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from services.common.coordinator.clients import CoordinatorClients
from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey, message_spec
from services.common.zk.layout import GROUP, TRANSACTION, CoordinatorKind, Endpoint
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.controller_client import ControllerError
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.handlers.metadata import live_gateways
from services.gateway.routing import candidates, client_zone, leader_for, topic_hash

log = get_logger("gateway.find_coordinator")

GROUP_KEY, TRANSACTION_KEY = 0, 1
BATCHED_VERSION = 4

# Kafka's default messages (Errors.message()) of the codes this handler answers.
MESSAGES = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.INVALID_REQUEST: (
        "This most likely occurs because of a request being malformed by the client library or "
        "the message was sent to an incompatible broker. See the broker logs for more details."
    ),
    ErrorCode.UNKNOWN_SERVER_ERROR: (
        "The server experienced an unexpected error when processing the request."
    ),
    ErrorCode.UNSUPPORTED_VERSION: "The version of API is not supported.",
}

Lookup = tuple[ErrorCode, Endpoint | None, str | None]  # (error, coordinator, error message)


def _entry(key: str, code: ErrorCode, node: Endpoint | None, message: str | None) -> Body:
    """One coordinator answer (Kafka's Node.noNode() = -1, "", -1 when there is none)."""
    return {
        "key": key,
        "node_id": node.node_id if node is not None else -1,
        "host": node.host if node is not None else "",
        "port": node.port if node is not None else -1,
        "error_code": int(code),
        "error_message": message,
    }


def _default_message(code: ErrorCode) -> str | None:
    if code == ErrorCode.NONE:
        return None
    return MESSAGES.get(code, code.name)


def _create_internal_topic(s: GatewayServices, topic: str) -> None:
    """Ask the controller for ``__consumer_offsets`` / ``__transaction_state`` in the
    background, at most one call in flight per topic and gateway (failures are logged; the next
    lookup asks again)."""
    offsets = topic == GROUP.topic
    running = s.offsets_topic_creation if offsets else s.txn_topic_creation
    if running is not None and not running.done():
        return

    async def create() -> None:
        deadline = asyncio.get_running_loop().time() + s.request_timeout_s
        try:
            resp = await s.controller.create_internal_topic(topic, deadline)
        except (TimeoutError, ControllerError) as exc:
            log.warning("internal_topic_creation_failed", topic=topic, error=repr(exc))
            return
        if resp.error_code:
            log.warning(
                "internal_topic_not_created",
                topic=topic,
                error_code=resp.error_code,
                message=resp.error_message,
            )
        else:
            log.info("internal_topic_requested", topic=topic)

    task = s.spawn(create(), f"create {topic}")
    if offsets:
        s.offsets_topic_creation = task
    else:
        s.txn_topic_creation = task


def find_coordinator(ctx: RequestContext, key: str, kind: CoordinatorKind = GROUP) -> Lookup:
    """The gateway that serves ``key``'s group / transactional id for this client, or why
    there is none."""
    s = ctx.services
    if s.cache.topic(kind.topic) is None:
        _create_internal_topic(s, kind.topic)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, None
    clients: CoordinatorClients | None = s.coordinators if kind == GROUP else s.txn_coordinators
    if clients is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, None
    route = clients.route(key)
    if route.error != ErrorCode.NONE:
        return route.error, None, None
    gateways = live_gateways(s, ctx.listener)
    ids = candidates(gateways, client_zone(ctx.client_id, s.endpoint.rack))
    chosen = leader_for(topic_hash(kind.topic), route.partition, ids)
    return ErrorCode.NONE, gateways[chosen], None


async def handle(ctx: RequestContext, req: Body) -> Body:
    key_type = int(req.get("key_type") or GROUP_KEY)
    if key_type not in (GROUP_KEY, TRANSACTION_KEY):
        return error_response(req, ctx.api_version, ErrorCode.INVALID_REQUEST)

    def lookup(key: str) -> Lookup:
        if key_type == GROUP_KEY:
            return find_coordinator(ctx, key)
        if not key:
            return ErrorCode.INVALID_REQUEST, None, None
        return find_coordinator(ctx, key, TRANSACTION)

    keys = list(req.get("coordinator_keys") or []) if ctx.api_version >= BATCHED_VERSION else []
    if ctx.api_version < BATCHED_VERSION:
        keys = [req.get("key") or ""]
    lookups = [lookup(k) for k in keys]
    if any(code == ErrorCode.COORDINATOR_NOT_AVAILABLE for code, _, _ in lookups):
        lookups = await _await_coordinators(ctx, keys, lookup)
    if ctx.api_version >= BATCHED_VERSION:
        entries = [_entry(k, c, n, m) for k, (c, n, m) in zip(keys, lookups, strict=True)]
        return {"throttle_time": 0, "coordinators": entries}
    code, node, message = lookups[0]
    return _single(ctx.api_version, _entry("", code, node, message or _default_message(code)))


async def _await_coordinators(
    ctx: RequestContext, keys: list[str], lookup: Callable[[str], Lookup]
) -> list[Lookup]:
    """The lookups of ``keys`` once none is COORDINATOR_NOT_AVAILABLE any more, or as they are
    after ``kafkapy.coordinator.lookup.wait.ms`` (D84).

    On a fresh cluster the first lookups wait for ``__consumer_offsets`` to be created and its
    shards placed, which takes longer here (controller, then coordinators, then the gateway's
    metadata) than librdkafka's coordinator lookup retries last (~0.3 s: FindCoordinator
    retried twice after 100 ms). After those, librdkafka parks an admin request's coordinator
    lookup until some broker connection changes state, so AlterConsumerGroupOffsets & co. sat
    until their timeout without their request ever being sent (issue 19). Waiting here, within
    a bound well below any client's request timeout, answers them with the coordinator."""
    wait_s = min(ctx.services.coordinator_wait_s, ctx.services.request_timeout_s)

    def available() -> bool:
        return all(lookup(k)[0] != ErrorCode.COORDINATOR_NOT_AVAILABLE for k in keys)

    if wait_s > 0:
        await ctx.services.cache.wait_for(available, wait_s)
    return [lookup(k) for k in keys]


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    """``code`` for the whole request (every key on v4), with Kafka's default message."""
    message = _default_message(code)
    if version >= BATCHED_VERSION:
        keys = req.get("coordinator_keys") or []
        return {"throttle_time": 0, "coordinators": [_entry(k, code, None, message) for k in keys]}
    return _single(version, _entry("", code, None, message))


def _single(version: int, entry: Body) -> Body:
    """A v0-3 response: ``entry``'s fields that ``version`` has (v0: no throttle, no message)."""
    names = message_spec(ApiKey.FIND_COORDINATOR, version, "response").field_names
    return {k: v for k, v in {"throttle_time": 0, **entry}.items() if k in names}


HANDLER = ApiHandler(ApiKey.FIND_COORDINATOR, "FindCoordinator", handle, error_response)
