"""Where client quotas meet a request: what is recorded, and what the client is told.

A Produce is recorded when it is read (its size is known then), and when it is throttled the
connection is muted at once, before any request pipelined behind it is read: Kafka reads one
request per connection at a time, so the next one is read only after the throttle; a gateway
that handles pipelined requests concurrently must stop reading at the throttled one to
enforce the same rate. Before a Fetch is handled its ``max_bytes`` is capped at what the
consumer quota allows in one window (Kafka's getMaxValueInQuotaWindow), so one response
cannot exceed the quota by itself. After the handler: Fetch records the response's record
bytes (when throttled, the bytes are un-recorded and the response is sent without records, as
Kafka does), every non-exempt request its handling time against ``request_percentage``. The
largest throttle time goes into the response's ``throttle_time`` and the connection is muted
for it (KIP-219); requests of versions older than KIP-219's also have their response held back
for that time (:func:`delays_response`), as Kafka answers clients that do not throttle
themselves. CreateTopics, CreatePartitions and DeleteTopics meter their mutations in their
handlers (:func:`mutation_quota`, mutation_quota.py); the throttle time they put in the response
mutes the connection the same way.
"""

from __future__ import annotations

from typing import Any

from services.common.protocol import ApiKey
from services.gateway.context import RequestContext
from services.gateway.mutation_quota import UNBOUNDED, MutationQuota
from services.gateway.quota_manager import FETCH, PRODUCE, REQUEST, principal_name

# first version whose clients throttle themselves on throttle_time_ms (KIP-219)
_KIP219_VERSIONS: dict[int, int] = {
    ApiKey.PRODUCE: 6,
    ApiKey.FETCH: 8,
    ApiKey.CREATE_TOPICS: 3,
    ApiKey.DELETE_TOPICS: 2,
    ApiKey.CREATE_PARTITIONS: 1,
}
# first version whose controller mutation quota is strict (KIP-599: THROTTLING_QUOTA_EXCEEDED)
_STRICT_MUTATION_VERSIONS: dict[int, int] = {
    ApiKey.CREATE_TOPICS: 6,
    ApiKey.CREATE_PARTITIONS: 3,
    ApiKey.DELETE_TOPICS: 5,
}
# not counted against request_percentage (authentication and inter-broker calls)
_EXEMPT = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.WRITE_TXN_MARKERS,
    }
)


def before(ctx: RequestContext, body: dict[str, Any]) -> None:
    manager = getattr(ctx.services, "quotas", None)  # None: no quota manager (tests)
    if manager is None or ctx.api_key != ApiKey.FETCH:
        return
    cap = manager.max_value_in_window(FETCH, principal_name(ctx.session), ctx.client_id or "")
    if cap is not None:
        body["max_bytes"] = max(1, min(int(body.get("max_bytes", 0x7FFFFFFF)), int(cap)))


def mutation_quota(ctx: RequestContext, validate_only: bool = False) -> MutationQuota:
    """The controller mutation quota this request spends (validate_only spends nothing)."""
    manager = getattr(ctx.services, "quotas", None)  # None: no quota manager (tests)
    strict_since = _STRICT_MUTATION_VERSIONS.get(ctx.api_key)
    if manager is None or validate_only or strict_since is None:
        return UNBOUNDED
    return manager.mutation_quota(
        principal_name(ctx.session), ctx.client_id or "", strict=ctx.api_version >= strict_since
    )


def _fetch_bytes(resp: dict[str, Any]) -> int:
    return sum(
        len(p.get("records") or b"")
        for t in resp.get("responses") or ()
        for p in t.get("partitions") or ()
    )


def on_arrival(ctx: RequestContext, request_bytes: int) -> int:
    """Record a Produce as it is read; its throttle time in ms (0: none)."""
    manager = getattr(ctx.services, "quotas", None)  # None: no quota manager (tests)
    if manager is None or ctx.api_key != ApiKey.PRODUCE:
        return 0
    return manager.record(PRODUCE, principal_name(ctx.session), ctx.client_id or "", request_bytes)


def after(
    ctx: RequestContext,
    resp: dict[str, Any] | None,
    handled_s: float,
    throttle: int = 0,
) -> int:
    """Record the request's other usage; set and return the throttle time in ms (0: none),
    at least ``throttle`` (what :func:`on_arrival` found)."""
    manager = getattr(ctx.services, "quotas", None)  # None: no quota manager (tests)
    if manager is None:
        return 0
    user, client = principal_name(ctx.session), ctx.client_id or ""
    if ctx.api_key == ApiKey.FETCH and resp is not None and not resp.get("error_code"):
        size = _fetch_bytes(resp)
        throttle = manager.record(FETCH, user, client, size)
        if throttle > 0:
            manager.unrecord(FETCH, user, client, size)
            resp["responses"] = []
    if ctx.api_key in _STRICT_MUTATION_VERSIONS and resp is not None:
        throttle = max(throttle, int(resp.get("throttle_time") or 0))  # the mutation quota's
    if ctx.api_key not in _EXEMPT:
        throttle = max(throttle, manager.record(REQUEST, user, client, handled_s * 100.0))
    if throttle > 0 and resp is not None and "throttle_time" in resp:
        resp["throttle_time"] = max(int(resp["throttle_time"] or 0), throttle)
    return throttle


def delays_response(api_key: int, api_version: int) -> bool:
    """Whether Kafka holds this response back for the throttle time instead of muting
    (clients older than KIP-219 do not throttle themselves)."""
    first = _KIP219_VERSIONS.get(api_key)
    return first is not None and api_version < first
