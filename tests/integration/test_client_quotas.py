"""Client quotas end to end on the shared cluster (issue 17 §4, acceptance 3).

One test drives every point so the cluster is started once (the session's): quotas set with
``kafka-py configs`` land in ZooKeeper as Kafka writes them; a confluent-kafka producer held
to ``producer_byte_rate`` = 1 MiB/s for 20 s (rate printed; asserted only between 0.3x and
2x), librdkafka's throttle_cb fires, the gateway's per-entity metrics show it; another client
id producing at the same time is not slowed, and a quota given to it on the running gateway
throttles it within seconds (AlterClientQuotas sent by kafka-python's own protocol classes);
a consumer under a default-user/client quota gets no more than Kafka's window arithmetic
allows while another client id reads everything; DescribeClientQuotas (kafka-python's
encoding and the CLI), validate_only and INVALID_REQUEST answers. Only client ids of this
test get quotas, and they are removed at the end, so other tests sharing the cluster are not
affected.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kazoo.client import KazooClient

from tests.integration.kafka_support import (
    TopicFactory,
    cli_ok,
    kafka_py,
    one_line,
    read_frame,
    split_bootstrap,
)

pytestmark = [pytest.mark.integration]

QUOTA = 1_048_576  # producer_byte_rate, bytes/s
CONSUMER_QUOTA = 131_072  # consumer_byte_rate
WINDOWS = 10  # quota.window.num - 1: what a fresh sensor may take at once, in windows
PAYLOAD = b"q" * 16_384
FAST_PACE = 8 * QUOTA  # the client without a quota, paced (it would reach 100+ MB/s)


@dataclass
class Meter:
    """What one client saw: delivered/consumed bytes with their times, throttle events."""

    bytes_at: list[tuple[float, int]] = field(default_factory=list)
    throttles: list[tuple[float, int]] = field(default_factory=list)

    def on_throttle(self, event: Any) -> None:
        ms = int(event.throttle_time * 1000)
        if ms > 0:
            self.throttles.append((time.monotonic(), ms))

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.bytes_at.append((time.monotonic(), len(msg.value())))

    def total(self, start: float, end: float) -> int:
        return sum(n for t, n in self.bytes_at if start <= t <= end)


def _producer(bootstrap: str, client_id: str, meter: Meter) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": 1,
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 4096,
            "throttle_cb": meter.on_throttle,
        }
    )


def _produce_until(
    p: Producer, topic: str, meter: Meter, until: float, pace: float | None = None
) -> None:
    """Produce until ``until``; with ``pace`` (bytes/s) no faster than that."""
    start, queued = time.monotonic(), 0
    while (now := time.monotonic()) < until:
        if pace is not None and queued > pace * (now - start):
            p.poll(0.005)
            continue
        try:
            p.produce(topic, PAYLOAD, on_delivery=meter.on_delivery)
        except BufferError:
            p.poll(0.02)
            continue
        queued += len(PAYLOAD)
        p.poll(0)


def _finish(p: Producer) -> None:
    p.purge(in_queue=True)
    p.flush(15)


def _configs(bootstrap: str, *args: str) -> str:
    return cli_ok("configs", "--bootstrap-server", bootstrap, *args)


def _kafka_python_exchange(bootstrap: str, request: Any, response_cls: Any) -> Any:
    """One request encoded and decoded by kafka-python's protocol classes (not kafka-py's)."""
    request.with_header(correlation_id=11, client_id="quota-test-admin")
    with socket.create_connection(split_bootstrap(bootstrap), timeout=10) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        frame = read_frame(sock)
    assert frame is not None
    return response_cls.decode(frame, version=request.API_VERSION, header=True)


def _alter(bootstrap: str, entity: list[tuple[str, str | None]], ops: list[Any], **kw: Any) -> Any:
    req = AlterClientQuotasRequest(
        version=1,
        entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[
                    AlterClientQuotasRequest.EntryData.EntityData(entity_type=t, entity_name=n)
                    for t, n in entity
                ],
                ops=[
                    AlterClientQuotasRequest.EntryData.OpData(key=k, value=v, remove=r)
                    for k, v, r in ops
                ],
            )
        ],
        validate_only=kw.get("validate_only", False),
    )
    return _kafka_python_exchange(bootstrap, req, AlterClientQuotasResponse).entries[0]


def _describe(bootstrap: str, client_id: str) -> list[Any]:
    """DescribeClientQuotas v0 (kafka-python's encoding) of exactly one client id entity."""
    comp = DescribeClientQuotasRequest.ComponentData
    req = DescribeClientQuotasRequest(
        version=0,
        components=[comp(entity_type="client-id", match_type=0, match=client_id)],
        strict=True,
    )
    resp = _kafka_python_exchange(bootstrap, req, DescribeClientQuotasResponse)
    assert resp.error_code == 0
    return [
        (
            [(e.entity_type, e.entity_name) for e in entry.entity],
            [(v.key, v.value) for v in entry.values],
        )
        for entry in resp.entries
    ]


def _metric(cluster: Any, name: str, client_id: str, user: str = "") -> float:
    """A per-entity quota metric of the gateway (its sensor's user and client-id tags)."""
    with urllib.request.urlopen(cluster.admin_url("gateway", 0) + "/metrics", timeout=5) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and f'client_id="{client_id}"' in line:
            assert f'user="{user}"' in line, line
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} series for {client_id}")


