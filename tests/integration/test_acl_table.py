"""Every API the gateway advertises, as a principal without the ACL Kafka requires and then
with it: one table, one cluster (SASL_PLAINTEXT with SCRAM, the ACL authorizer on).

``alice`` (SCRAM-SHA-256, no ACLs at first) keeps one authenticated connection open for the
whole module. Phase 1 sends every row's request on it and checks the exact Kafka error code,
then that nothing changed (topics, partitions, records, offsets, groups, configs, quotas,
ACLs, SCRAM users, reassignments, transactions; read back by the super user ``admin``).
Phase 2 grants each row's ACL (some with ``kafka-py acls --add``, the rest with
confluent-kafka's AdminClient; LITERAL and PREFIXED) and waits for the same request on the
same connection to succeed, then checks its effect. Phase 3 adds DENY ACLs over those ALLOWs.
The rows are checked against the gateway's own API table: an advertised API without a row
fails the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourcePatternType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.admin import ResourceType as CfResourceType
from kafka import TopicPartition as KpTopicPartition
from kafka_support import ACL_GATEWAY_FLAGS, ADMIN_PASSWORD, RawClient, cli_ok, running_cluster

from services.cli.local_cluster import LocalCluster
from services.common.acl import CLUSTER_NAME, Operation, PatternType, ResourceType
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.records.record import Record, build_batch
from services.common.scram import salted_password
from services.gateway.handlers import advertised_versions

pytestmark = [pytest.mark.integration]

ADMIN_PW = ADMIN_PASSWORD
ALICE, ALICE_PW = "alice", "alice-secret"
TOPIC = "acl-t"  # 1 partition, 3 records: produce, fetch, offsets, configs, records
DOOMED = "acl-del"  # DeleteTopics
GROWN = "acl-parts"  # CreatePartitions
NEW = "acl-new"  # CreateTopics
AUTO = "acl-auto"  # Metadata auto-creation
GROUP, GONE_GROUP, JOIN_GROUP = "acl-g", "acl-g2", "acl-join"
TXN, CF_TXN = "acl-tx", "acl-tx-cf"
TXN_RULE = "WRITE on the transactional id and the topic"
OFFSET_COMMIT_RULE = "READ on the group and the topic"
# OffsetDelete (kafka-python) of acl-t, then DeleteGroups (confluent-kafka); the offset of
# acl-parts keeps the group (a group without offsets is gone)
CLIENT_GROUP = "acl-g3"
E = ErrorCode
R, O, P = ResourceType, Operation, PatternType  # noqa: E741 - short names for the table
NO_GRANT_WAIT_S = 10.0  # a grant must take effect on the open connection within this


# ---- the connections ----------------------------------------------------------------------
@dataclass
class Ctx:
    cluster: LocalCluster
    alice: RawClient  # opened before any ACL exists, never reconnected
    admin: RawClient  # the super user: reads state back
    cf_admin: AdminClient  # the super user's, for grants
    cf_alice: AdminClient  # alice's confluent-kafka AdminClient, kept for the whole module
    kp_alice: Any  # alice's kafka-python KafkaAdminClient, likewise
    stash: dict[str, Any] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.cluster.gateway_ports[0]}"


def _alice_conf(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": ALICE, "sasl.password": ALICE_PW}  # fmt: skip


def _raw(bootstrap: str, mechanism: str, user: str, password: str) -> RawClient:
    c = RawClient(bootstrap, client_id=f"acl-table-{user}")
    c.authenticate(mechanism, user, password)
    return c


def codes(resp: Any) -> frozenset[int]:
    """Every non-zero error code (``error_code``, ``partition_error_code``) in a response."""
    out: set[int] = set()
    if isinstance(resp, dict):
        for k, v in resp.items():
            if k.endswith("error_code") and v:
                out.add(int(v))
            else:
                out |= codes(v)
    elif isinstance(resp, list):
        for v in resp:
            out |= codes(v)
    return frozenset(out)


def _ok(*cs: ErrorCode) -> frozenset[int]:
    return frozenset(int(c) for c in cs)


TOPIC_DENIED = _ok(E.TOPIC_AUTHORIZATION_FAILED)
GROUP_DENIED = _ok(E.GROUP_AUTHORIZATION_FAILED)
CLUSTER_DENIED = _ok(E.CLUSTER_AUTHORIZATION_FAILED)
TXN_DENIED = _ok(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
OK = frozenset[int]()


# ---- what the super user reads back --------------------------------------------------------
_SOFTWARE = {"client_software_name": "acl-table", "client_software_version": "1"}
# DescribeAcls / DeleteAcls filters: ANY resource type, pattern, operation and permission
_DESCRIBE_ACLS = {
    "resource_type_filter": 1,
    "pattern_type_filter": 1,
    "operation": 1,
    "permission_type": 1,
}


def _offsets(admin: RawClient, topics: dict[str, int], ts: int) -> dict[tuple[str, int], int]:
    req = [
        {"name": t, "partitions": [{"partition_index": p, "timestamp": ts} for p in range(n)]}
        for t, n in topics.items()
    ]
    resp = admin.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "topics": req})
    return {(t["name"], p["partition_index"]): p["offset"] for t in resp["topics"] for p in t["partitions"]}  # fmt: skip


def snapshot(ctx: Ctx) -> dict[str, Any]:
    a = ctx.admin
    md = a.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    topics = {t["name"]: len(t["partitions"]) for t in md["topics"] if not t["is_internal"]}
    groups = {g["group_id"] for g in a.call(ApiKey.LIST_GROUPS, 4, {})["groups"]}
    fetched = a.call(
        ApiKey.OFFSET_FETCH, 8,
        {"groups": [{"group_id": g, "topics": None} for g in (GROUP, GONE_GROUP, CLIENT_GROUP)]},
    )  # fmt: skip
    configs = a.call(
        ApiKey.DESCRIBE_CONFIGS, 4,
        {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}]},
    )  # fmt: skip
    acls = a.call(ApiKey.DESCRIBE_ACLS, 3, _DESCRIBE_ACLS)
    txns = a.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TXN]})
    return {
        "topics": topics,
        "log_start": _offsets(a, topics, -2),
        "log_end": _offsets(a, topics, -1),
        "groups": groups,
        "committed": {
            (g["group_id"], t["name"], p["partition_index"]): p["committed_offset"]
            for g in fetched["groups"]
            for t in g["topics"]
            for p in t["partitions"]
        },  # fmt: skip
        "configs": {c["name"]: c["value"] for c in configs["results"][0]["configs"]},
        "quotas": a.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": []})["entries"],
        "acls": sorted(
            (
                r["resource_type"],
                r["resource_name"],
                r["pattern_type"],
                x["principal"],
                x["operation"],
                x["permission_type"],
            )
            for r in acls["resources"]
            for x in r["acls"]
        ),  # fmt: skip
        "scram_users": sorted(
            r["user"]
            for r in a.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})["results"]
        ),
        "reassignments": a.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"topics": None})["topics"],
        "txn": [
            (t["transaction_state"], t["producer_id"], t["producer_epoch"])
            for t in txns["transaction_states"]
        ],
    }


def _diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {k: (before[k], after[k]) for k in before if before[k] != after[k]}


# ---- the rows ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Grant:
    rtype: ResourceType
    name: str
    op: Operation
    pattern: PatternType = PatternType.LITERAL
    deny: bool = False

    def binding(self) -> AclBinding:
        perm = AclPermissionType.DENY if self.deny else AclPermissionType.ALLOW
        return AclBinding(
            CfResourceType(int(self.rtype)), self.name, ResourcePatternType(int(self.pattern)),
            f"User:{ALICE}", "*", AclOperation(int(self.op)), perm,
        )  # fmt: skip


@dataclass(frozen=True)
class Row:
    api: ApiKey
    call: Callable[[Ctx], Any]  # the request as alice -> what is compared (usually codes)
    denied: Any  # without the ACL
    grants: tuple[Grant, ...] = ()  # the ACLs this row adds (empty: always allowed, or
    # allowed by an earlier row's grant, named in ``note``)
    allowed: Any = OK  # with it
    cli: tuple[str, ...] = ()  # grant with ``kafka-py acls --add`` and these arguments
    effect: Callable[[dict[str, Any], dict[str, Any]], None] | None = None  # (before, after)
    note: str = ""


def _wire(api: ApiKey, version: int, body: Callable[[Ctx], dict[str, Any]] | dict[str, Any],
          keep: Callable[[Ctx, dict[str, Any]], None] | None = None) -> Callable[[Ctx], Any]:  # fmt: skip
    def call(ctx: Ctx) -> frozenset[int]:
        resp = ctx.alice.call(api, version, body(ctx) if callable(body) else body)
        found = codes(resp)
        if keep is not None and not found:
            keep(ctx, resp)
        return found

    return call


def _record(value: bytes, **kw: Any) -> bytes:
    return build_batch([Record(timestamp=int(time.time() * 1000), value=value)], **kw)


def _produce(ctx: Ctx) -> dict[str, Any]:
    return {
        "transactional_id": None, "acks": -1, "timeout": 10000,
        "topic_data": [{"name": TOPIC, "partition_data": [
            {"index": 0, "records": _record(b"from-alice")}]}],
    }  # fmt: skip


def _parts(name: str, key: str = "partitions", **extra: Any) -> list[dict[str, Any]]:
    return [{"name": name, key: [{"partition_index": 0, **extra}]}]


def _keep_join(ctx: Ctx, resp: dict[str, Any]) -> None:
    ctx.stash["member"], ctx.stash["generation"] = resp["member_id"], resp["generation_id"]


def _join(ctx: Ctx) -> frozenset[int]:
    """JoinGroup v5: the first join is answered MEMBER_ID_REQUIRED with the id to join with."""
    body = {
        "group_id": JOIN_GROUP, "session_timeout": 10000, "rebalance_timeout": 10000,
        "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }  # fmt: skip
    resp = ctx.alice.call(ApiKey.JOIN_GROUP, 5, body)
    if resp["error_code"] == E.MEMBER_ID_REQUIRED:
        resp = ctx.alice.call(ApiKey.JOIN_GROUP, 5, {**body, "member_id": resp["member_id"]})
    if not codes(resp):
        _keep_join(ctx, resp)
    return codes(resp)


def _member(ctx: Ctx) -> dict[str, Any]:
    return {
        "group_id": JOIN_GROUP,
        "member_id": ctx.stash.get("member", "nobody"),
        "generation_id": ctx.stash.get("generation", 1),
    }


def _keep_pid(ctx: Ctx, resp: dict[str, Any]) -> None:
    ctx.stash["pid"], ctx.stash["epoch"] = resp["producer_id"], resp["producer_epoch"]


def _txn(ctx: Ctx, **body: Any) -> dict[str, Any]:
    return {
        "transactional_id": TXN,
        "producer_id": ctx.stash.get("pid", 1),
        "producer_epoch": ctx.stash.get("epoch", 0),
        **body,
    }


def _marker(ctx: Ctx) -> dict[str, Any]:
    return {
        "markers": [{
            "producer_id": ctx.stash.get("pid", 1), "producer_epoch": ctx.stash.get("epoch", 0),
            "transaction_result": False, "coordinator_epoch": 0,
            "topics": [{"name": TOPIC, "partition_indexes": [0]}],
        }]
    }  # fmt: skip


def _listed(api: ApiKey, version: int, field_: str, key: str, name: str) -> Callable[[Ctx], bool]:
    def call(ctx: Ctx) -> bool:
        resp = ctx.alice.call(api, version, {})
        assert not codes(resp), resp
        return name in {e[key] for e in resp[field_]}

    return call


def _create_topic(ctx: Ctx) -> tuple[int, int, int, int]:
    """CreateTopics v7 of NEW: (error, config error, partitions shown, configs shown)."""
    body = {"topics": [{"name": NEW, "num_partitions": 1, "replication_factor": 1}]}
    t = ctx.alice.call(ApiKey.CREATE_TOPICS, 7, body)["topics"][0]
    return t["error_code"], t["topic_config_error_code"], t["num_partitions"], len(t["configs"])


def _auto_create(ctx: Ctx) -> frozenset[int]:
    """Metadata naming a missing topic with auto-creation on; LEADER_NOT_AVAILABLE is the
    answer of a topic just created (its leader not elected yet), as Kafka's."""
    body = {"topics": [{"name": AUTO}], "allow_auto_topic_creation": True}
    return codes(ctx.alice.call(ApiKey.METADATA, 12, body)) - {int(E.LEADER_NOT_AVAILABLE)}


