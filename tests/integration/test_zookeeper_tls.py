"""A local cluster whose ZooKeeper accepts TLS only (``cluster up --zookeeper-tls``: its
``secureClientPort`` with client certificates required, every service on Kafka's
``zookeeper.ssl.*`` settings), in one cluster start:

- a confluent-kafka producer and consumer work through it, a group commits its offsets, and the
  ``topics describe`` tool reads partition state over TLS (``--zk-tls-config-file``);
- kill -9 of the active controller: the standby is elected over TLS and creates a topic;
- ZooKeeper refuses a plaintext client and a TLS client without a certificate;
- a storage node trusting another CA fails to start with one readable error line (as a Kafka
  broker that cannot reach ZooKeeper), having logged each failed handshake;
- a running session whose connection drops while its files fail the handshake keeps retrying,
  and resumes the same session once they are fixed (files are read for every connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from services.cli.certs import init_certs
from services.cli.local_cluster import LocalCluster
from services.common.zk.client import AsyncZk
from services.common.zk.security import NO_SECURITY, ZkSecurity, ZkTls, kazoo_client, tls_error
from tests.integration.kafka_support import (
    cli_ok,
    commit_retrying,
    consume_confluent,
    running_cluster,
    wait_for,
    wait_for_topic,
)

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("zk-tls"),
        zookeeper_tls=True,
        storage_nodes=1,
        controllers=2,
        group_coordinators=1,
        transaction_coordinators=0,
        extra={"group_coordinator": ["--group.initial.rebalance.delay.ms", "0"]},
    ) as cluster:
        yield cluster


def test_clients_groups_tools_and_controller_failover_over_zookeeper_tls(
    tls_cluster: LocalCluster, tmp_path: Path
) -> None:
    cluster = tls_cluster
    cfg = (cluster.data_dir / "zookeeper" / "zoo.cfg").read_text()
    assert "secureClientPort=" in cfg and "clientPort=" not in cfg.replace("secureClientPort", "")
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("zk-tls", 2, 1)])["zk-tls"].result(30)
    wait_for_topic(admin, "zk-tls", 2)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(20):
        producer.produce("zk-tls", value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    read = consume_confluent(bootstrap, "zk-tls", [0, 1], 20)
    assert sorted(r.rec.value for recs in read.values() for r in recs) == sorted(
        f"v{i}".encode() for i in range(20)
    )

    group = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "zk-tls-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        group.subscribe(["zk-tls"])
        got = 0
        deadline = time.monotonic() + 30
        while got < 20 and time.monotonic() < deadline:
            msg = group.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == 20
        commit_retrying(group, 30)
        committed = group.committed(group.assignment(), timeout=10)
        assert sum(tp.offset for tp in committed) == 20
    finally:
        group.close()

    # a tool reads ZooKeeper with Kafka's TLS client properties file
    tls = cluster.zk_security.tls
    assert tls is not None and tls.keystore is not None and tls.truststore is not None
    props = tmp_path / "zk-tls.properties"
    props.write_text(
        "zookeeper.ssl.client.enable=true\n"
        "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty\n"
        f"zookeeper.ssl.keystore.location={tls.keystore}\n"
        f"zookeeper.ssl.truststore.location={tls.truststore}\n"
    )
    described = cli_ok(
        "topics", "--bootstrap-server", bootstrap, "describe", "--topic", "zk-tls",
        "--zk-tls-config-file", str(props),
    )  # fmt: skip
    assert described.count("\tPartition: ") == 2 and "\tLeader: 0\t" in described

    # kill -9 of the active controller: the standby is elected over TLS and does its job
    zk = kazoo_client(cluster.zk_connect, cluster.zk_security, timeout=10)
    zk.start(10)
    try:
        epoch = int(zk.get("/controller_epoch")[0])
        victim = cluster.active_controller_index()
        assert victim is not None
        cluster.kill("controller", victim, signal.SIGKILL)
        wait_for(
            "the standby controller elected",
            lambda: cluster.active_controller_index() == 1 - victim,
            timeout=15,
        )
        assert int(zk.get("/controller_epoch")[0]) == epoch + 1
        assert json.loads(zk.get("/controller")[0])["brokerid"] == 1 - victim
    finally:
        zk.stop()
        zk.close()
    admin.create_topics([NewTopic("zk-tls-after", 1, 1)])["zk-tls-after"].result(30)
    wait_for_topic(admin, "zk-tls-after", 1)


def test_zookeeper_refuses_plaintext_and_clients_without_a_certificate(
    tls_cluster: LocalCluster,
) -> None:
    plain = kazoo_client(tls_cluster.zk_connect, NO_SECURITY, timeout=1)
    with pytest.raises(plain.handler.timeout_exception):
        plain.start(1)
    plain.close()
    tls = tls_cluster.zk_security.tls
    assert tls is not None
    anonymous = kazoo_client(
        tls_cluster.zk_connect, ZkSecurity(tls=ZkTls(tls.truststore, None)), timeout=1
    )
    with pytest.raises(anonymous.handler.timeout_exception):
        anonymous.start(1)
    anonymous.close()
    assert "bad certificate" in (tls_error(anonymous) or "")


def test_storage_node_trusting_another_ca_fails_to_start(
    tls_cluster: LocalCluster, tmp_path: Path
) -> None:
    other_ca = init_certs(tmp_path / "other", ("other",)).ca
    tls = tls_cluster.zk_security.tls
    assert tls is not None and tls.keystore is not None
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.storage",
            "--broker.id",
            "7",
            "--listeners",
            "127.0.0.1:0",
            "--log.dirs",
            str(tmp_path / "log"),
            "--zookeeper.connect",
            tls_cluster.zk_connect,
            "--zookeeper.connection.timeout.ms",
            "2000",
            "--zookeeper.ssl.client.enable",
            "true",
            "--zookeeper.ssl.keystore.location",
            tls.keystore,
            "--zookeeper.ssl.truststore.location",
            str(other_ca),
        ],  # fmt: skip
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith(
        f"error: cannot connect to ZooKeeper at {tls_cluster.zk_connect} within 2s: "
        f"TLS handshake with ZooKeeper at {tls_cluster.zk_connect} failed: "
        "certificate verify failed"
    ), errors[0]
    assert "zookeeper TLS handshake failed, retrying" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


class _Relay:
    """Bytes both ways between clients and ``upstream`` (TLS passes through untouched);
    ``cut()`` closes every relayed connection, as a network blip does."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
                upstream = socket.create_connection(self._upstream)
            except OSError:
                return
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._server.close()
        self.cut()


