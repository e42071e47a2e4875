"""ACLs with real clients on a cluster of two gateways whose (only) listener is SASL_PLAINTEXT:
``admin`` (PLAIN, a super user) creates SCRAM users, topics and ACLs with confluent-kafka's
AdminClient; ``alice`` (SCRAM-SHA-256) may READ topics prefixed ``orders-`` and the group
``g-alice``, nothing else. Checked: what she may do works and the rest is refused with Kafka's
error codes (producing, creating topics, another group), Metadata hides other topics,
DescribeAcls/DeleteAcls filters, DENY over ALLOW, ACLs in ZooKeeper in Kafka's layout, the
other gateway's cache following a change, and ACLs surviving a gateway restart.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka_support import (
    ACL_GATEWAY_FLAGS,
    ADMIN_PASSWORD,
    cli_ok,
    kafka_py,
    one_line,
    running_cluster,
    wait_for_topic,
)

from services.cli.local_cluster import LocalCluster

pytestmark = [pytest.mark.integration]

ADMIN_PW = ADMIN_PASSWORD
ALICE, ALICE_PW = "alice", "alice-secret"
TOPIC, SECRET = "orders-eu", "secret-payroll"


_ANY = AclBindingFilter(
    ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
    AclOperation.ANY, AclPermissionType.ANY,
)  # fmt: skip


def _conf(cluster: LocalCluster, gateway: int, user: str, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": f"127.0.0.1:{cluster.gateway_ports[gateway]}",
        "security.protocol": "SASL_PLAINTEXT",
    }
    if user == "admin":
        conf.update({"sasl.mechanisms": "PLAIN", "sasl.username": "admin"})
        conf["sasl.password"] = ADMIN_PW
    else:
        conf.update({"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user})
        conf["sasl.password"] = ALICE_PW
    conf.update(extra)
    return conf


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    gateway = list(ACL_GATEWAY_FLAGS)
    with running_cluster(
        Path(tmp_path_factory.mktemp("acls")),
        gateways=2,
        storage_nodes=1,
        controllers=1,
        group_coordinators=1,
        zones=("zone-a",),
        extra={"gateway": gateway},
    ) as c:
        admin = AdminClient(_conf(c, 0, "admin"))
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        upsert = UserScramCredentialUpsertion(ALICE, info, ALICE_PW.encode())
        admin.alter_user_scram_credentials([upsert])[ALICE].result(30)
        for name in (TOPIC, SECRET):
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
            wait_for_topic(admin, name, 1)
        p = Producer(_conf(c, 0, "admin"))
        for i in range(3):
            p.produce(TOPIC, f"v{i}".encode())
        assert p.flush(30) == 0
        yield c


def _acl(rtype: ResourceType, name: str, pattern: ResourcePatternType, op: AclOperation,
         perm: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:  # fmt: skip
    return AclBinding(rtype, name, pattern, f"User:{ALICE}", "*", op, perm)


def _gauge(cluster: LocalCluster, gateway: int, name: str) -> float:
    import urllib.request

    url = cluster.admin_url("gateway", gateway) + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return -1.0


def _wait_acl_count(cluster: LocalCluster, gateway: int, n: int, timeout: float = 15.0) -> None:
    name = "kafka_server_kafka_security_authorizer_metrics_acls_total_count"
    deadline = time.monotonic() + timeout
    while (got := _gauge(cluster, gateway, name)) != n and time.monotonic() < deadline:
        time.sleep(0.2)
    assert got == n, f"gateway {gateway} has {got} ACLs, expected {n}"


def _consume(conf: dict[str, Any], n: int, timeout: float = 30.0) -> tuple[list[bytes], Any]:
    """Up to ``n`` values of TOPIC from its start (offsets are never committed), or the first
    error the consumer reports."""
    c = Consumer({**conf, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([TOPIC])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                return got, m.error()
            got.append(m.value())
    finally:
        c.close()
    return got, None


def _describe_acls_refused(cluster: LocalCluster) -> None:
    """DescribeAcls without DESCRIBE on the cluster: CLUSTER_AUTHORIZATION_FAILED (checked with
    kafka-python: librdkafka drops DescribeAcls' top-level error and returns an empty list)."""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    client = KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{cluster.gateway_ports[1]}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=ALICE,
        sasl_plain_password=ALICE_PW,
    )
    try:
        pattern = ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY)
        flt = ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY, pattern)
        with pytest.raises(ClusterAuthorizationFailedError):
            client.describe_acls(flt)
    finally:
        client.close()