def _cf(run: Callable[[Ctx], Any]) -> Callable[[Ctx], frozenset[int]]:
    """A confluent-kafka call as alice: the error codes it reports (raised or per entry)."""

    def call(ctx: Ctx) -> frozenset[int]:
        try:
            result = run(ctx)
        except KafkaException as exc:
            return frozenset({exc.args[0].code()})
        if isinstance(result, dict):  # per-entry results (elect_leaders): KafkaError or None
            return frozenset(e.code() for e in result.values() if isinstance(e, KafkaError))
        return OK

    return call


def _results(futures: dict[Any, Any]) -> list[Any]:
    return [f.result(15) for f in futures.values()]


def _kp(run: Callable[[Any], Any]) -> Callable[[Ctx], frozenset[int]]:
    """A kafka-python admin call as alice: the code of the error it raises, or of the errors
    it returns per entry (``{entry: error class}``)."""
    from kafka.errors import KafkaError as KpError

    def call(ctx: Ctx) -> frozenset[int]:
        try:
            result = run(ctx.kp_alice)
        except KpError as exc:
            return frozenset({exc.errno})
        if not isinstance(result, dict):
            return OK
        return frozenset(e.errno for e in result.values() if getattr(e, "errno", 0))

    return call


def _kp_producers(ctx: Ctx) -> frozenset[int]:
    """kafka-python's describe_producers as alice, sent to the gateway by id (the default
    leader lookup reads Metadata, which hides the topic from her: UNKNOWN_TOPIC_OR_PARTITION)."""
    tp = KpTopicPartition(TOPIC, 0)
    return _kp(lambda k: k.describe_producers([tp], broker_id=ctx.stash["node"]))(ctx)


