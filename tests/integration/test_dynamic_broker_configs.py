"""Dynamic broker configs (KIP-226) and connection limits, with real clients and processes.

The module has its own cluster (1 gateway, 2 storage nodes, 1 controller): its tests change
cluster-wide defaults and restart services, which the shared session cluster must not see.
Broker id 0 names gateway 0 and storage node 0 (``services.common.broker_ids``).
"""

from __future__ import annotations

import re
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic
from kafka_support import (
    read_frame,
    request_header_v1,
    running_cluster,
    split_bootstrap,
    unique_topic_name,
    wait_for,
    wait_for_topic,
)

from services.cli.local_cluster import LocalCluster

INVALID_REQUEST = 42
STATIC_MAX_CONNECTIONS = "5000"


@pytest.fixture(scope="module")
def cfg_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("dynamic-broker-configs"),
        gateways=1,
        storage_nodes=2,
        controllers=1,
        extra={
            "storage": ["--log.retention.check.interval.ms", "300", "--log.roll.hours", "100"],
            "gateway": ["--max.connections", STATIC_MAX_CONNECTIONS],
        },
    ) as c:
        yield c


@pytest.fixture
def admin(cfg_cluster: LocalCluster) -> AdminClient:
    client = AdminClient({"bootstrap.servers": cfg_cluster.bootstrap})
    _BOOTSTRAP[client] = cfg_cluster.bootstrap
    return client


def _alter(admin: AdminClient, name: str, *entries: ConfigEntry) -> None:
    """IncrementalAlterConfigs on BROKER ``name`` ("" = the cluster-wide default).

    Neither confluent-kafka nor kafka-python's public API can name the cluster default (Java's
    AdminClient can: ``new ConfigResource(BROKER, "")``), so for "" the request is
    kafka-python's own IncrementalAlterConfigsRequest, sent through its admin client.
    """
    if name:
        res = ConfigResource(ResourceType.BROKER, name, incremental_configs=list(entries))
        admin.incremental_alter_configs([res], request_timeout=30)[res].result(timeout=30)
        return
    ops = {
        e.name: (
            "DELETE" if e.incremental_operation == AlterConfigOpType.DELETE else "SET",
            e.value,
        )
        for e in entries
    }
    out = _kafka_python(
        admin,
        KafkaAdminClient._alter_configs_request(
            [KpConfigResource("BROKER", "", configs=ops)], incremental=True
        ),
    )
    result = KafkaAdminClient._alter_configs_process_responses(out.responses)["broker"][""]
    if result != "OK":
        raise KafkaException(result)


def _kafka_python(admin: AdminClient, request: object) -> Any:
    kp = KafkaAdminClient(bootstrap_servers=_BOOTSTRAP[admin], request_timeout_ms=30000)
    try:
        return kp._manager.run(kp._manager.send, request)
    finally:
        kp.close()


_BOOTSTRAP: dict[AdminClient, str] = {}


def _set(name: str, value: str) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)


def _delete(name: str) -> ConfigEntry:
    return ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)


def _describe(admin: AdminClient, name: str, *, any_gateway: bool = False) -> dict[str, Any]:
    """DescribeConfigs of BROKER ``name``: confluent-kafka's ConfigEntry objects; for ""
    (see ``_alter``) or with ``any_gateway`` kafka-python's dicts, from a request sent to any
    gateway (clients send a broker id's request to that broker; a storage id that Metadata
    does not list is reached this way until Metadata names it)."""
    if not name or any_gateway:
        out = _kafka_python(
            admin,
            KafkaAdminClient._describe_configs_request([KpConfigResource("BROKER", name)], True),
        )
        return KafkaAdminClient._describe_configs_process_responses([out], "all")["broker"][name]
    res = ConfigResource(ResourceType.BROKER, name)
    got = admin.describe_configs([res], request_timeout=30)[res]
    return got.result(timeout=30)


def _rejected(cluster: LocalCluster, reason: str) -> float:
    with urllib.request.urlopen(cluster.admin_url("gateway", 0) + "/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(
        r'kafkapy_gateway_connections_rejected_total\{reason="' + reason + r'"\} (\S+)', text
    )
    return float(m.group(1)) if m else 0.0


def _api_versions_ok(sock: socket.socket) -> bool:
    """An ApiVersions v0 round trip on an open connection."""
    body = request_header_v1(18, 0, 1, "limit-test")
    try:
        sock.sendall(struct.pack(">i", len(body)) + body)
        frame = read_frame(sock, timeout=10)
    except OSError:
        return False
    return frame is not None and struct.unpack_from(">ih", frame)[1] == 0


