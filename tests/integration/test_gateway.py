"""The gateway process alone against a real ZooKeeper (no storage or controller needed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from services.common.protocol import ApiKey, decode_response, encode_request
from services.common.zk import layout
from services.common.zk.server import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class GatewayProc:
    proc: subprocess.Popen[bytes]
    port: int
    admin_port: int
    zk_connect: str
    log: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.admin_port}{path}"


def _http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def gateway(zk_connect: str, tmp_path: Path) -> Iterator[GatewayProc]:
    port, admin = free_port(), free_port()
    log = tmp_path / "gateway.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.gateway",
            "--node.id",
            "7",
            "--listeners",
            f"PLAINTEXT://127.0.0.1:{port}",
            "--broker.rack",
            "zone-a",
            "--zookeeper.connect",
            zk_connect,
            "--admin.port",
            str(admin),
            "--log.format",
            "json",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env=env,
    )
    gw = GatewayProc(proc, port, admin, zk_connect, log)
    # LocalCluster.start's default: readiness is not what these tests measure (a loaded machine
    # stalled the gateway's start for over 19 s)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            pytest.fail(f"gateway exited {proc.returncode}:\n{log.read_text()}")
        try:
            if _http(gw.url("/readyz"))[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"gateway not ready:\n{log.read_text()}")
        time.sleep(0.05)
    yield gw
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def _roundtrip(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(frame)
    size = struct.unpack(">i", _read(sock, 4))[0]
    return _read(sock, size)


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def test_api_versions_over_raw_socket(gateway: GatewayProc) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as s:
        body = {"client_software_name": "raw", "client_software_version": "1.0"}
        corr, resp = decode_response(
            ApiKey.API_VERSIONS,
            3,
            _roundtrip(s, encode_request(ApiKey.API_VERSIONS, 3, 11, "raw", body)),
        )
        assert corr == 11 and resp["error_code"] == 0
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
        assert keys[ApiKey.METADATA] == (1, 12) and keys[ApiKey.PRODUCE][0] == 3
        # v0 on the same connection
        corr, resp = decode_response(
            ApiKey.API_VERSIONS,
            0,
            _roundtrip(s, encode_request(ApiKey.API_VERSIONS, 0, 12, "raw", {})),
        )
        assert corr == 12 and resp["error_code"] == 0 and len(resp["api_keys"]) == len(keys)


def test_confluent_admin_sees_the_gateway(gateway: GatewayProc) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{gateway.port}"})
    md = admin.list_topics(timeout=10)
    assert list(md.brokers) == [7]
    broker = md.brokers[7]
    assert (broker.host, broker.port) == ("127.0.0.1", gateway.port)
    assert md.controller_id == 7
    assert md.topics == {}


def test_registration_metrics_and_sigterm(gateway: GatewayProc) -> None:
    zk = KazooClient(hosts=gateway.zk_connect)
    zk.start(10)
    try:
        data, stat = zk.get(layout.gateway_path(7))
        assert stat.ephemeralOwner != 0
        assert {k: v for k, v in json.loads(data).items() if k != "timestamp"} == {
            "version": 1,
            "host": "127.0.0.1",
            "port": gateway.port,
            "rack": "zone-a",
        }
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as s:
            _roundtrip(
                s,
                encode_request(
                    ApiKey.API_VERSIONS,
                    3,
                    1,
                    "m",
                    {"client_software_name": "m", "client_software_version": "1"},
                ),
            )
        status, text = _http(gateway.url("/metrics"))
        assert status == 200
        assert (
            'kafka_network_requestmetrics_requests_total{request="ApiVersions",version="3"}' in text
        )
        assert "kafka_network_requestmetrics_totaltimems_bucket" in text
        assert _http(gateway.url("/healthz"))[0] == 200

        gateway.proc.send_signal(signal.SIGTERM)
        assert gateway.proc.wait(15) == 0
        assert zk.exists(layout.gateway_path(7)) is None
    finally:
        zk.stop()
        zk.close()


def test_clients_accept_storage_replica_ids_that_are_not_brokers(gateway: GatewayProc) -> None:
    """Replica/ISR lists carry storage ids, which are not in the broker list (the gateways):
    confluent-kafka, kafka-python and kcat must take that in their stride."""
    zk = KazooClient(hosts=gateway.zk_connect)
    zk.start(10)
    try:
        for b in (101, 102):
            zk.create(
                layout.broker_path(b),
                layout.BrokerRegistration(b, "127.0.0.1", 1).to_json(),
                ephemeral=True,
                makepath=True,
            )
        zk.create(
            layout.topic_path("replicas"),
            layout.topic_assignment_json({0: [101, 102], 1: [102, 101]}),
            makepath=True,
        )
        for p, leader in ((0, 101), (1, 102)):
            zk.create(
                layout.partition_state_path("replicas", p),
                layout.PartitionStateZk(leader, 2, [101, 102], 1).to_json(),
                makepath=True,
            )
        bootstrap = f"127.0.0.1:{gateway.port}"

        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + 10
        while True:
            md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
            if "replicas" in md.topics or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        parts = md.topics["replicas"].partitions
        assert {p: (m.leader, m.replicas, m.isrs) for p, m in parts.items()} == {
            0: (7, [101, 102], [101, 102]),
            1: (7, [102, 101], [101, 102]),
        }

        from kafka.admin import KafkaAdminClient

        kp = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            (desc,) = kp.describe_topics(["replicas"])
        finally:
            kp.close()
        assert desc["error_code"] == 0
        assert sorted(p["replica_nodes"] for p in desc["partitions"]) == [[101, 102], [102, 101]]

        if shutil.which("kcat"):
            out = subprocess.run(
                ["kcat", "-b", bootstrap, "-L", "-t", "replicas"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert out.returncode == 0, out.stderr
            assert "partition 0, leader 7, replicas: 101,102, isrs: 101,102" in out.stdout
    finally:
        zk.stop()
        zk.close()