def _kp_log_dirs(ctx: Ctx) -> bool:
    """kafka-python's describe_log_dirs as alice: whether it got any log dir (it ignores the
    top-level error; refused, the list is empty, as from Kafka)."""
    return any(b["log_dirs"] for b in ctx.kp_alice.describe_log_dirs())


def _cf_committed(ctx: Ctx) -> frozenset[int]:
    """confluent-kafka's list_consumer_group_offsets as alice (OffsetFetch)."""
    req = [ConsumerGroupTopicPartitions(GROUP, [TopicPartition(TOPIC, 0)])]
    try:
        got = _results(ctx.cf_alice.list_consumer_group_offsets(req))[0]
    except KafkaException as exc:
        return frozenset({exc.args[0].code()})
    return frozenset(tp.error.code() for tp in got.topic_partitions if tp.error)


def _cf_transaction(ctx: Ctx) -> frozenset[int]:
    """confluent-kafka's transactional producer as alice: InitProducerId, AddPartitionsToTxn,
    Produce, AddOffsetsToTxn, TxnOffsetCommit, EndTxn."""
    conf = _alice_conf(ctx.bootstrap)
    producer = Producer({**conf, "transactional.id": CF_TXN})
    try:
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce(TOPIC, b"in-a-transaction")
        consumer = Consumer({**conf, "group.id": GROUP})
        meta = consumer.consumer_group_metadata()
        consumer.close()
        producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 4)], meta, 15)
        producer.commit_transaction(15)
    except KafkaException as exc:
        return frozenset({exc.args[0].code()})
    return OK


def _sasl(ctx: Ctx) -> frozenset[int]:
    """A new connection: ApiVersions before authenticating (KIP-43), then SaslHandshake and
    SaslAuthenticate, none of them needing an ACL."""
    c = RawClient(ctx.bootstrap, client_id="acl-table-new")
    try:
        found = codes(c.call(ApiKey.API_VERSIONS, 3, _SOFTWARE))
        c.authenticate("SCRAM-SHA-256", ALICE, ALICE_PW)
    finally:
        c.close()
    return found


def _changed(key: str, check: Callable[[Any, Any], bool]) -> Callable[[dict, dict], None]:
    def effect(before: dict[str, Any], after: dict[str, Any]) -> None:
        assert check(before[key], after[key]), (key, before[key], after[key])

    return effect


_BOB_ACL = {"resource_type": 2, "resource_name": "bob-t", "resource_pattern_type": 3,
            "principal": "User:bob", "host": "*", "operation": 3, "permission_type": 3}  # fmt: skip
_BOB_FILTER = {"resource_type_filter": 1, "pattern_type_filter": 1, "principal_filter": "User:bob",
               "operation": 1, "permission_type": 1}  # fmt: skip
_BOB_SALT = b"bob-salt-0123456789"
_BOB_SCRAM = {"name": "bob", "mechanism": 1, "iterations": 4096, "salt": _BOB_SALT,
              "salted_password": salted_password("sha256", "bob-secret", _BOB_SALT, 4096)}  # fmt: skip