def test_acls_enforced_for_a_scram_user(cluster: LocalCluster) -> None:
    admin = AdminClient(_conf(cluster, 0, "admin"))
    created = admin.create_acls(
        [
            _acl(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, AclOperation.READ),
            _acl(ResourceType.GROUP, "g-alice", ResourcePatternType.LITERAL, AclOperation.READ),
        ]
    )
    for fut in created.values():
        fut.result(30)
    _wait_acl_count(cluster, 1, 2)  # the other gateway follows the change notification

    # stored as Kafka's ZooKeeper authorizer stores them
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=15)
    try:
        data, _ = zk.get("/kafka-acl-extended/prefixed/Topic/orders-")
        group, _ = zk.get("/kafka-acl/Group/g-alice")
        changes = zk.get_children("/kafka-acl-extended-changes")
    finally:
        zk.stop()
    assert json.loads(data) == {
        "version": 1,
        "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
        ],
    }
    assert json.loads(group)["acls"][0]["operation"] == "Read"
    assert any(c.startswith("acl_changes_") for c in changes)

    # DescribeAcls filters: MATCH finds the prefixed ACL of a topic name, LITERAL does not
    match = AclBindingFilter(
        ResourceType.TOPIC, TOPIC, ResourcePatternType.MATCH, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    found = admin.describe_acls(match).result(30)
    assert [(b.name, b.resource_pattern_type) for b in found] == [
        ("orders-", ResourcePatternType.PREFIXED)
    ]
    literal = AclBindingFilter(
        ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    assert admin.describe_acls(literal).result(30) == []
    every = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, f"User:{ALICE}", None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    assert len(admin.describe_acls(every).result(30)) == 2

    alice = AdminClient(_conf(cluster, 1, ALICE))
    # Metadata hides the topic she may not describe
    topics = set(alice.list_topics(timeout=15).topics)
    assert TOPIC in topics and SECRET not in topics
    # authorized operations are hers (READ, and DESCRIBE implied by it)
    from confluent_kafka import TopicCollection

    desc = alice.describe_topics(TopicCollection([TOPIC]), include_authorized_operations=True)
    ops = desc[TOPIC].result(30).authorized_operations
    assert sorted(op.name for op in ops) == ["DESCRIBE", "READ"]
    cluster_ops = alice.describe_cluster(include_authorized_operations=True).result(30)
    assert not cluster_ops.authorized_operations
    # she may not create topics, nor manage ACLs
    with pytest.raises(KafkaException) as exc:
        alice.create_topics([NewTopic("orders-new", 1, 1)])["orders-new"].result(30)
    assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _describe_acls_refused(cluster)

    # reading with her group works; another group is refused
    got, err = _consume(_conf(cluster, 1, ALICE, **{"group.id": "g-alice"}), 3)
    assert err is None and got == [b"v0", b"v1", b"v2"]
    got, err = _consume(_conf(cluster, 1, ALICE, **{"group.id": "g-mallory"}), 3)
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err

    # writing is refused: nothing appended
    errors: list[Any] = []
    p = Producer(_conf(cluster, 1, ALICE, **{"message.timeout.ms": 10000}))
    p.produce(TOPIC, b"nope", on_delivery=lambda e, m: errors.append(e))
    p.flush(30)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    watcher = Consumer(_conf(cluster, 0, "admin", **{"group.id": "admin"}))
    assert watcher.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=15) == (0, 3)
    watcher.close()

    # DENY wins over the prefixed ALLOW (added on gateway 0, enforced on gateway 1)
    deny = _acl(
        ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, AclOperation.READ,
        AclPermissionType.DENY,
    )  # fmt: skip
    admin.create_acls([deny])[deny].result(30)
    _wait_acl_count(cluster, 1, 3)
    got, err = _consume(_conf(cluster, 1, ALICE, **{"group.id": "g-alice"}), 1)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    # ACLs survive a gateway restart
    cluster.kill("gateway", 1)
    cluster.start_process("gateway", 1)
    _wait_acl_count(cluster, 1, 3, timeout=5)
    topics = set(AdminClient(_conf(cluster, 1, ALICE)).list_topics(timeout=15).topics)
    assert TOPIC in topics and SECRET not in topics

    # DeleteAcls with a filter removes exactly the DENY; reading works again
    only_deny = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.DENY,
    )  # fmt: skip
    deleted = admin.delete_acls([only_deny])[only_deny].result(30)
    assert deleted == [deny]
    _wait_acl_count(cluster, 1, 2)
    got, err = _consume(_conf(cluster, 1, ALICE, **{"group.id": "g-alice"}), 1)
    assert err is None and got == [b"v0"]


