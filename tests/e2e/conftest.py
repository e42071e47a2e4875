"""Fault-injection tests get their own cluster: they kill processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.cli.local_cluster import LocalCluster
from tests.integration.kafka_support import running_cluster


@pytest.fixture
def fault_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path, gateways=1, storage_nodes=3, controllers=2) as cluster:
        yield cluster