_CAROL_ACL = AclBinding(CfResourceType.TOPIC, "carol-t", ResourcePatternType.LITERAL, "User:carol",
                        "*", AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
_CAROL_FILTER = AclBindingFilter(CfResourceType.ANY, None, ResourcePatternType.ANY, "User:carol",
                                 None, AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
_TOPIC_CONFIG = [{"resource_type": 2, "resource_name": TOPIC}]
_BOB_QUOTA = [{"entity": [{"entity_type": "user", "entity_name": "bob"}],
               "ops": [{"key": "producer_byte_rate", "value": 1048576.0, "remove": False}]}]  # fmt: skip

# Kafka's rule per API (KafkaApis): the row's ``grants`` are what it adds, in this order.
ROWS: tuple[Row, ...] = (
    # always allowed
    Row(ApiKey.API_VERSIONS, _wire(ApiKey.API_VERSIONS, 3, _SOFTWARE), OK),
    Row(ApiKey.SASL_HANDSHAKE, _sasl, OK),
    Row(ApiKey.SASL_AUTHENTICATE, _sasl, OK),
    Row(ApiKey.DESCRIBE_CLUSTER, _wire(ApiKey.DESCRIBE_CLUSTER, 1, {}), OK),
    # topics: DESCRIBE
    Row(ApiKey.METADATA,
        _wire(ApiKey.METADATA, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False}),
        TOPIC_DENIED, (Grant(R.TOPIC, TOPIC, O.DESCRIBE),)),
    Row(ApiKey.LIST_OFFSETS,
        _wire(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "topics": _parts(TOPIC, timestamp=-1)}),
        TOPIC_DENIED, note="DESCRIBE on the topic (granted for Metadata)"),
    Row(ApiKey.OFFSET_FOR_LEADER_EPOCH,
        _wire(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
            {"topic": TOPIC, "partitions": [{"partition": 0, "leader_epoch": 0}]}]}),
        TOPIC_DENIED, note="DESCRIBE on the topic (granted for Metadata)"),
    # topics: WRITE (kafka-py acls, PREFIXED), then the idempotent producer (KIP-679)
    Row(ApiKey.PRODUCE, _wire(ApiKey.PRODUCE, 9, _produce), TOPIC_DENIED,
        (Grant(R.TOPIC, "acl-", O.WRITE, P.PREFIXED),),
        cli=("--operation", "Write", "--topic", "acl-", "--resource-pattern-type", "prefixed"),
        effect=_changed("log_end", lambda b, a: a[(TOPIC, 0)] == b[(TOPIC, 0)] + 1)),
    Row(ApiKey.INIT_PRODUCER_ID, _wire(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None}),
        CLUSTER_DENIED, note="IDEMPOTENT_WRITE on the cluster or WRITE on any topic (KIP-679)"),
    # topics: READ (PREFIXED)
    Row(ApiKey.FETCH,
        _wire(ApiKey.FETCH, 12, {"max_wait": 0, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "fetch_offset": 1, "partition_max_bytes": 65536}]}]}),
        TOPIC_DENIED, (Grant(R.TOPIC, "acl-", O.READ, P.PREFIXED),)),
    Row(ApiKey.DESCRIBE_PRODUCERS,
        _wire(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]}),
        TOPIC_DENIED, note="READ on the topic (granted for Fetch)"),
    Row(ApiKey.DESCRIBE_PRODUCERS, _kp_producers,
        TOPIC_DENIED, note="kafka-python"),
    # topics: CREATE, DELETE, ALTER, configs
    Row(ApiKey.CREATE_TOPICS, _create_topic, (E.TOPIC_AUTHORIZATION_FAILED, 29, -1, 0),
        (Grant(R.TOPIC, NEW, O.CREATE),), allowed=(E.NONE, 29, -1, 0),
        note="CREATE; the created topic's configs only with DESCRIBE_CONFIGS",
        effect=_changed("topics", lambda b, a: NEW not in b and a.get(NEW) == 1)),
    Row(ApiKey.METADATA,  # auto-creation: DESCRIBE and CREATE, else TOPIC_AUTHORIZATION_FAILED
        _auto_create, TOPIC_DENIED, (Grant(R.TOPIC, AUTO, O.CREATE),),
        effect=_changed("topics", lambda b, a: AUTO not in b and AUTO in a),
        note="DESCRIBE on the topic (PREFIXED READ) and CREATE"),
    Row(ApiKey.DELETE_TOPICS,
        _wire(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": DOOMED}], "timeout": 10000}),
        TOPIC_DENIED, (Grant(R.TOPIC, DOOMED, O.DELETE),),
        effect=_changed("topics", lambda b, a: DOOMED in b and DOOMED not in a)),
    Row(ApiKey.DELETE_RECORDS,
        _wire(ApiKey.DELETE_RECORDS, 2, {"topics": _parts(TOPIC, offset=1), "timeout": 10000}),
        TOPIC_DENIED, (Grant(R.TOPIC, TOPIC, O.DELETE),),
        effect=_changed("log_start", lambda b, a: (b[(TOPIC, 0)], a[(TOPIC, 0)]) == (0, 1))),
    Row(ApiKey.CREATE_PARTITIONS,
        _wire(ApiKey.CREATE_PARTITIONS, 3, {"topics": [
            {"name": GROWN, "count": 2, "assignments": None}], "timeout": 10000}),
        TOPIC_DENIED, (Grant(R.TOPIC, GROWN, O.ALTER),),
        effect=_changed("topics", lambda b, a: (b[GROWN], a[GROWN]) == (1, 2))),
    Row(ApiKey.CREATE_PARTITIONS, _cf(lambda c: _results(c.cf_alice.create_partitions(
        [NewPartitions(GROWN, 3)]))), TOPIC_DENIED, note="confluent-kafka",
        effect=_changed("topics", lambda b, a: (b[GROWN], a[GROWN]) == (2, 3))),
    Row(ApiKey.DESCRIBE_CONFIGS,
        _wire(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}]}),
        TOPIC_DENIED, (Grant(R.TOPIC, TOPIC, O.DESCRIBE_CONFIGS),)),
    Row(ApiKey.ALTER_CONFIGS,
        _wire(ApiKey.ALTER_CONFIGS, 2, {"resources": [{**_TOPIC_CONFIG[0], "configs": [
            {"name": "retention.ms", "value": "86400000"}]}]}),
        TOPIC_DENIED, (Grant(R.TOPIC, TOPIC, O.ALTER_CONFIGS),),
        effect=_changed("configs", lambda b, a: a["retention.ms"] == "86400000")),
    Row(ApiKey.INCREMENTAL_ALTER_CONFIGS,
        _wire(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{**_TOPIC_CONFIG[0], "configs": [
            {"name": "retention.bytes", "config_operation": 0, "value": "1000000000"}]}]}),
        TOPIC_DENIED, note="ALTER_CONFIGS on the topic (granted for AlterConfigs)",
        effect=_changed("configs", lambda b, a: a["retention.bytes"] == "1000000000")),
    Row(ApiKey.INCREMENTAL_ALTER_CONFIGS, _cf(lambda c: _results(c.cf_alice.incremental_alter_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[ConfigEntry(
            "retention.ms", "172800000", incremental_operation=AlterConfigOpType.SET)])]))),
        TOPIC_DENIED, note="confluent-kafka",
        effect=_changed("configs", lambda b, a: a["retention.ms"] == "172800000")),
    # the cluster resource
    Row(ApiKey.DESCRIBE_CONFIGS,
        _wire(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": 4, "resource_name": "0", "configuration_keys": None}]}),
        CLUSTER_DENIED, (Grant(R.CLUSTER, CLUSTER_NAME, O.DESCRIBE_CONFIGS),)),
    Row(ApiKey.DESCRIBE_CLIENT_QUOTAS, _wire(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": []}),
        CLUSTER_DENIED, note="DESCRIBE_CONFIGS on the cluster"),
    Row(ApiKey.ALTER_CLIENT_QUOTAS,
        _wire(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": _BOB_QUOTA}),
        CLUSTER_DENIED, (Grant(R.CLUSTER, CLUSTER_NAME, O.ALTER_CONFIGS),),
        effect=_changed("quotas", lambda b, a: len(a) == len(b) + 1)),
    Row(ApiKey.DESCRIBE_ACLS, _wire(ApiKey.DESCRIBE_ACLS, 3, _DESCRIBE_ACLS), CLUSTER_DENIED,
        (Grant(R.CLUSTER, CLUSTER_NAME, O.DESCRIBE),)),
    Row(ApiKey.DESCRIBE_LOG_DIRS, _wire(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None}),
        CLUSTER_DENIED, note="DESCRIBE on the cluster"),
    Row(ApiKey.DESCRIBE_LOG_DIRS, _kp_log_dirs, False, allowed=True, note="kafka-python"),
    Row(ApiKey.LIST_PARTITION_REASSIGNMENTS,
        _wire(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"topics": None}),
        CLUSTER_DENIED, note="DESCRIBE on the cluster"),
    Row(ApiKey.LIST_PARTITION_REASSIGNMENTS, _kp(lambda k: k.list_partition_reassignments()),
        CLUSTER_DENIED, note="kafka-python"),
    Row(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        _wire(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None}),
        CLUSTER_DENIED, note="DESCRIBE on the cluster"),
    Row(ApiKey.CREATE_ACLS, _wire(ApiKey.CREATE_ACLS, 3, {"creations": [_BOB_ACL]}),
        CLUSTER_DENIED, (Grant(R.CLUSTER, CLUSTER_NAME, O.ALTER),),
        effect=_changed("acls", lambda b, a: not any(x[3] == "User:bob" for x in b)
                        and any(x[3] == "User:bob" for x in a))),  # fmt: skip
    Row(ApiKey.CREATE_ACLS, _cf(lambda c: _results(c.cf_alice.create_acls([_CAROL_ACL]))),
        CLUSTER_DENIED, note="confluent-kafka",
        effect=_changed("acls", lambda b, a: any(x[3] == "User:carol" for x in a))),
    Row(ApiKey.DELETE_ACLS, _wire(ApiKey.DELETE_ACLS, 3, {"filters": [_BOB_FILTER]}),
        CLUSTER_DENIED, note="ALTER on the cluster",
        effect=_changed("acls", lambda b, a: not any(x[3] == "User:bob" for x in a))),
    Row(ApiKey.DELETE_ACLS, _cf(lambda c: _results(c.cf_alice.delete_acls([_CAROL_FILTER]))),
        CLUSTER_DENIED, note="confluent-kafka",
        effect=_changed("acls", lambda b, a: not any(x[3] == "User:carol" for x in a))),
    Row(ApiKey.ELECT_LEADERS,
        _wire(ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "topic_partitions": [
            {"topic": TOPIC, "partitions": [0]}], "timeout": 10000}),
        CLUSTER_DENIED, allowed=_ok(E.ELECTION_NOT_NEEDED), note="ALTER on the cluster"),
    Row(ApiKey.ELECT_LEADERS, _cf(lambda c: c.cf_alice.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)]).result(15)),
        CLUSTER_DENIED, allowed=_ok(E.ELECTION_NOT_NEEDED), note="confluent-kafka"),
    Row(ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        _wire(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, {"timeout": 10000, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": None}]}]}),
        CLUSTER_DENIED, allowed=_ok(E.NO_REASSIGNMENT_IN_PROGRESS), note="ALTER on the cluster"),
    Row(ApiKey.ALTER_PARTITION_REASSIGNMENTS, _kp(lambda k: k.alter_partition_reassignments(
        {KpTopicPartition(TOPIC, 0): None})), CLUSTER_DENIED,
        allowed=_ok(E.NO_REASSIGNMENT_IN_PROGRESS), note="kafka-python"),
    Row(ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        _wire(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": [_BOB_SCRAM]}),
        CLUSTER_DENIED, note="ALTER on the cluster",
        effect=_changed("scram_users", lambda b, a: "bob" not in b and "bob" in a)),
    Row(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, _cf(lambda c: _results(
        c.cf_alice.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-pw")]))),
        CLUSTER_DENIED, note="confluent-kafka",
        effect=_changed("scram_users", lambda b, a: "carol" in a)),
    # groups: READ (kafka-py acls, PREFIXED), DESCRIBE, DELETE
    Row(ApiKey.FIND_COORDINATOR,
        _wire(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [GROUP]}),
        GROUP_DENIED, (Grant(R.GROUP, "acl-", O.READ, P.PREFIXED),),
        cli=("--operation", "Read", "--group", "acl-", "--resource-pattern-type", "prefixed")),
    Row(ApiKey.FIND_COORDINATOR,
        _wire(ApiKey.FIND_COORDINATOR, 3, {"key_type": 0, "key": GROUP}), GROUP_DENIED,
        note="DESCRIBE on the group (PREFIXED READ)"),
    Row(ApiKey.OFFSET_COMMIT,
        _wire(ApiKey.OFFSET_COMMIT, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1,
              "member_id": "", "topics": _parts(TOPIC, committed_offset=2)}),
        GROUP_DENIED, note=OFFSET_COMMIT_RULE,
        effect=_changed("committed", lambda b, a: a.get((GROUP, TOPIC, 0)) == 2)),
    Row(ApiKey.OFFSET_FETCH,
        _wire(ApiKey.OFFSET_FETCH, 7, {"group_id": GROUP, "topics": [
            {"name": TOPIC, "partition_indexes": [0]}]}),
        GROUP_DENIED, note="DESCRIBE on the group and the topic"),
    *(Row(ApiKey.OFFSET_FETCH,  # v1: the error per partition; v2+: top-level too
          _wire(ApiKey.OFFSET_FETCH, v, {"group_id": GROUP, "topics": [
              {"name": TOPIC, "partition_indexes": [0]}]}),
          GROUP_DENIED, note=f"v{v}: DESCRIBE on the group and the topic") for v in (1, 2)),
    Row(ApiKey.OFFSET_FETCH,  # v8: the error per group
        _wire(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": GROUP, "topics": None}]}),
        GROUP_DENIED, note="DESCRIBE on the group and the topic"),
    Row(ApiKey.OFFSET_FETCH, _cf_committed, GROUP_DENIED, note="confluent-kafka"),
    Row(ApiKey.DESCRIBE_GROUPS, _wire(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [GROUP]}),
        GROUP_DENIED, note="DESCRIBE on the group"),
    Row(ApiKey.DESCRIBE_GROUPS, _cf(lambda c: _results(c.cf_alice.describe_consumer_groups([GROUP]))),
        GROUP_DENIED, note="confluent-kafka"),
    Row(ApiKey.LIST_GROUPS, _listed(ApiKey.LIST_GROUPS, 4, "groups", "group_id", GROUP),
        False, allowed=True, note="lists the groups the principal may DESCRIBE"),
    Row(ApiKey.JOIN_GROUP, _join, GROUP_DENIED, note="READ on the group"),
    Row(ApiKey.SYNC_GROUP, _wire(ApiKey.SYNC_GROUP, 5, lambda c: {
        **_member(c), "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": _member(c)["member_id"], "assignment": b""}]}),
        GROUP_DENIED, note="READ on the group"),
    Row(ApiKey.HEARTBEAT, _wire(ApiKey.HEARTBEAT, 4, _member), GROUP_DENIED,
        note="READ on the group"),
    Row(ApiKey.LEAVE_GROUP, _wire(ApiKey.LEAVE_GROUP, 3, lambda c: {
        "group_id": JOIN_GROUP, "members": [{"member_id": _member(c)["member_id"]}]}),
        GROUP_DENIED, note="READ on the group"),
    Row(ApiKey.OFFSET_DELETE,
        _wire(ApiKey.OFFSET_DELETE, 0, {"group_id": GROUP, "topics": _parts(TOPIC)}),
        GROUP_DENIED, (Grant(R.GROUP, GROUP, O.DELETE),),
        effect=_changed("committed", lambda b, a: (GROUP, TOPIC, 0) in b and (GROUP, TOPIC, 0) not in a),
        note="DELETE on the group, READ on the topic"),
    Row(ApiKey.DELETE_GROUPS, _wire(ApiKey.DELETE_GROUPS, 2, {"groups_names": [GONE_GROUP]}),
        GROUP_DENIED, (Grant(R.GROUP, GONE_GROUP, O.DELETE),),
        effect=_changed("groups", lambda b, a: GONE_GROUP in b and GONE_GROUP not in a)),
    Row(ApiKey.OFFSET_DELETE, _kp(lambda k: k.delete_group_offsets(
        CLIENT_GROUP, [KpTopicPartition(TOPIC, 0)])), GROUP_DENIED,
        (Grant(R.GROUP, CLIENT_GROUP, O.DELETE),), note="kafka-python",
        effect=_changed("committed", lambda b, a: (CLIENT_GROUP, TOPIC, 0) not in a)),
    Row(ApiKey.DELETE_GROUPS, _cf(lambda c: _results(c.cf_alice.delete_consumer_groups(
        [CLIENT_GROUP]))), GROUP_DENIED, note="confluent-kafka",
        effect=_changed("groups", lambda b, a: CLIENT_GROUP not in a)),
    # transactional ids: WRITE (PREFIXED), DESCRIBE
    Row(ApiKey.INIT_PRODUCER_ID,
        _wire(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": TXN, "transaction_timeout": 60000,
              "producer_id": -1, "producer_epoch": -1}, keep=_keep_pid),
        TXN_DENIED, (Grant(R.TRANSACTIONAL_ID, "acl-", O.WRITE, P.PREFIXED),),
        effect=_changed("txn", lambda b, a: a[0][2] > b[0][2])),
    Row(ApiKey.FIND_COORDINATOR,
        _wire(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [TXN]}), TXN_DENIED,
        note="DESCRIBE on the transactional id (implied by WRITE)"),
    Row(ApiKey.PRODUCE, _wire(ApiKey.PRODUCE, 9, lambda c: {**_produce(c), "transactional_id": TXN,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": b""}]}]}),
        TXN_DENIED, allowed=_ok(E.INVALID_RECORD),
        note="transactional: WRITE on the transactional id too (then the empty batch is refused)"),
    Row(ApiKey.DESCRIBE_TRANSACTIONS,
        _wire(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TXN]}), TXN_DENIED,
        note="DESCRIBE on the transactional id (implied by WRITE)"),
    Row(ApiKey.DESCRIBE_TRANSACTIONS, _kp(lambda k: k.describe_transactions([TXN])), TXN_DENIED,
        note="kafka-python"),
    Row(ApiKey.LIST_TRANSACTIONS,
        _listed(ApiKey.LIST_TRANSACTIONS, 1, "transaction_states", "transactional_id", TXN),
        False, allowed=True, note="lists the transactional ids the principal may DESCRIBE"),
    Row(ApiKey.LIST_TRANSACTIONS, lambda c: TXN in {
        t.transactional_id for ts in c.kp_alice.list_transactions().values() for t in ts},
        False, allowed=True, note="kafka-python"),
    Row(ApiKey.ADD_PARTITIONS_TO_TXN,
        _wire(ApiKey.ADD_PARTITIONS_TO_TXN, 3, lambda c: {
            "v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": c.stash.get("pid", 1),
            "v3_and_below_producer_epoch": c.stash.get("epoch", 0),
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]}),
        TXN_DENIED, note=TXN_RULE),
    Row(ApiKey.ADD_OFFSETS_TO_TXN,
        _wire(ApiKey.ADD_OFFSETS_TO_TXN, 3, lambda c: _txn(c, group_id=GROUP)),
        TXN_DENIED, note="WRITE on the transactional id, READ on the group"),
    Row(ApiKey.TXN_OFFSET_COMMIT,
        _wire(ApiKey.TXN_OFFSET_COMMIT, 3, lambda c: _txn(c, group_id=GROUP, generation_id=-1,
              member_id="", topics=_parts(TOPIC, committed_offset=3))),
        TXN_DENIED, note="WRITE on the transactional id, READ on the group and the topic"),
    Row(ApiKey.END_TXN, _wire(ApiKey.END_TXN, 3, lambda c: _txn(c, committed=True)), TXN_DENIED,
        effect=_changed("committed", lambda b, a: a.get((GROUP, TOPIC, 0)) == 3),
        note="WRITE on the transactional id"),
    # inter-broker: CLUSTER_ACTION (kafka-py acls --cluster)
    Row(ApiKey.WRITE_TXN_MARKERS, _wire(ApiKey.WRITE_TXN_MARKERS, 1, _marker), CLUSTER_DENIED,
        (Grant(R.CLUSTER, CLUSTER_NAME, O.CLUSTER_ACTION),),
        cli=("--operation", "ClusterAction", "--cluster"),
        effect=_changed("log_end", lambda b, a: a[(TOPIC, 0)] == b[(TOPIC, 0)] + 1)),
    Row(ApiKey.END_TXN, _cf_transaction, TXN_DENIED, note="confluent-kafka's transactional producer",
        effect=_changed("committed", lambda b, a: a.get((GROUP, TOPIC, 0)) == 4)),
)  # fmt: skip

