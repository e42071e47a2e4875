"""FindCoordinator (v0-4; v4 batches keys, one answer per key).

Groups (key type 0): the coordinator of a group is the group coordinator process that owns the
group's ``__consumer_offsets`` partition, but clients are always pointed at a GATEWAY - the one
that zone-aware routing makes "leader" of that partition for this client - which forwards the
group requests. As in Kafka, the first lookup creates ``__consumer_offsets`` (through the
controller) and is answered COORDINATOR_NOT_AVAILABLE until its shard is placed on a registered
coordinator; clients retry. Any string is a group key, the empty one included (Kafka hashes it
like any other: partition 0). Other key types: INVALID_REQUEST for every key.

Transactions (key type 1): there is no transaction coordinator yet, and a retriable answer
(COORDINATOR_NOT_AVAILABLE) made ``init_transactions()`` wait out its whole timeout. The lookup
is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED with ``TRANSACTIONS_UNSUPPORTED`` as its
message: the one non-retriable code on which librdkafka gives up at this step (it retries every
other one), and the answer a Kafka cluster gives a client that may not use transactional ids;
librdkafka, the Java client, kafka-python and aiokafka all fail at once and show the message
(docs/compatibility.md compares the candidates).

Error messages as Kafka's: v0-3 carry the error's default message; v4 answers a lookup failure
without one, and a request it rejects (an unknown key type) with the default message per key.
"""

from __future__ import annotations

import asyncio

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey, message_spec
from services.common.zk.layout import CONSUMER_OFFSETS_TOPIC, Endpoint
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.controller_client import ControllerError
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.handlers.metadata import live_gateways
from services.gateway.routing import candidates, client_zone, leader_for, topic_hash

log = get_logger("gateway.find_coordinator")

GROUP, TRANSACTION = 0, 1
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

# Why a transactional id is refused (FindCoordinator key type 1, InitProducerId).
TRANSACTIONS_UNSUPPORTED = (
    "Transactions are not supported by this kafka-py cluster yet (there is no transaction "
    "coordinator): use an idempotent producer without transactional.id"
)
TRANSACTIONS_REFUSED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

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


def _create_offsets_topic(s: GatewayServices) -> None:
    """Ask the controller for __consumer_offsets in the background, at most one call in flight
    per gateway (failures are logged; the next lookup asks again)."""
    if s.offsets_topic_creation is not None and not s.offsets_topic_creation.done():
        return

    async def create() -> None:
        deadline = asyncio.get_running_loop().time() + s.request_timeout_s
        try:
            resp = await s.controller.create_internal_topic(CONSUMER_OFFSETS_TOPIC, deadline)
        except (TimeoutError, ControllerError) as exc:
            log.warning("offsets_topic_creation_failed", error=repr(exc))
            return
        if resp.error_code:
            log.warning(
                "offsets_topic_not_created",
                error_code=resp.error_code,
                message=resp.error_message,
            )
        else:
            log.info("offsets_topic_requested", topic=CONSUMER_OFFSETS_TOPIC)

    s.offsets_topic_creation = s.spawn(create(), "create __consumer_offsets")


def find_group_coordinator(ctx: RequestContext, key: str) -> Lookup:
    """The gateway that serves ``key``'s group for this client, or why there is none."""
    s = ctx.services
    if s.cache.topic(CONSUMER_OFFSETS_TOPIC) is None:
        _create_offsets_topic(s)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, None
    if s.coordinators is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, None
    route = s.coordinators.route(key)
    if route.error != ErrorCode.NONE:
        return route.error, None, None
    gateways = live_gateways(s, ctx.listener)
    ids = candidates(gateways, client_zone(ctx.client_id, s.endpoint.rack))
    chosen = leader_for(topic_hash(CONSUMER_OFFSETS_TOPIC), route.partition, ids)
    return ErrorCode.NONE, gateways[chosen], None


async def handle(ctx: RequestContext, req: Body) -> Body:
    key_type = int(req.get("key_type") or GROUP)
    if key_type not in (GROUP, TRANSACTION):
        return error_response(req, ctx.api_version, ErrorCode.INVALID_REQUEST)

    def lookup(key: str) -> Lookup:
        if key_type == GROUP:
            return find_group_coordinator(ctx, key)
        return TRANSACTIONS_REFUSED, None, TRANSACTIONS_UNSUPPORTED

    if ctx.api_version >= BATCHED_VERSION:
        entries = []
        for key in req.get("coordinator_keys") or []:
            code, node, message = lookup(key)
            entries.append(_entry(key, code, node, message))
        return {"throttle_time": 0, "coordinators": entries}
    code, node, message = lookup(req.get("key") or "")
    return _single(ctx.api_version, _entry("", code, node, message or _default_message(code)))


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
