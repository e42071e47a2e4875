"""A secure local cluster (``cluster up --secure``'s layout): mutual TLS on every internal gRPC
channel and ZooKeeper digest auth with znode ACLs, in one cluster start.

- a confluent-kafka producer (acks=all, idempotent) keeps producing while every service's
  certificates are replaced by new ones from the same CA (``certs init`` again): no delivery
  error, every acknowledged record read back exactly once; every service reloads, and a storage
  node's listener presents the new certificate;
- a storage node refuses a gRPC client without a certificate and one whose certificate comes
  from another CA, and nothing they sent is appended;
- ZooKeeper: a client without the digest credentials can neither read SCRAM credentials nor
  ACLs nor change any kafka-py znode; with the credentials it can.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from pathlib import Path

import grpc
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
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
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from services.cli.certs import init_certs, service_files
from services.cli.local_cluster import ROLES, LocalCluster
from services.cli.local_cluster.security import cert_name
from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.rpc.kafkapy.v1 import storage_pb2_grpc as pb_grpc
from services.common.zk.security import kazoo_client
from tests.integration.kafka_support import (
    commit_retrying,
    consume_confluent,
    running_cluster,
    wait_for,
    wait_for_topic,
    zk_partition_state,
)

pytestmark = [pytest.mark.integration]

TOPIC = "secure-rotation"
PARTITIONS = 3
RELOAD_MS = 300  # clients check their files this often here (default 5 s)


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> LocalCluster:
    tmp = tmp_path_factory.mktemp("secure")
    fast_reload = ["--internal.ssl.reload.check.interval.ms", str(RELOAD_MS)]
    with running_cluster(
        tmp,
        secure=True,
        storage_nodes=3,
        controllers=1,
        group_coordinators=1,
        transaction_coordinators=0,
        extra={
            **{role: fast_reload for role in ROLES},
            "group_coordinator": [*fast_reload, "--group.initial.rebalance.delay.ms", "0"],
            # ACLs stored in ZooKeeper (the local clients are PLAINTEXT, User:ANONYMOUS)
            "gateway": [
                *fast_reload,
                "--authorizer.class.name",
                "kafka.security.authorizer.AclAuthorizer",
                "--super.users",
                "User:ANONYMOUS",
            ],
        },  # fmt: skip
    ) as cluster:
        yield cluster


class PacedProducer(threading.Thread):
    """Produces numbered records (acks=all, idempotent) until stopped; keeps the acks/errors."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        )
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def _done(self, err: object, msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append(msg.value())  # type: ignore[attr-defined]

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            self.producer.produce(TOPIC, value=b"r%06d" % i, on_delivery=self._done)
            i += 1
            self.producer.poll(0.005)
        assert self.producer.flush(30) == 0


def served_certificate(address: str, client_dir: Path) -> bytes:
    """The DER certificate a gRPC listener presents now (to a client of the cluster CA)."""
    host, port = address.rsplit(":", 1)
    files = service_files(client_dir, "gateway")
    ctx = ssl.create_default_context(cafile=str(client_dir / "ca.pem"))
    ctx.load_cert_chain(str(files.certificate), str(files.key))
    ctx.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def pem_to_der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def log_mentions(cluster: LocalCluster, role: str, text: str) -> bool:
    return text in cluster.log_path(role, 0).read_text(errors="replace")


def test_certificate_rotation_does_not_interrupt_producers(secure_cluster: LocalCluster) -> None:
    cluster = secure_cluster
    assert cluster.security is not None
    certs = cluster.security.certs_dir
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
        TOPIC
    ].result(30)
    wait_for_topic(admin, TOPIC, PARTITIONS)
    old = pem_to_der(cluster.security.certificate("storage"))
    assert served_certificate(cluster.address("storage", 0), certs) == old

    producer = PacedProducer(cluster.bootstrap)
    producer.start()
    try:
        wait_for("records acknowledged before the rotation", lambda: len(producer.acked) > 50)
        init_certs(certs, [cert_name(r) for r in ROLES])  # new leaves, same CA
        new = pem_to_der(cluster.security.certificate("storage"))
        assert new != old
        for role in sorted({p.role for p in cluster.processes()} & set(ROLES)):
            wait_for(
                f"{role} reloading its certificates",
                lambda role=role: log_mentions(cluster, role, "internal_tls_certificates_reloaded"),
                timeout=20,
            )
        wait_for(
            "storage presenting the new certificate",
            lambda: served_certificate(cluster.address("storage", 1), certs) == new,
        )
        acked_at_rotation = len(producer.acked)
        # replication and produce traffic go on over re-created channels
        wait_for(
            "records acknowledged after", lambda: len(producer.acked) > acked_at_rotation + 200
        )
    finally:
        producer.stopping.set()
        producer.join(60)
    assert not producer.errors, producer.errors[:3]
    read = consume_confluent(cluster.bootstrap, TOPIC, range(PARTITIONS), len(producer.acked))
    values = [r.rec.value for records in read.values() for r in records]
    assert sorted(values) == sorted(producer.acked), "lost or duplicated records"
    print(f"\n{len(producer.acked)} records acknowledged across the rotation, 0 errors")


