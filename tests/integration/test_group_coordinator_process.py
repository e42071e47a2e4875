"""The group coordinator as a real process: registration, health, metrics, the Forward RPC's
refusals, a duplicate node.id, SIGTERM. (Groups served end to end through the gateway are in
test_consumer_groups.py; coordinator failover in tests/e2e.)"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey, decode_response_body, encode_request_body
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2 as pb
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2_grpc
from services.common.zk.layout import group_coordinator_path

pytestmark = pytest.mark.integration

ROLE = "group_coordinator"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(
        tmp_path_factory.mktemp("gc-process"),
        gateways=1,
        storage_nodes=1,
        controllers=1,
        group_coordinators=1,
        gateway_port=0,
        zk_port=0,
    )
    c.start(timeout=90)
    try:
        yield c
    finally:
        c.stop()


def forward(address: str, api_key: int, version: int, body: bytes) -> pb.ForwardResponse:
    async def call() -> pb.ForwardResponse:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = group_coordinator_pb2_grpc.GroupCoordinatorStub(channel)
            return await stub.Forward(
                pb.ForwardRequest(
                    api_key=api_key,
                    api_version=version,
                    request=body,
                    client_id="probe",
                    client_host="/127.0.0.1",
                ),
                timeout=10,
            )

    return asyncio.run(call())


def test_registers_and_serves_health_and_metrics(small_cluster: LocalCluster) -> None:
    zk = KazooClient(hosts=small_cluster.zk_connect)
    zk.start()
    try:
        data, stat = zk.get(group_coordinator_path(0))
        reg = json.loads(data)
        assert stat.ephemeralOwner != 0
        assert f"{reg['host']}:{reg['port']}" == small_cluster.address(ROLE, 0)
        assert reg["rack"] == "zone-a"
    finally:
        zk.stop()
    base = small_cluster.admin_url(ROLE, 0)
    with urllib.request.urlopen(base + "/readyz", timeout=5) as r:
        assert r.status == 200
    with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
        text = r.read().decode()
    assert "kafka_coordinator_group_groupmetadatamanager_numgroups " in text
    assert "kafkapy_group_coordinator_shards " in text


def test_forward_refuses_what_it_cannot_handle(small_cluster: LocalCluster) -> None:
    address = small_cluster.address(ROLE, 0)
    # not a group API, and a group API at a version it does not serve
    got = forward(address, ApiKey.PRODUCE, 9, b"")
    assert got.error_code == ErrorCode.UNSUPPORTED_VERSION and got.error_message
    got = forward(address, ApiKey.JOIN_GROUP, 42, b"")
    assert got.error_code == ErrorCode.UNSUPPORTED_VERSION
    # a body that does not decode
    got = forward(address, ApiKey.HEARTBEAT, 4, b"\xff\xff\xff")
    assert got.error_code == ErrorCode.INVALID_REQUEST and "malformed" in got.error_message
    # a well-formed request: answered inside the Kafka response (the process keeps serving)
    body = encode_request_body(
        ApiKey.HEARTBEAT,
        4,
        {
            "group_id": "nobody-home",
            "generation_id": 1,
            "member_id": "m",
            "group_instance_id": None,
        },
    )
    got = forward(address, ApiKey.HEARTBEAT, 4, body)
    assert got.error_code == 0
    response, _ = decode_response_body(ApiKey.HEARTBEAT, 4, got.response)
    assert response["error_code"] in (
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
    )


def _run_coordinator(cluster: LocalCluster, node_id: int, tmp: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "services.group_coordinator",
            "--node.id", str(node_id), "--listeners", "GRPC://127.0.0.1:0",
            "--zookeeper.connect", cluster.zk_connect, "--admin.port", "0",
            "--zookeeper.session.timeout.ms", "3000", "--log.format", "json",
        ],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )  # fmt: skip


def test_duplicate_node_id_is_refused_in_one_line(
    small_cluster: LocalCluster, tmp_path: Path
) -> None:
    proc = _run_coordinator(small_cluster, 0, tmp_path)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    text = out.decode()
    assert "already registered" in text and "node.id 0" in text, text[-2000:]


def test_bad_setting_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "services.group_coordinator", "--node.id", "-3"],
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "node.id" in lines[0], lines


def test_sigterm_deregisters_and_exits_0(small_cluster: LocalCluster, tmp_path: Path) -> None:
    proc = _run_coordinator(small_cluster, 7, tmp_path)
    zk = KazooClient(hosts=small_cluster.zk_connect)
    zk.start()
    try:
        deadline = time.monotonic() + 30
        while zk.exists(group_coordinator_path(7)) is None:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "node 7 never registered"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert zk.exists(group_coordinator_path(7)) is None
    finally:
        if proc.poll() is None:
            proc.kill()
        zk.stop()
