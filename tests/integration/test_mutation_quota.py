"""Controller mutation quotas (KIP-599) with real clients, on the shared cluster.

``controller_mutation_rate`` = 0.5 partitions/s gives a bucket of 0.5 x 11 windows = 5.5
credits. kafka-python speaks the strict versions (CreateTopics v7, DeleteTopics v6,
CreatePartitions v3): a request of three topics (5, 20 and 1 partitions) creates the first two
(the bucket was >= 0 before each) and refuses the third with THROTTLING_QUOTA_EXCEEDED; with the
bucket far below zero, deletions and new partitions are refused too, and nothing changes; a
quota raised on the running gateway lets them through. confluent-kafka speaks permissive
versions (CreateTopics v4): everything is created, and its throttle callback reports the
throttle time. Only this test's client ids get quotas; they are removed at the end.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient, NewPartitions
from kafka.admin import NewTopic as KpNewTopic

from tests.integration.kafka_support import cli_ok, kafka_py, wait_for

pytestmark = [pytest.mark.integration]

RATE = 0.5  # partitions per second
THROTTLED = 89  # THROTTLING_QUOTA_EXCEEDED


def _set_rate(cluster: Any, bootstrap: str, client_id: str, rate: float | None) -> None:
    """Set (None: delete) the client id's quota, then wait until the gateway applied it."""
    seen = cluster.log_path("gateway", 0).read_text().count(f"clients/{client_id}")
    change = (
        ["--delete-config", "controller_mutation_rate"]
        if rate is None
        else ["--add-config", f"controller_mutation_rate={rate}"]
    )
    cli_ok(
        *("configs", "--bootstrap-server", bootstrap, "--entity-type", "clients"),
        *("--entity-name", client_id, "--alter", *change),
    )
    wait_for(
        f"the gateway applying {client_id}'s quota",
        lambda: cluster.log_path("gateway", 0).read_text().count(f"clients/{client_id}") > seen,
        timeout=15,
    )


def _errors(result: dict[str, Any]) -> dict[str, int]:
    return {t["name"]: t["error_code"] for t in result["topics"]}


def _metric(cluster: Any, line_start: str) -> float | None:
    url = cluster.admin_url("gateway", 0) + "/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()  # noqa: S310 - loopback
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.split()[-1])
    return None


def _strict(bootstrap: str, client_id: str, call: Callable[[KafkaAdminClient], Any]) -> Any:
    """One call on a new connection: a throttled response mutes its connection (kafka-python
    pauses it for the throttle time too), as Kafka mutes the channel, not the client id."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)
    try:
        return call(admin)
    finally:
        admin.close()


def test_controller_mutation_quota(cluster: Any, bootstrap: str) -> None:
    tag = uuid.uuid4().hex[:6]
    strict_id, permissive_id = f"mq-strict-{tag}", f"mq-permissive-{tag}"
    a, b, c, d, e = (f"mq-{k}-{tag}" for k in "abcde")
    plain = AdminClient({"bootstrap.servers": bootstrap})  # no quota
    _set_rate(cluster, bootstrap, strict_id, RATE)
    _set_rate(cluster, bootstrap, permissive_id, RATE)
    try:
        # strict: admitted while the bucket is >= 0, topic by topic in request order
        created = _strict(
            bootstrap,
            strict_id,
            lambda k: k.create_topics(
                [KpNewTopic(a, 5, 1), KpNewTopic(b, 20, 1), KpNewTopic(c, 1, 1)],
                raise_errors=False,
            ),
        )
        assert _errors(created) == {a: 0, b: 0, c: THROTTLED}, created
        refused = next(t for t in created["topics"] if t["name"] == c)
        assert refused["error_message"] == "The throttling quota has been exceeded."
        topics = plain.list_topics(timeout=10).topics
        assert len(topics[a].partitions) == 5 and len(topics[b].partitions) == 20
        assert c not in topics
        tokens = _metric(
            cluster, f'kafka_server_controllermutation_tokens{{client_id="{strict_id}"'
        )
        assert tokens is not None and tokens < -10, tokens  # 5.5 - 25, refilled 0.5/s since

        # far below zero: a deletion and new partitions are refused, nothing changes
        deleted = _strict(bootstrap, strict_id, lambda k: k.delete_topics([a], raise_errors=False))
        assert _errors(deleted) == {a: THROTTLED}, deleted
        grown = _strict(
            bootstrap,
            strict_id,
            lambda k: k.create_partitions({b: NewPartitions(21)}, raise_errors=False),
        )
        assert [(r.name, r.error_code) for r in grown.results] == [(b, THROTTLED)], grown
        # validate_only spends and checks nothing
        validated = _strict(
            bootstrap,
            strict_id,
            lambda k: k.create_topics([KpNewTopic(c, 3, 1)], validate_only=True),
        )
        assert _errors(validated) == {c: 0}
        topics = plain.list_topics(timeout=10).topics
        assert a in topics and len(topics[b].partitions) == 20 and c not in topics

        # a quota raised on the running gateway refills the bucket at the new rate
        _set_rate(cluster, bootstrap, strict_id, 1000.0)
        wait_for(
            "a deletion admitted again",
            lambda: (
                _errors(
                    _strict(
                        bootstrap, strict_id, lambda k: k.delete_topics([a], raise_errors=False)
                    )
                )
                == {a: 0}
            ),
            timeout=15,
        )
        grown = _strict(
            bootstrap,
            strict_id,
            lambda k: k.create_partitions({b: NewPartitions(21)}, raise_errors=False),
        )
        assert [r.error_code for r in grown.results] == [0], grown

        # permissive (confluent-kafka's CreateTopics v4): all created, the response throttled
        throttles: list[float] = []
        permissive = AdminClient(
            {
                "bootstrap.servers": bootstrap,
                "client.id": permissive_id,
                "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
            }
        )
        futures = permissive.create_topics([NewTopic(d, 5, 1), NewTopic(e, 5, 1)])
        for fut in futures.values():
            fut.result(timeout=30)
        deadline = time.monotonic() + 10
        while not throttles and time.monotonic() < deadline:
            permissive.poll(0.2)
        # 10 partitions from a bucket of 5.5: 4.5 below zero at 0.5/s, about 9 s
        assert throttles and 2.0 < max(throttles) <= 9.0, throttles
        throttled = _metric(
            cluster, 'kafkapy_gateway_quota_throttled_total{quota="ControllerMutation"}'
        )
        assert throttled is not None and throttled >= 4  # c, a, b refused; d+e throttled
    finally:
        for client_id in (strict_id, permissive_id):
            _set_rate(cluster, bootstrap, client_id, None)
        leftovers = [t for t in (a, b, d, e) if t in plain.list_topics(timeout=10).topics]
        if leftovers:
            for fut in plain.delete_topics(leftovers).values():
                fut.result(timeout=30)
    res = kafka_py("configs", "--bootstrap-server", bootstrap, "--entity-type", "clients",
                   "--entity-name", strict_id, "--describe")  # fmt: skip
    assert res.returncode == 0 and "controller_mutation_rate" not in res.stdout, res