# DENY over ALLOW (phase 3): a DENY, the rows refused again ((api, note) of a row), and the
# error they then get
DENIALS: tuple[tuple[Grant, tuple[tuple[ApiKey, str], ...], frozenset[int]], ...] = (
    # LITERAL DENYs over the PREFIXED ALLOWs of acl-*
    (Grant(R.TOPIC, TOPIC, O.READ, deny=True), ((ApiKey.FETCH, ""), (ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_RULE),
     (ApiKey.DESCRIBE_PRODUCERS, "kafka-python")), TOPIC_DENIED),
    (Grant(R.TOPIC, TOPIC, O.WRITE, deny=True),
     ((ApiKey.PRODUCE, ""), (ApiKey.ADD_PARTITIONS_TO_TXN, TXN_RULE)), TOPIC_DENIED),
    # a PREFIXED DENY of DESCRIBE over the PREFIXED ALLOW READ (which implies DESCRIBE)
    (Grant(R.GROUP, "acl-g", O.DESCRIBE, P.PREFIXED, deny=True), ((ApiKey.DESCRIBE_GROUPS, "confluent-kafka"),),
     GROUP_DENIED),
    # DENY ALL over the ALLOW ALTER on the cluster
    (Grant(R.CLUSTER, CLUSTER_NAME, O.ALL, deny=True), ((ApiKey.ELECT_LEADERS, "confluent-kafka"),),
     CLUSTER_DENIED),
)  # fmt: skip