def test_kafka_py_acls_cli(cluster: LocalCluster, tmp_path: Path) -> None:
    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f"sasl.username=admin\nsasl.password={ADMIN_PW}\n"
    )
    base = ["acls", "--bootstrap-server", f"127.0.0.1:{cluster.gateway_ports[0]}",
            "--command-config", str(props)]  # fmt: skip
    before = _gauge(cluster, 1, "kafka_server_kafka_security_authorizer_metrics_acls_total_count")
    pattern = "`ResourcePattern(resourceType=TOPIC, name=cli-, patternType=PREFIXED)`"
    entries = (
        " \t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW) \n"
    )
    out = cli_ok(
        *base, "--add", "--allow-principal", "User:bob", "--operation", "Read",
        "--operation", "write", "--topic", "cli-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    assert out == (
        f"Adding ACLs for resource {pattern}: \n{entries}\n"
        f"Current ACLs for resource {pattern}: \n{entries}\n"
    )
    # takes effect on the other, running gateway within seconds
    _wait_acl_count(cluster, 1, int(before) + 2)
    out = cli_ok(*base, "--list", "--principal", "User:bob")
    assert (
        out == f"ACLs for principal `User:bob`\nCurrent ACLs for resource {pattern}: \n{entries}\n"
    )
    out = cli_ok(
        *base, "--remove", "--force", "--allow-principal", "User:bob", "--operation", "Write",
        "--topic", "cli-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    assert out.startswith(f"Removing ACLs for resource {pattern}\n")
    assert "operation=WRITE" not in out and "operation=READ" in out
    _wait_acl_count(cluster, 1, int(before) + 1)
    out = cli_ok(*base, "--add", "--consumer", "--allow-principal", "User:bob",
                 "--topic", "cli-t", "--group", "cli-g")  # fmt: skip
    assert "operation=READ" in out and "operation=DESCRIBE" in out
    assert "ResourcePattern(resourceType=GROUP, name=cli-g, patternType=LITERAL)" in out
    _wait_acl_count(cluster, 1, int(before) + 4)
    bad = kafka_py(*base, "--add", "--topic", "x")
    assert bad.returncode == 2 and "--allow-principal" in one_line(bad.stderr)
    bad = kafka_py(*base, "--add", "--allow-principal", "bob", "--topic", "x")
    assert bad.returncode == 2 and "no colon" in one_line(bad.stderr)


def test_more_apis_refused_and_allowed(cluster: LocalCluster) -> None:
    """DeleteTopics, DescribeConfigs, OffsetFetch, ListGroups, auto-creation, idempotent and
    transactional producers for a principal with only READ on ``orders-*``, then with WRITE
    and the transactional id."""
    from confluent_kafka.admin import ConfigResource

    admin = AdminClient(_conf(cluster, 0, "admin"))
    alice = AdminClient(_conf(cluster, 1, ALICE))
    with pytest.raises(KafkaException) as exc:
        alice.delete_topics([TOPIC])[TOPIC].result(30)
    assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    res = ConfigResource(ConfigResource.Type.TOPIC, SECRET)
    with pytest.raises(KafkaException) as exc:
        alice.describe_configs([res])[res].result(30)
    assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert SECRET in admin.list_topics(timeout=15).topics  # nothing deleted
    # OffsetFetch: her group's offsets of a topic she may not describe are refused per partition
    from confluent_kafka import ConsumerGroupTopicPartitions

    asked = ConsumerGroupTopicPartitions(
        "g-alice", [TopicPartition(SECRET, 0), TopicPartition(TOPIC, 0)]
    )
    parts = alice.list_consumer_group_offsets([asked])["g-alice"].result(30).topic_partitions
    errors = {tp.topic: tp.error for tp in parts}
    assert errors[TOPIC] is None, errors
    assert errors[SECRET] is not None and errors[SECRET].code() == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    ), errors

    # ListGroups lists only the groups she may describe
    ops = Consumer(_conf(cluster, 0, "admin", **{"group.id": "ops"}))
    ops.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
    ops.close()
    admin_groups = {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    her_groups = {g.group_id for g in alice.list_consumer_groups().result(30).valid}
    assert {"g-alice", "ops"} <= admin_groups and her_groups == {"g-alice"}, (
        admin_groups,
        her_groups,
    )
    # auto-creation through Metadata needs CREATE: the topic is not created
    auto = Producer(_conf(cluster, 1, ALICE, **{"message.timeout.ms": 3000}))
    auto.produce("orders-auto", b"x")
    auto.flush(10)
    assert "orders-auto" not in admin.list_topics(timeout=15).topics
    # idempotent producer: InitProducerId needs IDEMPOTENT_WRITE or WRITE on some topic
    p = Producer(
        _conf(cluster, 1, ALICE, **{"enable.idempotence": True, "message.timeout.ms": 10000})
    )
    p.produce(TOPIC, b"idem")
    with pytest.raises(KafkaException) as exc:  # librdkafka raises the fatal error from flush
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            p.flush(1)
    err = exc.value.args[0]
    assert err.fatal() and err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, err
    # transactional producer: WRITE on the transactional id
    tp = Producer(_conf(cluster, 1, ALICE, **{"transactional.id": "tx-alice"}))
    with pytest.raises(KafkaException) as exc:
        tp.init_transactions(15)
    assert exc.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    grants = [
        _acl(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, AclOperation.WRITE),
        _acl(
            ResourceType.TRANSACTIONAL_ID, "tx-", ResourcePatternType.PREFIXED,
            AclOperation.WRITE,
        ),
    ]  # fmt: skip
    for fut in admin.create_acls(grants).values():
        fut.result(30)
    _wait_acl_count(cluster, 1, len(admin.describe_acls(_ANY).result(30)))
    before = Consumer(_conf(cluster, 0, "admin", **{"group.id": "admin"}))
    _, high = before.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=15)
    before.close()
    tp = Producer(_conf(cluster, 1, ALICE, **{"transactional.id": "tx-alice"}))
    tp.init_transactions(30)
    tp.begin_transaction()
    tp.produce(TOPIC, b"txn")
    tp.commit_transaction(30)
    ip = Producer(_conf(cluster, 1, ALICE, **{"enable.idempotence": True}))
    ip.produce(TOPIC, b"idem")
    assert ip.flush(30) == 0
    after = Consumer(_conf(cluster, 0, "admin", **{"group.id": "admin"}))
    _, high_after = after.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=15)
    after.close()
    assert high_after == high + 3  # the idempotent record, the transactional one and its marker
