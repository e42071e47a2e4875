"""Which ACL each API needs, as Kafka's KafkaApis asks its authorizer: one table, applied
before a request reaches its handler.

A rule has three kinds of steps, applied in order:

- ``Check``: one resource named by the request (its group, transactional id, the cluster);
  denied -> the handler's ``error_response`` for the whole request with the resource type's
  error code (TOPIC/GROUP/CLUSTER/TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
- ``EntryFilter``: per entry of a request list (topics, groups, config resources): denied
  entries are taken out of the request, the handler answers the rest, and the denied ones are
  answered with their error code (built by the handler's own ``error_response``) - so nothing is
  forwarded for them, as Kafka filters unauthorized partitions before doing anything.
- ``ResponseFilter``: lists answered by the handler from which entries the principal may not
  see are removed (Metadata of all topics, ListGroups, ListTransactions, OffsetFetch of all).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.common.acl import CLUSTER_NAME, Operation, ResourceType
from services.common.errors import ErrorCode
from services.common.metadata_cache import INTERNAL_TOPICS
from services.common.protocol import ApiKey
from services.gateway import metrics
from services.gateway.authorizer import Authorizer, peer_host
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.sasl import ANONYMOUS

R = ResourceType
O = Operation  # noqa: E741 - short names keep the table readable
Named = tuple[ResourceType, str] | None  # None: nothing to check for this request/entry
CLUSTER: Named = (R.CLUSTER, CLUSTER_NAME)

DENIED: dict[ResourceType, ErrorCode] = {
    R.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    R.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    R.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    R.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


@dataclass(frozen=True, slots=True)
class Check:
    op: Operation
    resource: Callable[[Body], Named]


@dataclass(frozen=True, slots=True)
class EntryFilter:
    op: Operation
    request_field: str
    response_field: str
    resource: Callable[[RequestContext, Body, Any], Named]
    or_cluster: bool = False  # allowed too when ``op`` is allowed on the cluster (CreateTopics)
    applies: Callable[[RequestContext, Body, Any], bool] | None = None  # None: every entry
    # response entries of denied request entries (None: from the handler's error_response)
    denied: Callable[[list[Any], ErrorCode], list[Body]] | None = None


@dataclass(frozen=True, slots=True)
class ResponseFilter:
    op: Operation
    rtype: ResourceType
    field: str
    name_field: str
    when_request_empty: str | None = None  # only when this request list is null/empty
    unless_cluster: bool = False  # no filtering when ``op`` is allowed on the cluster


@dataclass(frozen=True, slots=True)
class Rule:
    checks: tuple[Check, ...] = ()
    entries: tuple[EntryFilter, ...] = ()
    responses: tuple[ResponseFilter, ...] = ()
    # all entries denied: still ask the handler (with the emptied list) instead of answering
    # from error_response (Metadata: the brokers and cluster id are still due)
    call_when_all_denied: bool = False


# ---- resource names out of requests ---------------------------------------------------------
def _field(rtype: ResourceType, name: str) -> Callable[[Body], Named]:
    def get(body: Body) -> Named:
        value = body.get(name)
        return (rtype, value) if value else None

    return get


def _cluster(_: Body) -> Named:
    return CLUSTER


def _topic(name_field: str) -> Callable[[RequestContext, Body, Any], Named]:
    """A topic entry's name; entries naming their topic by id only are resolved by the cache
    (unknown ids are left to the handler, which answers UNKNOWN_TOPIC_ID)."""

    def get(ctx: RequestContext, _body: Body, entry: Any) -> Named:
        if isinstance(entry, str):
            return (R.TOPIC, entry)
        name = entry.get(name_field)
        if not name and isinstance(tid := entry.get("topic_id"), uuid.UUID):
            info = ctx.services.cache.topic_by_id(tid)
            name = info.name if info is not None else None
        return (R.TOPIC, name) if name else None

    return get


def _group(ctx: RequestContext, _body: Body, entry: Any) -> Named:
    return (R.GROUP, entry if isinstance(entry, str) else entry["group_id"])


def _txn_id(ctx: RequestContext, _body: Body, entry: Any) -> Named:
    return (R.TRANSACTIONAL_ID, entry)


def _coordinator_key(ctx: RequestContext, body: Body, entry: Any) -> Named:
    return (R.TRANSACTIONAL_ID if body.get("key_type") == 1 else R.GROUP, entry)


def _coordinator_key_v0(body: Body) -> Named:
    if "coordinator_keys" in body and body.get("key") is None:
        return None
    return _coordinator_key(None, body, body.get("key") or "")  # type: ignore[arg-type]


def _config_resource(ctx: RequestContext, _body: Body, entry: Any) -> Named:
    # ConfigResource types: 2 TOPIC, 4 BROKER, 8 BROKER_LOGGER (the last two: the cluster)
    if entry["resource_type"] == 2:
        return (R.TOPIC, entry["resource_name"])
    return CLUSTER


def _needs_creation(ctx: RequestContext, body: Body, entry: Any) -> bool:
    """A Metadata topic that does not exist and that this request would auto-create."""
    s = ctx.services
    name = entry.get("name")
    return bool(
        name
        and s.settings.auto_create_topics_enable
        and (ctx.api_version < 4 or body.get("allow_auto_topic_creation", True))
        and name not in INTERNAL_TOPICS
        and s.cache.topic(name) is None
    )


def _offset_fetch_topics(topics: list[Any], code: ErrorCode) -> list[Body]:
    """OffsetFetch topic entries refused with ``code`` (v2+ error_response has no partitions)."""
    return [
        {
            "name": t["name"],
            "partitions": [
                {
                    "partition_index": p,
                    "committed_offset": -1,
                    "committed_leader_epoch": -1,
                    "metadata": "",
                    "error_code": int(code),
                }
                for p in t.get("partition_indexes") or []
            ],
        }
        for t in topics
    ]


def _topics(op: Operation, req: str, resp: str, name: str = "name", **kw: Any) -> EntryFilter:
    return EntryFilter(op, req, resp, _topic(name), **kw)


_CLUSTER_ONLY = {
    ApiKey.CREATE_ACLS: O.ALTER,
    ApiKey.DELETE_ACLS: O.ALTER,
    ApiKey.DESCRIBE_ACLS: O.DESCRIBE,
    ApiKey.DESCRIBE_LOG_DIRS: O.DESCRIBE,
    ApiKey.ELECT_LEADERS: O.ALTER,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: O.ALTER,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: O.DESCRIBE,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: O.DESCRIBE,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: O.ALTER,
    ApiKey.WRITE_TXN_MARKERS: O.CLUSTER_ACTION,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: O.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CLIENT_QUOTAS: O.ALTER_CONFIGS,
}
_GROUP_READ = Check(O.READ, _field(R.GROUP, "group_id"))
_TXN_WRITE = Check(O.WRITE, _field(R.TRANSACTIONAL_ID, "transactional_id"))

# API key -> what it needs. APIs absent here need nothing (ApiVersions, SASL, DescribeCluster:
# Kafka serves it to anyone); InitProducerId is special-cased in ``_init_producer_id``.
RULES: dict[int, Rule] = {
    **{key: Rule(checks=(Check(op, _cluster),)) for key, op in _CLUSTER_ONLY.items()},
    ApiKey.PRODUCE: Rule(
        checks=(_TXN_WRITE,), entries=(_topics(O.WRITE, "topic_data", "responses"),)
    ),
    ApiKey.FETCH: Rule(entries=(_topics(O.READ, "topics", "responses", "topic"),)),
    ApiKey.LIST_OFFSETS: Rule(entries=(_topics(O.DESCRIBE, "topics", "topics"),)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Rule(
        entries=(_topics(O.DESCRIBE, "topics", "topics", "topic"),)
    ),
    ApiKey.METADATA: Rule(
        entries=(
            _topics(O.DESCRIBE, "topics", "topics"),
            _topics(
                O.CREATE,
                "topics",
                "topics",
                or_cluster=True,
                applies=_needs_creation,
            ),  # refused: TOPIC_AUTHORIZATION_FAILED, as Kafka (not UNKNOWN_TOPIC_OR_PARTITION)
        ),
        responses=(ResponseFilter(O.DESCRIBE, R.TOPIC, "topics", "name", "topics"),),
        call_when_all_denied=True,
    ),
    ApiKey.CREATE_TOPICS: Rule(entries=(_topics(O.CREATE, "topics", "topics", or_cluster=True),)),
    ApiKey.DELETE_TOPICS: Rule(
        entries=(
            _topics(O.DELETE, "topic_names", "responses"),
            _topics(O.DELETE, "topics", "responses"),
        )
    ),
    ApiKey.DELETE_RECORDS: Rule(entries=(_topics(O.DELETE, "topics", "topics"),)),
    ApiKey.CREATE_PARTITIONS: Rule(entries=(_topics(O.ALTER, "topics", "results"),)),
    ApiKey.DESCRIBE_CONFIGS: Rule(
        entries=(EntryFilter(O.DESCRIBE_CONFIGS, "resources", "results", _config_resource),)
    ),
    ApiKey.ALTER_CONFIGS: Rule(
        entries=(EntryFilter(O.ALTER_CONFIGS, "resources", "responses", _config_resource),)
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Rule(
        entries=(EntryFilter(O.ALTER_CONFIGS, "resources", "responses", _config_resource),)
    ),
    ApiKey.FIND_COORDINATOR: Rule(
        checks=(Check(O.DESCRIBE, _coordinator_key_v0),),
        entries=(EntryFilter(O.DESCRIBE, "coordinator_keys", "coordinators", _coordinator_key),),
    ),
    ApiKey.JOIN_GROUP: Rule(checks=(_GROUP_READ,)),
    ApiKey.SYNC_GROUP: Rule(checks=(_GROUP_READ,)),
    ApiKey.HEARTBEAT: Rule(checks=(_GROUP_READ,)),
    ApiKey.LEAVE_GROUP: Rule(checks=(_GROUP_READ,)),
    ApiKey.OFFSET_COMMIT: Rule(
        checks=(_GROUP_READ,), entries=(_topics(O.READ, "topics", "topics"),)
    ),
    ApiKey.OFFSET_FETCH: Rule(
        checks=(Check(O.DESCRIBE, _field(R.GROUP, "group_id")),),
        entries=(
            _topics(O.DESCRIBE, "topics", "topics", denied=_offset_fetch_topics),
            EntryFilter(O.DESCRIBE, "groups", "groups", _group),
        ),
        responses=(ResponseFilter(O.DESCRIBE, R.TOPIC, "topics", "name", "topics"),),
    ),
    ApiKey.OFFSET_DELETE: Rule(
        checks=(Check(O.DELETE, _field(R.GROUP, "group_id")),),
        entries=(_topics(O.READ, "topics", "topics"),),
    ),
    ApiKey.DESCRIBE_GROUPS: Rule(entries=(EntryFilter(O.DESCRIBE, "groups", "groups", _group),)),
    ApiKey.DELETE_GROUPS: Rule(entries=(EntryFilter(O.DELETE, "groups_names", "results", _group),)),
    ApiKey.LIST_GROUPS: Rule(
        responses=(ResponseFilter(O.DESCRIBE, R.GROUP, "groups", "group_id", unless_cluster=True),)
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: Rule(
        checks=(Check(O.WRITE, _field(R.TRANSACTIONAL_ID, "v3_and_below_transactional_id")),),
        entries=(_topics(O.WRITE, "v3_and_below_topics", "results_by_topic_v3_and_below"),),
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: Rule(checks=(_TXN_WRITE, _GROUP_READ)),
    ApiKey.END_TXN: Rule(checks=(_TXN_WRITE,)),
    ApiKey.TXN_OFFSET_COMMIT: Rule(
        checks=(_TXN_WRITE, _GROUP_READ), entries=(_topics(O.READ, "topics", "topics"),)
    ),
    ApiKey.DESCRIBE_TRANSACTIONS: Rule(
        entries=(EntryFilter(O.DESCRIBE, "transactional_ids", "transaction_states", _txn_id),)
    ),
    ApiKey.LIST_TRANSACTIONS: Rule(
        responses=(
            ResponseFilter(
                O.DESCRIBE, R.TRANSACTIONAL_ID, "transaction_states", "transactional_id"
            ),
        )
    ),
    ApiKey.DESCRIBE_PRODUCERS: Rule(entries=(_topics(O.READ, "topics", "topics"),)),
}


_NOTHING = Rule()
# APIs without a rule, on purpose (Kafka checks nothing for them, or ``_init_producer_id`` does)
NO_RULE = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.INIT_PRODUCER_ID,
    }
)


# ---- applying a rule ------------------------------------------------------------------------
class _Who:
    """The principal and host of a request, bound to the authorizer."""

    __slots__ = ("authorizer", "principal", "host")

    def __init__(self, authorizer: Authorizer, ctx: RequestContext) -> None:
        self.authorizer = authorizer
        self.principal = ctx.session.principal if ctx.session is not None else ANONYMOUS
        self.host = peer_host(ctx.peer)

    def can(self, op: Operation, named: tuple[ResourceType, str]) -> bool:
        return self.authorizer.authorize(self.principal, self.host, op, named[0], named[1])


def _init_producer_id(who: _Who, body: Body) -> ErrorCode:
    """Transactional: WRITE on the transactional id. Idempotent: IDEMPOTENT_WRITE on the
    cluster, or (KIP-679, Kafka 3.0+) WRITE on any topic."""
    txn = body.get("transactional_id")
    if txn:
        ok = who.can(O.WRITE, (R.TRANSACTIONAL_ID, txn))
        return ErrorCode.NONE if ok else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if who.can(O.IDEMPOTENT_WRITE, (R.CLUSTER, CLUSTER_NAME)) or who.authorizer.authorize_any(
        who.principal, who.host, O.WRITE, R.TOPIC
    ):
        return ErrorCode.NONE
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def handle(handler: ApiHandler, ctx: RequestContext, body: Body) -> Body | None:
    """``handler.handle`` behind the authorizer (straight through when there is none)."""
    authorizer = getattr(ctx.services, "authorizer", None)  # unit tests run without services
    if authorizer is None:
        return await handler.handle(ctx, body)
    who = _Who(authorizer, ctx)
    version = ctx.api_version
    if ctx.api_key == ApiKey.INIT_PRODUCER_ID:
        code = _init_producer_id(who, body)
        if code != ErrorCode.NONE:
            metrics.AUTHORIZATION_DENIED.labels(handler.name).inc()
            return handler.error_response(body, version, code)
        return await handler.handle(ctx, body)
    rule = RULES.get(ctx.api_key, _NOTHING)
    for check in rule.checks:
        named = check.resource(body)
        if named is not None and not who.can(check.op, named):
            metrics.AUTHORIZATION_DENIED.labels(handler.name).inc()
            return handler.error_response(body, version, DENIED[named[0]])
    denied: list[tuple[EntryFilter, ErrorCode, list[Any]]] = []
    for flt in rule.entries:
        entries = body.get(flt.request_field)
        if not entries:
            continue
        kept, refused = _split(who, ctx, body, flt, entries)
        if refused:
            body = {**body, flt.request_field: kept}
            denied.extend((flt, code, items) for code, items in refused.items())
            metrics.AUTHORIZATION_DENIED.labels(handler.name).inc()
    after_groups = None
    if ctx.api_key == ApiKey.OFFSET_FETCH and body.get("groups"):
        body, after_groups = _offset_fetch_groups(who, body)
    all_denied = denied and not any(body.get(flt.request_field) for flt, _, _ in denied)
    if all_denied and not rule.call_when_all_denied:
        resp: Body | None = handler.error_response(
            {**body, denied[0][0].request_field: []}, version, ErrorCode.NONE
        )
    else:
        resp = await handler.handle(ctx, body)
    if resp is None:  # acks=0 Produce: no response to carry the error; Kafka closes
        if denied:
            ctx.close_connection("acks=0 produce failed: TOPIC_AUTHORIZATION_FAILED")
        return None
    for rf in rule.responses:
        _filter_response(who, body, rf, resp)
    _authorized_operations(who, ctx.api_key, body, resp)
    for flt, code, items in denied:
        if flt.denied is not None:
            answers = flt.denied(items, code)
        else:
            part = handler.error_response({**body, flt.request_field: items}, version, code)
            answers = list(part.get(flt.response_field) or [])
        resp[flt.response_field] = list(resp.get(flt.response_field) or []) + answers
    if after_groups is not None:
        after_groups(resp)
    if ctx.api_key == ApiKey.CREATE_TOPICS and version >= 5:
        _created_topic_configs(who, resp)
    return resp


def _created_topic_configs(who: _Who, resp: Body) -> None:
    """CreateTopics v5+ shows a topic's configs and layout only to a principal that may
    DESCRIBE_CONFIGS it; otherwise ``topic_config_error_code`` is TOPIC_AUTHORIZATION_FAILED
    and they are left out, as Kafka (topics that failed validation keep NONE there)."""
    shown = (ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    for t in resp.get("topics") or []:
        if t.get("error_code", 0) not in shown or who.can(O.DESCRIBE_CONFIGS, (R.TOPIC, t["name"])):
            continue
        t["topic_config_error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        t.update(configs=[], num_partitions=-1, replication_factor=-1)


def _split(
    who: _Who, ctx: RequestContext, body: Body, flt: EntryFilter, entries: list[Any]
) -> tuple[list[Any], dict[ErrorCode, list[Any]]]:
    kept: list[Any] = []
    refused: dict[ErrorCode, list[Any]] = defaultdict(list)
    for entry in entries:
        named = flt.resource(ctx, body, entry)
        if named is None or (flt.applies is not None and not flt.applies(ctx, body, entry)):
            kept.append(entry)
        elif who.can(flt.op, named) or (flt.or_cluster and who.can(flt.op, CLUSTER)):  # type: ignore[arg-type]
            kept.append(entry)
        else:
            refused[DENIED[named[0]]].append(entry)
    return kept, refused


def _filter_response(who: _Who, body: Body, rf: ResponseFilter, resp: Body) -> None:
    if rf.when_request_empty is not None and body.get(rf.when_request_empty):
        return
    if rf.field not in resp or (rf.unless_cluster and who.can(rf.op, CLUSTER)):  # type: ignore[arg-type]
        return
    resp[rf.field] = [e for e in resp[rf.field] if who.can(rf.op, (rf.rtype, e[rf.name_field]))]


# Operations each resource type supports (what authorized-operations bitfields are made of)
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    R.TOPIC: (O.READ, O.WRITE, O.CREATE, O.DELETE, O.ALTER, O.DESCRIBE, O.DESCRIBE_CONFIGS,
              O.ALTER_CONFIGS),
    R.GROUP: (O.READ, O.DESCRIBE, O.DELETE),
    R.CLUSTER: (O.CREATE, O.ALTER, O.DESCRIBE, O.CLUSTER_ACTION, O.DESCRIBE_CONFIGS,
                O.ALTER_CONFIGS, O.IDEMPOTENT_WRITE),
}  # fmt: skip


def _operations(who: _Who, rtype: ResourceType, name: str) -> int:
    """Kafka's authorized-operations bitfield (bit n = operation n) of one resource."""
    return sum(1 << op for op in SUPPORTED_OPERATIONS[rtype] if who.can(op, (rtype, name)))