def _fast_client(bootstrap: str, topic: str, client_id: str, out: dict[str, Any]) -> None:
    """Another client id on the same gateway: 5 s unthrottled, then a quota given to it on
    the running gateway must throttle it within seconds."""
    meter = Meter()
    p = _producer(bootstrap, client_id, meter)
    start = time.monotonic()
    _produce_until(p, topic, meter, start + 5.0, FAST_PACE)
    out["rate"] = meter.total(start, start + 5.0) / 5.0
    out["throttled_before"] = list(meter.throttles)
    entry = _alter(bootstrap, [("client-id", client_id)], [("producer_byte_rate", 65536.0, False)])
    out["alter_error"] = entry.error_code
    changed = time.monotonic()
    while time.monotonic() < changed + 8.0 and not any(t > changed for t, _ in meter.throttles):
        _produce_until(p, topic, meter, time.monotonic() + 0.2, FAST_PACE)
    out["throttled_after_s"] = next((t - changed for t, _ in meter.throttles if t > changed), None)
    _finish(p)


def test_client_quotas_end_to_end(cluster: Any, bootstrap: str, topic: TopicFactory) -> None:
    tag = uuid.uuid4().hex[:6]
    slow, fast, cons, other = (f"quota-{k}-{tag}" for k in ("slow", "fast", "cons", "other"))
    names = (topic(3, replication_factor=1), topic(3, replication_factor=1))
    try:
        _run(cluster, bootstrap, names, slow, fast, cons, other)
    finally:
        for entity in ([("client-id", slow)], [("client-id", fast)]):
            _alter(bootstrap, entity, [("producer_byte_rate", 0.0, True)])
        _alter(
            bootstrap,
            [("user", None), ("client-id", cons)],
            [("consumer_byte_rate", 0.0, True)],
        )


