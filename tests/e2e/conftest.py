"""Fault-injection tests get their own cluster: they kill processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.cli.local_cluster import LocalCluster


@pytest.fixture
def fault_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path / "cluster", gateways=1, storage_nodes=3, controllers=2, gateway_port=0, zk_port=0
    )
    cluster.start(timeout=90)
    try:
        yield cluster
    finally:
        cluster.stop()
