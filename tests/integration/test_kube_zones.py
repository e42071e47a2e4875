"""Gateways started as the image starts them (``kafka-py gateway``), with what the chart gives a
Deployment replica: a generated node id (-1) and zone discovery from an emulated Kubernetes API.
A real client then sees each gateway with its generated id and its node's zone as rack."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from kafka_support import wait_for
from kube_api import ZONE_LABEL, emulated_api

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _gateway(zk: str, api_url: str, node: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NODE_NAME": node}
    flags = ["--node.id", "-1", "--zookeeper.connect", zk, "--listeners", "127.0.0.1:0"]
    flags += ["--admin.port", "0", "--kafkapy.rack.discovery", "kubernetes"]
    flags += ["--kafkapy.kubernetes.api.url", api_url, "--kafkapy.rack.fallback", "zone-fallback"]
    return subprocess.Popen(
        [sys.executable, "-m", "services.cli", "gateway", *flags],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )


@pytest.fixture
def zoned_gateways(cluster, tmp_path: Path) -> Iterator[list[Path]]:  # type: ignore[no-untyped-def]
    nodes = {"node-b": {ZONE_LABEL: "zone-b"}, "node-nolabel": {"kubernetes.io/os": "linux"}}
    with emulated_api(nodes) as url:
        logs = [tmp_path / "gw-b.log", tmp_path / "gw-nolabel.log"]
        procs = [
            _gateway(cluster.zk_connect, url, n, lg) for n, lg in zip(nodes, logs, strict=True)
        ]
        try:
            yield logs
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                assert p.wait(30) == 0, "a gateway did not stop cleanly on SIGTERM"


def test_generated_ids_and_discovered_zones(cluster, zoned_gateways: list[Path]) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def extra_gateways() -> dict[int, str | None]:
        nodes = admin.describe_cluster(request_timeout=10).result(15).nodes
        found = {n.id: n.rack for n in nodes if n.id > 1000}
        return found if len(found) == 2 else {}

    found = wait_for("the two extra gateways in Metadata", extra_gateways, timeout=60)
    assert sorted(found.values()) == ["zone-b", "zone-fallback"], found
    assert len(set(found)) == 2 and min(found) >= 1001, found
    warned = zoned_gateways[1].read_text()
    assert "rack_discovery_failed" in warned and "has no label" in warned, warned
    assert "rack_discovered" in zoned_gateways[0].read_text()