def _run(
    cluster: Any,
    bootstrap: str,
    names: tuple[str, str],
    slow: str,
    fast: str,
    cons: str,
    other: str,
) -> None:
    name = names[0]
    # -- set with kafka-python's encoding and with the CLI; stored as Kafka stores them ------
    assert (
        _alter(bootstrap, [("client-id", slow)], [("producer_byte_rate", QUOTA, False)]).error_code
        == 0
    )
    out = _configs(
        bootstrap, "--entity-type", "users", "--entity-default", "--entity-type", "clients",
        "--entity-name", cons, "--alter", "--add-config", f"consumer_byte_rate={CONSUMER_QUOTA}",
    )  # fmt: skip
    assert out.strip() == "Completed updating default config for users in the cluster."
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=15)
    try:
        data, _ = zk.get(f"/config/clients/{slow}")
        assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": str(QUOTA)}}
        data, _ = zk.get(f"/config/users/<default>/clients/{cons}")
        assert json.loads(data)["config"] == {"consumer_byte_rate": str(CONSUMER_QUOTA)}
        notes = [
            json.loads(zk.get(f"/config/changes/{n}")[0])
            for n in zk.get_children("/config/changes")
        ]
        assert {"version": 2, "entity_path": f"clients/{slow}"} in notes
        assert {"version": 2, "entity_path": f"users/<default>/clients/{cons}"} in notes
    finally:
        zk.stop()
        zk.close()

    # -- described: kafka-python's encoding, then the CLI (kafka-configs.sh's lines) ----------
    assert _describe(bootstrap, slow) == [
        ([("client-id", slow)], [("producer_byte_rate", float(QUOTA))])
    ]
    out = _configs(
        bootstrap, "--entity-type", "users", "--entity-default", "--entity-type", "clients",
        "--entity-name", cons, "--describe",
    )  # fmt: skip
    assert out.strip() == (
        f"Quota configs for the default user-principal, client-id '{cons}' are "
        f"consumer_byte_rate={float(CONSUMER_QUOTA)}"
    )

    # -- Kafka's validation: INVALID_REQUEST, validate_only writes nothing ----------------------
    bad = _alter(bootstrap, [("client-id", other)], [("foo_rate", 1.0, False)])
    assert (bad.error_code, bad.error_message) == (42, "Invalid configuration key foo_rate")
    ok = _alter(
        bootstrap, [("client-id", other)], [("producer_byte_rate", 5.0, False)], validate_only=True
    )
    assert ok.error_code == 0
    res = kafka_py(
        "configs", "--bootstrap-server", bootstrap, "--entity-type", "clients", "--entity-name",
        other, "--alter", "--add-config", "producer_byte_rate=10.5",
    )  # fmt: skip
    assert res.returncode != 0
    assert one_line(res.stderr) == (
        "error: INVALID_REQUEST: Configuration producer_byte_rate must be a LONG value"
    )
    assert _describe(bootstrap, other) == []

    # -- 20 s at 1 MiB/s, with another client id producing meanwhile -------------------------
    fast_out: dict[str, Any] = {}
    fast_thread = threading.Thread(target=_fast_client, args=(bootstrap, names[1], fast, fast_out))
    meter = Meter()
    p = _producer(bootstrap, slow, meter)
    start = time.monotonic()
    fast_thread.start()
    _produce_until(p, name, meter, start + 20.0)
    end = time.monotonic()
    _finish(p)
    fast_thread.join(30)
    rate = meter.total(start, end) / (end - start)
    # Kafka's windows let a fresh sensor take (quota.window.num - 1) windows of quota at once:
    # the rate over the last 10 s shows the held rate without that start
    late = meter.total(start + 10.0, end) / (end - start - 10.0)
    print(
        f"\nproducer {slow}: {rate / 1e6:.2f} MB/s over {end - start:.1f} s, "
        f"{late / 1e6:.2f} MB/s over its last 10 s "
        f"(quota {QUOTA / 1e6:.2f} MB/s), {len(meter.throttles)} throttle events, "
        f"max {max((ms for _, ms in meter.throttles), default=0)} ms"
    )
    print(
        f"producer {fast} (no quota, paced at {FAST_PACE / 1e6:.1f} MB/s, same gateway, same time): {fast_out.get('rate', 0) / 1e6:.2f}"
        f" MB/s; throttled {fast_out.get('throttled_after_s')} s after its quota was set"
    )
    assert 0.3 * QUOTA < rate < 2 * QUOTA
    assert meter.throttles, "librdkafka reported no throttle"
    assert _metric(cluster, "kafka_server_produce_throttle_time", slow) > 0
    assert _metric(cluster, "kafka_server_produce_byte_rate", slow) > 0
    assert fast_out["throttled_before"] == []
    assert fast_out["rate"] > 4 * QUOTA
    assert fast_out["alter_error"] == 0
    assert fast_out["throttled_after_s"] is not None and fast_out["throttled_after_s"] < 5.0

    # -- a consumer under a default-user + client-id quota; another client id is not ------------
    cons_meter, free_meter = Meter(), Meter()
    took = _consume(bootstrap, name, cons, cons_meter, seconds=6.0)
    consumed = cons_meter.total(0, time.monotonic())
    # a fresh sensor takes WINDOWS windows at once, then the quota; plus one partition's
    # fetch beyond the capped max_bytes (the first partition with records is always answered)
    bound = CONSUMER_QUOTA * (WINDOWS + took + 1) + QUOTA
    print(
        f"consumer {cons}: {consumed / took / 1e6:.2f} MB/s over {took:.1f} s "
        f"(quota {CONSUMER_QUOTA / 1e6:.2f} MB/s; Kafka's bound {bound / 1e6:.1f} MB), "
        f"{len(cons_meter.throttles)} throttle events"
    )
    assert cons_meter.throttles, "librdkafka reported no fetch throttle"
    assert 0 < consumed <= bound
    # a default-user quota is kept per user (PLAINTEXT: ANONYMOUS) and client id, as Kafka
    assert _metric(cluster, "kafka_server_fetch_throttle_time", cons, "ANONYMOUS") > 0
    total_bytes = sum(n for _, n in meter.bytes_at)
    took_free = _consume(bootstrap, name, other, free_meter, seconds=20.0, want=total_bytes)
    free = free_meter.total(0, time.monotonic())
    print(f"consumer {other} (no quota): {free / took_free / 1e6:.2f} MB/s, {free} bytes")
    assert free >= total_bytes > consumed
    assert not free_meter.throttles


def _consume(
    bootstrap: str, topic: str, client_id: str, meter: Meter, *, seconds: float, want: int = 0
) -> float:
    """Read ``topic`` from the start for ``seconds`` (or until ``want`` bytes); the time taken."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": f"{client_id}-g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "throttle_cb": meter.on_throttle,
        }
    )
    c.subscribe([topic])
    got = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds and not (want and got >= want):
            for msg in c.consume(500, 0.2):
                if msg.error() is None:
                    n = len(msg.value() or b"")
                    got += n
                    meter.bytes_at.append((time.monotonic(), n))
    finally:
        c.close()
    return time.monotonic() - start