async def test_a_failing_handshake_at_runtime_is_retried_until_the_files_are_fixed(
    tls_cluster: LocalCluster, tmp_path: Path
) -> None:
    tls = tls_cluster.zk_security.tls
    assert tls is not None and tls.keystore is not None and tls.truststore is not None
    ca = tmp_path / "ca.pem"
    shutil.copy(tls.truststore, ca)
    other_ca = init_certs(tmp_path / "other", ("other",)).ca
    relay = _Relay(tls_cluster.zk_connect)
    zk = AsyncZk(relay.address, 6000, ZkSecurity(tls=ZkTls(str(ca), tls.keystore)))
    try:
        await zk.start(10)
        session = zk.session_id
        shutil.copy(other_ca, ca)  # the service's truststore replaced by a wrong one
        relay.cut()
        why = await asyncio.to_thread(
            wait_for, "a failed handshake", lambda: tls_error(zk.client), 10
        )
        assert "certificate verify failed" in why, why
        assert not zk.connected
        shutil.copy(tls.truststore, ca)  # fixed: the next retry connects, same session
        await asyncio.to_thread(wait_for, "a reconnection", lambda: zk.connected, 10)
        assert zk.session_id == session
        assert tls_error(zk.client) is None
        assert await zk.get_children("/brokers/ids") == ["0"]
    finally:
        await zk.stop()
        relay.close()