def test_consumer_group_commits_over_mutual_tls(secure_cluster: LocalCluster) -> None:
    """gateway -> group coordinator -> storage (__consumer_offsets), all over mTLS."""
    cluster = secure_cluster
    topic = "secure-group"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    wait_for_topic(admin, topic, 1)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(5):
        p.produce(topic, value=b"g%d" % i)
    assert p.flush(30) == 0
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "secure-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 5 and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert got == [b"g%d" % i for i in range(5)]
        commit_retrying(c, 60)
        committed = c.committed([TopicPartition(topic, 0)], timeout=30)
        assert committed[0].offset == 5
    finally:
        c.close()


def test_storage_refuses_clients_without_a_cluster_certificate(
    secure_cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster = secure_cluster
    assert cluster.security is not None
    topic = "secure-refusal"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    wait_for_topic(admin, topic, 1)
    # gateways are the brokers clients see; the storage leader is in ZooKeeper (world-readable)
    leader = int(zk_partition_state(cluster.zk_connect, topic, 0)["leader"])
    address = cluster.address("storage", leader)
    batch = build_batch([Record(timestamp=int(time.time() * 1000), value=b"intruder")])
    request = pb.AppendRequest(
        acks=-1,
        timeout_ms=5000,
        partitions=[pb.PartitionAppend(topic=topic, partition=0, records=batch)],
    )
    init_certs(tmp_path / "foreign", ["gateway"])  # a certificate from another CA
    foreign = service_files(tmp_path / "foreign", "gateway")
    foreign_creds = grpc.ssl_channel_credentials(
        root_certificates=cluster.security.ca.read_bytes(),  # it even trusts the server
        private_key=foreign.key.read_bytes(),
        certificate_chain=foreign.certificate.read_bytes(),
    )
    no_cert = grpc.ssl_channel_credentials(root_certificates=cluster.security.ca.read_bytes())

    def attempt(channel: grpc.Channel) -> grpc.StatusCode:
        with channel, pytest.raises(grpc.RpcError) as refused:
            pb_grpc.StorageStub(channel).Append(request, timeout=5)
        return refused.value.code()  # type: ignore[attr-defined,no-any-return]

    codes = [
        attempt(grpc.insecure_channel(address)),
        attempt(grpc.secure_channel(address, no_cert)),
        attempt(grpc.secure_channel(address, foreign_creds)),
    ]
    assert codes == [grpc.StatusCode.UNAVAILABLE] * 3
    # nothing was appended: the partition is still empty
    low, high = _watermarks(cluster.bootstrap, topic)
    assert (low, high) == (0, 0)


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)  # type: ignore[no-any-return]
    finally:
        c.close()


def test_zookeeper_acls_keep_credentials_and_acls_from_unauthenticated_clients(
    secure_cluster: LocalCluster,
) -> None:
    cluster = secure_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    upsert = UserScramCredentialUpsertion("alice", info, b"alice-secret")
    for fut in admin.alter_user_scram_credentials([upsert]).values():
        fut.result(30)
    binding = AclBinding(
        ResourceType.TOPIC, "secure-acl", ResourcePatternType.LITERAL, "User:alice", "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip
    for fut in admin.create_acls([binding]).values():
        fut.result(30)

    stranger = KazooClient(hosts=cluster.zk_connect)
    stranger.start(10)
    member = kazoo_client(cluster.zk_connect, cluster.zk_security)
    member.start(10)
    try:
        wait_for("alice's credentials in ZooKeeper", lambda: member.exists("/config/users/alice"))
        wait_for("the ACL in ZooKeeper", lambda: member.exists("/kafka-acl/Topic/secure-acl"))
        scram, _ = member.get("/config/users/alice")
        assert b"SCRAM-SHA-256" in scram
        for secret in ("/config/users/alice", "/kafka-acl/Topic/secure-acl"):
            with pytest.raises(NoAuthError):
                stranger.get(secret)
        with pytest.raises(NoAuthError):
            stranger.get_children("/kafka-acl")
        # world-readable, as Kafka leaves them for tools, but not writable
        stranger.get("/brokers/ids")
        topic_path = f"/brokers/topics/{TOPIC}"
        for change in (
            lambda: stranger.set(topic_path, b"{}"),
            lambda: stranger.create(f"{topic_path}/partitions/99"),
            lambda: stranger.create("/config/users/mallory", b"{}"),
            lambda: stranger.create("/kafka-acl/Topic/evil", b"{}"),
            lambda: stranger.delete("/brokers/ids/0"),
            lambda: stranger.set("/controller", b"{}"),
        ):
            with pytest.raises(NoAuthError):
                change()
        # the services' credentials are the ones that may
        member.set(topic_path, member.get(topic_path)[0])
    finally:
        for zk in (stranger, member):
            zk.stop()
            zk.close()