def _open_from(source_ip: str, bootstrap: str, count: int) -> list[socket.socket]:
    host, port = split_bootstrap(bootstrap)
    out = []
    for _ in range(count):
        s = socket.socket()
        s.bind((source_ip, 0))
        s.connect((host, port))
        out.append(s)
    return out


def _closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm-" + topic})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


def _produce(bootstrap: str, topic: str, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for _ in range(count):
        p.produce(topic, b"x" * 300, partition=0)
        p.poll(0)
        p.flush(10)  # one batch each: several segments of 1 KiB
    assert p.flush(30) == 0


def test_describe_sources_and_synonyms(admin: AdminClient) -> None:
    got = _describe(admin, "0")
    mc = got["max.connections"]
    assert (mc.value, ConfigSource(mc.source)) == (
        STATIC_MAX_CONNECTIONS,
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    assert ConfigSource(got["log.cleaner.backoff.ms"].source) == ConfigSource.DEFAULT_CONFIG
    assert got["broker.id"].is_read_only and not got["log.cleaner.backoff.ms"].is_read_only
    _alter(admin, "", _set("log.cleaner.backoff.ms", "1000"), _set("max.connections", "4000"))
    try:
        got = _describe(admin, "0")
        assert (
            got["log.cleaner.backoff.ms"].value,
            ConfigSource(got["log.cleaner.backoff.ms"].source),
        ) == (
            "1000",
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        )
        _alter(admin, "0", _set("log.cleaner.backoff.ms", "2000"))
        got = _describe(admin, "0")
        lcb = got["log.cleaner.backoff.ms"]
        assert (lcb.value, ConfigSource(lcb.source)) == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG)
        mc = got["max.connections"]
        assert (mc.value, ConfigSource(mc.source)) == (
            "4000",
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        )
        # storage node 1 has no gateway: its id answers too, with the cluster default
        one = _describe(admin, "1", any_gateway=True)
        lcb1 = one["log.cleaner.backoff.ms"]
        assert (lcb1["value"], lcb1["config_source"]) == ("1000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
        # a storage node's own flag (log.roll.hours) is its STATIC_BROKER_CONFIG
        roll = one["log.roll.ms"]
        assert (roll["value"], roll["config_source"]) == ("360000000", "STATIC_BROKER_CONFIG")
        # "" = the cluster-wide dynamic defaults that are set, nothing else
        default = _describe(admin, "")
        assert {n: (e["value"], e["config_source"]) for n, e in default.items()} == {
            "log.cleaner.backoff.ms": ("1000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
            "max.connections": ("4000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        }
    finally:
        _alter(admin, "0", _delete("log.cleaner.backoff.ms"))
        _alter(admin, "", _delete("log.cleaner.backoff.ms"), _delete("max.connections"))
    got = _describe(admin, "0")
    assert ConfigSource(got["log.cleaner.backoff.ms"].source) == ConfigSource.DEFAULT_CONFIG
    assert ConfigSource(got["max.connections"].source) == ConfigSource.STATIC_BROKER_CONFIG


def test_kafka_python_alter_and_describe_with_synonyms(
    admin: AdminClient, cfg_cluster: LocalCluster
) -> None:
    """kafka-python's admin checks keys against the dynamic (not read-only) configs it is
    shown, alters broker 0 and reads the synonyms in precedence order; a read-only config
    is refused by the gateway with Kafka's error."""
    _alter(admin, "", _set("log.retention.bytes", "123456789"))
    kp = KafkaAdminClient(bootstrap_servers=cfg_cluster.bootstrap, request_timeout_ms=30000)
    try:
        out = kp.alter_configs(
            [KpConfigResource("BROKER", "0", configs={"log.retention.bytes": "987654321"})]
        )
        assert out == {"broker": {"0": "OK"}}
        got = kp.describe_configs(
            [KpConfigResource("BROKER", "0")], include_synonyms=True, config_filter="all"
        )["broker"]["0"]
        entry = got["log.retention.bytes"]
        assert (entry["value"], entry["config_source"]) == ("987654321", "DYNAMIC_BROKER_CONFIG")
        assert [(s["value"], s["source"]) for s in entry["synonyms"]] == [
            ("987654321", "DYNAMIC_BROKER_CONFIG"),
            ("123456789", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
            ("-1", "DEFAULT_CONFIG"),
        ]
        assert (
            got["broker.id"]["read_only"] and got["log.dirs" if "log.dirs" in got else "broker.id"]
        )
        refused = kp.alter_configs(
            [KpConfigResource("BROKER", "0", configs={"log.dirs": "/tmp/x"})],
            raise_on_unknown=False,
        )["broker"]["0"]
        assert "Cannot update these configs dynamically: Set(log.dirs)" in str(refused)
        assert (
            "InvalidRequest" in type(refused).__name__
            or "INVALID_REQUEST" in str(refused).upper()
            or "42" in str(refused)
        )
    finally:
        kp.close()
        _alter(admin, "0", _delete("log.retention.bytes"))
        _alter(admin, "", _delete("log.retention.bytes"))


def test_read_only_and_invalid_values_refused(admin: AdminClient) -> None:
    for entries, text in (
        ([_set("log.dirs", "/tmp/x")], "Cannot update these configs dynamically: Set(log.dirs)"),
        (
            [_set("log.retention.ms", "soon")],
            "Invalid value soon for configuration log.retention.ms",
        ),
        ([_set("max.connections.per.ip.overrides", "nohost")], "max.connections.per.ip.overrides"),
    ):
        with pytest.raises(KafkaException) as info:
            _alter(admin, "0", *entries)
        err = info.value.args[0]
        assert err.code() == INVALID_REQUEST and text in err.str(), err.str()
    assert "log.dirs" not in {n for n, _ in _describe(admin, "").items()}


def test_retention_default_applies_without_restart_and_survives_it(
    admin: AdminClient, cfg_cluster: LocalCluster
) -> None:
    """log.retention.ms set as the cluster default deletes old segments of a topic without
    its own retention.ms, with no restart; after storage restarts it still applies."""
    bootstrap = cfg_cluster.bootstrap
    topic = unique_topic_name("retention-default")
    admin.create_topics(
        [NewTopic(topic, 1, 2, config={"segment.bytes": "1024"})], operation_timeout=30
    )[topic].result(timeout=60)
    wait_for_topic(admin, topic, 1)
    _produce(bootstrap, topic, 12)
    time.sleep(1.5)  # older than the retention below, but the default is still 7 days
    assert _watermarks(bootstrap, topic)[0] == 0
    _alter(admin, "", _set("log.retention.ms", "1000"))
    try:
        wait_for("old segments deleted", lambda: _watermarks(bootstrap, topic)[0] > 0, 30)
        for i in range(2):
            cfg_cluster.kill("storage", i)
            cfg_cluster.start_process("storage", i, timeout=60)
        wait_for_topic(admin, topic, 1)
        _, high = _watermarks(bootstrap, topic)
        _produce(bootstrap, topic, 12)
        wait_for(
            "segments written after the restart deleted",
            lambda: _watermarks(bootstrap, topic)[0] >= high,
            30,
        )
        got = _describe(admin, "1", any_gateway=True)["log.retention.ms"]
        assert (got["value"], got["config_source"]) == ("1000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    finally:
        _alter(admin, "", _delete("log.retention.ms"))


def test_per_ip_limit_enforced_at_once_and_after_a_gateway_restart(
    admin: AdminClient, cfg_cluster: LocalCluster
) -> None:
    """2,000 connections from one address past its limit of 5 are closed right after accept;
    clients from other addresses keep being served; the limit survives a gateway restart."""
    bootstrap = cfg_cluster.bootstrap
    _alter(admin, "0", _set("max.connections.per.ip.overrides", "127.0.0.2:5"))
    socks: list[socket.socket] = []
    try:
        before = _rejected(cfg_cluster, "max_connections_per_ip")
        socks = _open_from("127.0.0.2", bootstrap, 2000)
        assert all(_api_versions_ok(s) for s in socks[:5])
        closed = sum(_closed_by_peer(s, 5.0) for s in socks[5:])
        assert closed == len(socks) - 5
        assert _rejected(cfg_cluster, "max_connections_per_ip") - before >= len(socks) - 5
        # the gateway keeps serving everyone else, and the first five
        assert "max.connections" in _describe(admin, "0")
        assert all(_api_versions_ok(s) for s in socks[:5])
        for s in socks:
            s.close()
        socks = []
        wait_for(
            "a slot for 127.0.0.2 again",
            lambda: _api_versions_ok(_keep(socks, _open_from("127.0.0.2", bootstrap, 1)[0])),
            10,
        )
        for s in socks:
            s.close()
        cfg_cluster.kill("gateway", 0, 15)
        cfg_cluster.wait_exit("gateway", 0, timeout=30)
        cfg_cluster.start_process("gateway", 0, timeout=60)
        socks = _open_from("127.0.0.2", bootstrap, 8)
        assert [_api_versions_ok(s) for s in socks[:5]] == [True] * 5
        assert all(_closed_by_peer(s) for s in socks[5:])
    finally:
        for s in socks:
            s.close()
        _alter(admin, "0", _delete("max.connections.per.ip.overrides"))


def _keep(into: list[socket.socket], s: socket.socket) -> socket.socket:
    into.append(s)
    return s


def test_max_connections_bounds_the_gateway(admin: AdminClient, cfg_cluster: LocalCluster) -> None:
    """max.connections lowered dynamically: connections past it are closed right after
    accept, whatever their address; raised again, new clients get in."""
    bootstrap = cfg_cluster.bootstrap
    _alter(admin, "0", _set("max.connections", "40"))
    socks: list[socket.socket] = []
    try:
        before = _rejected(cfg_cluster, "max_connections")
        socks = _open_from("127.0.0.3", bootstrap, 300)
        open_ = [s for s in socks if not _closed_by_peer(s, 0.5)]
        assert 0 < len(open_) <= 40
        assert _rejected(cfg_cluster, "max_connections") - before >= 260
        for s in socks:
            s.close()
        socks = []
    finally:
        for s in socks:
            s.close()
        # the admin client reconnects once the connections above are gone
        wait_for(
            "max.connections deleted",
            lambda: _try(lambda: _alter(admin, "0", _delete("max.connections"))),
            30,
            0.5,
        )
    assert _describe(admin, "0")["max.connections"].value == STATIC_MAX_CONNECTIONS


def _try(fn) -> bool:  # type: ignore[no-untyped-def]
    try:
        fn()
    except KafkaException:
        return False
    return True


def test_message_max_bytes_default_applies_at_once(
    admin: AdminClient, cfg_cluster: LocalCluster
) -> None:
    """message.max.bytes as the cluster default bounds the batches of a topic without
    max.message.bytes from the next request on; a topic override still wins."""
    bootstrap = cfg_cluster.bootstrap
    plain, big = unique_topic_name("mmb-plain"), unique_topic_name("mmb-override")
    futures = admin.create_topics(
        [
            NewTopic(plain, 1, 1),
            NewTopic(big, 1, 1, config={"max.message.bytes": "100000"}),
        ],
        operation_timeout=30,
    )
    for f in futures.values():
        f.result(timeout=60)
    wait_for_topic(admin, plain, 1)
    wait_for_topic(admin, big, 1)

    def produce(topic: str) -> str | None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
        errors: list[str] = []
        p.produce(
            topic,
            b"y" * 5000,
            on_delivery=lambda err, msg: errors.append(err.name() if err else ""),
        )
        p.flush(30)
        return errors[0] if errors else "no report"

    assert produce(plain) == ""
    _alter(admin, "", _set("message.max.bytes", "2000"))
    try:
        assert produce(plain) == "MSG_SIZE_TOO_LARGE"
        assert produce(big) == ""
    finally:
        _alter(admin, "", _delete("message.max.bytes"))
    assert produce(plain) == ""


def test_unclean_election_default_elects_an_offline_partition(
    admin: AdminClient, cfg_cluster: LocalCluster
) -> None:
    """unclean.leader.election.enable set as the cluster default: the active controller gives a
    partition whose only in-sync replica is dead a leader at once (Kafka's controller does the
    same on this change)."""
    bootstrap = cfg_cluster.bootstrap
    topic = unique_topic_name("unclean-default")
    # (confluent-kafka 2.16 refuses a replica assignment without a partition count)
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        kp.create_topics([KpNewTopic(topic, replica_assignments={0: [0, 1]})])
    finally:
        kp.close()
    wait_for_topic(admin, topic, 1)
    _produce(bootstrap, topic, 3)

    def partition() -> Any:
        return admin.list_topics(topic=topic, timeout=10).topics[topic].partitions[0]

    try:
        cfg_cluster.kill("storage", 1)
        wait_for("storage 1 out of the ISR", lambda: list(partition().isrs) == [0], 30)
        cfg_cluster.kill("storage", 0)
        wait_for("the partition offline", lambda: partition().leader < 0, 30)
        cfg_cluster.start_process("storage", 1, timeout=60)
        time.sleep(3)  # the controller has seen storage 1 come back: still no clean leader
        assert partition().leader < 0 and list(partition().isrs) == [0]
        _alter(admin, "", _set("unclean.leader.election.enable", "true"))
        wait_for("an unclean leader", lambda: partition().leader >= 0, 30)
        assert list(partition().isrs) == [1]
        _produce(bootstrap, topic, 1)
    finally:
        _alter(admin, "", _delete("unclean.leader.election.enable"))
        for i in (0, 1):
            if f"storage-{i}" not in cfg_cluster.pids():
                cfg_cluster.start_process("storage", i, timeout=60)