def _authorized_operations(who: _Who, api_key: int, body: Body, resp: Body) -> None:
    """Fill the authorized-operations fields a request asked for with what the principal may do
    (without an authorizer the handlers report every supported operation, as Kafka)."""
    if api_key in (ApiKey.METADATA, ApiKey.DESCRIBE_CLUSTER):
        if body.get("include_cluster_authorized_operations"):
            resp["cluster_authorized_operations"] = _operations(who, R.CLUSTER, CLUSTER_NAME)
    if api_key == ApiKey.METADATA and body.get("include_topic_authorized_operations"):
        for t in resp.get("topics") or []:
            if t.get("name") and not t.get("error_code"):
                t["topic_authorized_operations"] = _operations(who, R.TOPIC, t["name"])
    if api_key == ApiKey.DESCRIBE_GROUPS and body.get("include_authorized_operations"):
        for g in resp.get("groups") or []:
            if not g.get("error_code"):
                g["authorized_operations"] = _operations(who, R.GROUP, g["group_id"])


def _offset_fetch_groups(who: _Who, body: Body) -> tuple[Body, Callable[[Body], None]]:
    """OffsetFetch v8+ (several groups): each group's topics without DESCRIBE are taken out and
    answered TOPIC_AUTHORIZATION_FAILED; a group asking for all its topics gets only those the
    principal may describe."""
    refused: dict[str, list[Any]] = {}
    everything: set[str] = set()
    groups = []
    for g in body["groups"]:
        topics = g.get("topics")
        if topics is None:
            everything.add(g["group_id"])
            groups.append(g)
            continue
        ok = [t for t in topics if who.can(O.DESCRIBE, (R.TOPIC, t["name"]))]
        if len(ok) < len(topics):
            refused[g["group_id"]] = [t for t in topics if t not in ok]
        groups.append({**g, "topics": ok})

    def after(resp: Body) -> None:
        code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        for g in resp.get("groups") or []:
            gid = g.get("group_id")
            if gid in everything:
                g["topics"] = [
                    t for t in g.get("topics") or [] if who.can(O.DESCRIBE, (R.TOPIC, t["name"]))
                ]
            elif gid in refused:
                g["topics"] = list(g.get("topics") or []) + _offset_fetch_topics(refused[gid], code)

    return {**body, "groups": groups}, after
