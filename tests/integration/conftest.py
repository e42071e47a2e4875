"""Integration fixtures: one real local cluster per session, uniquely named topics.

The cluster is what `kafka-py cluster up` starts: ZooKeeper, 2 controllers, 3 storage nodes in
3 zones and 1 gateway, all on 127.0.0.1 with free ports. Every test gets its own topics from the
`topic` factory (created with confluent-kafka's AdminClient, 3 partitions by default) so tests
never share data.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

# kafka_support (next to this file) must import under any --import-mode; the test modules of
# this directory import it too, after this conftest ran.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from kafka_support import (  # noqa: E402  # isort: skip
    DEFAULT_PARTITIONS,
    EXTERNAL_BOOTSTRAP_ENV,
    NUM_PARTITIONS,
    REPLICATION_FACTOR,
    STORAGE_NODES,
    ZONES,
    TopicFactory,
    running_cluster,
    ApiUsage,
    unique_topic_name,
    wait_for_topic,
)

if TYPE_CHECKING:
    from services.cli.local_cluster import LocalCluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("kafka-py-cluster"),
        gateways=1,
        storage_nodes=STORAGE_NODES,
        controllers=2,
        zones=ZONES,
        extra={"controller": ["--num.partitions", str(NUM_PARTITIONS)]},
    ) as c:
        yield c


@pytest.fixture(scope="session")
def bootstrap(request: pytest.FixtureRequest) -> str:
    """The gateway's address. KAFKAPY_ITEST_BOOTSTRAP points the client tests at another
    Kafka-compatible broker instead (to check the tests themselves against a reference)."""
    external = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    if external:
        return external
    cluster: LocalCluster = request.getfixturevalue("cluster")
    return cluster.bootstrap


@pytest.fixture(scope="session")
def api_usage(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiUsage]:
    """Records which API versions each client used (see ApiUsage); written at session end to
    $KAFKAPY_ITEST_API_USAGE or <pytest tmp>/api-usage.json (input of docs/compatibility.md)."""
    url = None
    if not os.environ.get(EXTERNAL_BOOTSTRAP_ENV):
        cluster: LocalCluster = request.getfixturevalue("cluster")
        url = cluster.admin_url("gateway", 0) + "/metrics"
    usage = ApiUsage(url)
    yield usage
    out = os.environ.get("KAFKAPY_ITEST_API_USAGE") or str(
        tmp_path_factory.getbasetemp() / "api-usage.json"
    )
    with open(out, "w") as f:
        json.dump(usage.as_json(), f, indent=2, sort_keys=True)


@pytest.fixture(scope="session")
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


@pytest.fixture
def topic(
    admin: AdminClient, request: pytest.FixtureRequest, api_usage: ApiUsage
) -> Iterator[TopicFactory]:
    """Factory: ``topic(partitions=3, config=None, replication_factor=3) -> name``.

    The topic exists with a leader for every partition when the call returns. Topics are
    deleted (best effort) after the test.
    """
    created: list[str] = []

    def make(
        partitions: int = DEFAULT_PARTITIONS,
        *,
        config: dict[str, str] | None = None,
        replication_factor: int = REPLICATION_FACTOR,
        prefix: str | None = None,
    ) -> str:
        name = unique_topic_name(prefix or request.node.name)
        with api_usage.record("confluent-kafka"):
            fut = admin.create_topics(
                [NewTopic(name, partitions, replication_factor, config=config or {})],
                operation_timeout=30,
                request_timeout=40,
            )[name]
            fut.result(timeout=60)
            created.append(name)
            wait_for_topic(admin, name, partitions)
        return name

    yield make
    if created:
        try:
            for fut in admin.delete_topics(created, operation_timeout=10).values():
                fut.result(timeout=20)
        except Exception:  # noqa: BLE001 - cleanup only; deletion has its own tests
            pass