# ---- the cluster ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ctx]:
    gateway = list(ACL_GATEWAY_FLAGS)
    with running_cluster(
        Path(tmp_path_factory.mktemp("acl-table")),
        gateways=1,
        storage_nodes=1,
        controllers=1,
        group_coordinators=1,
        zones=("zone-a",),
        extra={
            "gateway": gateway,
            "group_coordinator": ["--group.initial.rebalance.delay.ms", "0"],
        },
    ) as cluster:
        bootstrap = f"127.0.0.1:{cluster.gateway_ports[0]}"
        cf_admin = AdminClient(
            {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanisms": "PLAIN", "sasl.username": "admin", "sasl.password": ADMIN_PW}
        )  # fmt: skip
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        upsert = UserScramCredentialUpsertion(ALICE, info, ALICE_PW.encode())
        cf_admin.alter_user_scram_credentials([upsert])[ALICE].result(30)
        admin = _raw(bootstrap, "PLAIN", "admin", ADMIN_PW)
        _setup(admin)
        node = admin.call(ApiKey.METADATA, 12, {"topics": []})["brokers"][0]["node_id"]
        alice = _raw(bootstrap, "SCRAM-SHA-256", ALICE, ALICE_PW)
        from kafka.admin import KafkaAdminClient

        kp_alice = KafkaAdminClient(
            bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=ALICE,
            sasl_plain_password=ALICE_PW,
        )  # fmt: skip
        yield Ctx(cluster, alice, admin, cf_admin, AdminClient(_alice_conf(bootstrap)), kp_alice,
                  {"node": node})  # fmt: skip
        kp_alice.close()
        alice.close()
        admin.close()


def _setup(admin: RawClient) -> None:
    """Topics, records, committed offsets and a transactional id, as the super user."""
    created = admin.call(ApiKey.CREATE_TOPICS, 7, {"timeout": 30000, "topics": [
        {"name": n, "num_partitions": 1, "replication_factor": 1} for n in (TOPIC, DOOMED, GROWN)
    ]})  # fmt: skip
    assert not codes(created), created
    deadline = time.monotonic() + 30
    while True:  # the leader takes a moment: produce until it is there
        resp = admin.call(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 10000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": _record(b"v")}]}]})  # fmt: skip
        if not codes(resp):
            break
        assert time.monotonic() < deadline, resp
        time.sleep(0.2)
    for i in range(2):
        resp = admin.call(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 10000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": _record(b"v%d" % i)}]}]})  # fmt: skip
        assert not codes(resp), resp
    for key_type, key in ((0, GROUP), (1, TXN)):  # creates the internal topics, as Kafka
        body = {"key_type": key_type, "coordinator_keys": [key]}
        while codes(resp := admin.call(ApiKey.FIND_COORDINATOR, 4, body)):
            assert time.monotonic() < deadline, resp
            time.sleep(0.2)
    for group in (GROUP, GONE_GROUP, CLIENT_GROUP):
        body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "topics": _parts(TOPIC, committed_offset=1) + _parts(GROWN, committed_offset=0)}  # fmt: skip
        while codes(resp := admin.call(ApiKey.OFFSET_COMMIT, 8, body)):
            assert time.monotonic() < deadline, resp
            time.sleep(0.2)
    body = {"transactional_id": TXN, "transaction_timeout": 60000, "producer_id": -1,
            "producer_epoch": -1}  # fmt: skip
    while codes(resp := admin.call(ApiKey.INIT_PRODUCER_ID, 4, body)):
        assert time.monotonic() < deadline, resp
        time.sleep(0.2)


def _grant(ctx: Ctx, row: Row) -> None:
    if row.cli:
        props = ctx.cluster.data_dir / "admin.properties"
        props.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            f"sasl.username=admin\nsasl.password={ADMIN_PW}\n"
        )
        cli_ok("acls", "--bootstrap-server", ctx.bootstrap, "--command-config", str(props),
               "--add", "--allow-principal", f"User:{ALICE}", *row.cli)  # fmt: skip
        return
    for fut in ctx.cf_admin.create_acls([g.binding() for g in row.grants]).values():
        fut.result(30)


def _until(ctx: Ctx, row: Row, want: Any) -> tuple[Any, float]:
    """The row's request repeated on the same connection until it answers ``want``."""
    started = time.monotonic()
    while (got := row.call(ctx)) != want and time.monotonic() - started < NO_GRANT_WAIT_S:
        time.sleep(0.05)
    return got, time.monotonic() - started


def _eventually(effect: Callable[[dict, dict], None], before: dict, ctx: Ctx) -> None:
    """``effect(before, now)`` holds within 10 s (txn offsets land after EndTxn's answer)."""
    deadline = time.monotonic() + 10.0
    while True:
        try:
            return effect(before, snapshot(ctx))
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _name(row: Row) -> str:
    return f"{row.api.name}" + (f" ({row.note})" if row.note else "")


def test_every_api_refused_without_its_acl_and_served_with_it(ctx: Ctx) -> None:
    served = {int(k) for k in advertised_versions()}  # the gateway's own API table
    # ApiVersions on the wire says the same
    versions = ctx.alice.call(ApiKey.API_VERSIONS, 3, _SOFTWARE)
    assert {e["api_key"] for e in versions["api_keys"]} == served
    missing = sorted(ApiKey(k).name for k in served - {int(r.api) for r in ROWS})
    assert not missing, f"advertised APIs without an ACL row: {missing}"

    # phase 1: refused, and nothing changed
    before = snapshot(ctx)
    wrong = []
    for row in ROWS:
        got = row.call(ctx)
        if got != row.denied:
            wrong.append(f"{_name(row)}: {got} instead of {row.denied}")
    assert not wrong, "without ACLs:\n" + "\n".join(wrong)
    assert not _diff(before, snapshot(ctx)), "a refused request changed the cluster"

    # phase 2: each row's ACL granted, in order; the same open connection is then served
    waits: dict[str, float] = {}
    for row in ROWS:
        if row.grants:
            still = row.call(ctx)
            assert still == row.denied, f"{_name(row)} allowed before its grant: {still}"
            _grant(ctx, row)
        before = snapshot(ctx) if row.effect is not None else {}
        got, waited = _until(ctx, row, row.allowed)
        assert got == row.allowed, f"{_name(row)} with its ACL: {got} after {waited:.1f}s"
        if row.grants:
            waits[f"{_name(row)}{' [kafka-py acls]' if row.cli else ''}"] = waited
        if row.effect is not None:  # some effects land after the answer (txn markers)
            _eventually(row.effect, before, ctx)
    print("grant -> served on the open connection (s):", {k: round(v, 2) for k, v in waits.items()})

    # phase 3: DENY wins over ALLOW (LITERAL over PREFIXED, PREFIXED, ALL)
    by_key = {(row.api, row.note): row for row in ROWS}
    for deny, keys, code in DENIALS:
        rows = [by_key[k] for k in keys]
        for row in rows:
            assert row.call(ctx) == row.allowed, _name(row)
        for fut in ctx.cf_admin.create_acls([deny.binding()]).values():
            fut.result(30)
        before = snapshot(ctx)
        for row in rows:
            got, waited = _until(ctx, row, code)
            assert got == code, f"{_name(row)} after DENY {deny}: {got}"
        assert not _diff(before, snapshot(ctx)), f"refused after DENY {deny}, yet changed"
