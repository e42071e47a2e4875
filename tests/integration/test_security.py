"""Listeners, TLS and SASL with real clients, on one cluster whose gateway has four listeners:
PLAINTEXT (tools, readiness), SASL_SSL (SCRAM), SASL_PLAINTEXT (PLAIN and SCRAM, with a
KIP-368 session lifetime) and SSL with required client certificates (principal from the
subject through ssl.principal.mapping.rules). Certificates are made at run time (openssl).

SCRAM users are created with ``kafka-py configs --entity-type users`` and checked in
ZooKeeper in Kafka's format; confluent-kafka, kafka-python, aiokafka, kafkajs and kcat produce
and consume; wrong passwords, unknown users and mechanisms, a plaintext client on a TLS port,
a request before authentication and an expired session are refused the way Kafka refuses
them, and the gateway keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import struct
import subprocess
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_support import (
    ApiUsage,
    Rec,
    assert_partition_logs,
    cli_ok,
    kafka_py,
    make_records,
    one_line,
    read_frame,
    wait_for_topic,
)
from tls_support import Pki, make_pki

from services.common.protocol import ApiKey, decode_response, encode_request

pytestmark = [pytest.mark.integration]

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_carol="carol-secret";'
)
REAUTH_MS = 3000
ALICE, ALICE_PW = "alice", "alice-secret"


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Secure:
    def __init__(self, cluster: Any, pki: Pki, ports: dict[str, int]) -> None:
        self.cluster = cluster
        self.pki = pki
        self.ports = ports
        self.usage = ApiUsage(cluster.admin_url("gateway", 0) + "/metrics")

    def addr(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def conf(self, listener: str, **extra: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.addr(listener)}
        if listener in ("SASL_SSL", "SSL"):
            conf["ssl.ca.location"] = str(self.pki.ca)
        if listener != "PLAINTEXT":
            conf["security.protocol"] = listener
        conf.update(extra)
        return conf

    def gateway_log(self) -> str:
        return self.cluster.log_path("gateway", 0).read_text()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    from services.cli.local_cluster import LocalCluster

    pki = make_pki(tmp_path_factory.mktemp("pki"))
    names = ("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT", "SSL")
    ports = dict(zip(names, _free_ports(len(names)), strict=True))
    gateway = [
        "--listeners", ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "--ssl.keystore.location", str(pki.server),
        "--ssl.truststore.location", str(pki.ca),
        "--kafkapy.ssl.reload.check.interval.ms", "500",
        "--listener.name.ssl.ssl.client.auth", "required",
        "--listener.name.ssl.ssl.principal.mapping.rules",
        "RULE:^CN=(.*?),OU=clients,.*$/$1/L,DEFAULT",
        "--listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS,
        "--listener.name.sasl_plaintext.connections.max.reauth.ms", str(REAUTH_MS),
        "--listener.name.sasl_ssl.sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512",
    ]  # fmt: skip
    c = LocalCluster(
        tmp_path_factory.mktemp("kafka-py-secure"),
        gateways=1,
        storage_nodes=1,
        controllers=1,
        group_coordinators=1,
        zones=("zone-a",),
        gateway_port=ports["PLAINTEXT"],
        zk_port=0,
        extra={"gateway": gateway},
    )
    c.start(timeout=90)
    try:
        sec = Secure(c, pki, ports)
        with sec.usage.record("confluent-kafka"):
            out = cli_ok(
            "configs", "--bootstrap-server", sec.addr("PLAINTEXT"), "--entity-type", "users",
            "--entity-name", ALICE, "--alter", "--add-config",
            f"SCRAM-SHA-256=[iterations=8192,password={ALICE_PW}],"
            f"SCRAM-SHA-512=[password={ALICE_PW}]",
            )  # fmt: skip
        assert out.strip() == f"Completed updating config for user {ALICE}."
        yield sec
        # which SASL/SCRAM API versions each client sent (docs/compatibility.md)
        out_path = tmp_path_factory.getbasetemp() / "security-api-usage.json"
        out_path.write_text(json.dumps(sec.usage.as_json(), indent=2, sort_keys=True))
    finally:
        c.stop()


def _topic(sec: Secure, name: str) -> str:
    admin = AdminClient(sec.conf("PLAINTEXT"))
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    wait_for_topic(admin, name, 1)
    return name


def _round_trip_confluent(sec: Secure, listener: str, topic: str, n: int, **auth: Any) -> None:
    p = Producer(sec.conf(listener, **auth, **{"enable.idempotence": True}))
    errors: list[Any] = []
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(30) == 0 and not errors, errors
    c = Consumer(
        sec.conf(listener, **auth, **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    )
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None:
            assert m.error() is None, m.error()
            got.append(m.value())
    c.close()
    assert got == [f"v{i}".encode() for i in range(n)]


def test_scram_credentials_stored_as_kafka_stores_them(secure: Secure) -> None:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=secure.cluster.zk_connect)
    zk.start(timeout=15)
    try:
        data, _ = zk.get(f"/config/users/{ALICE}")
        changes = zk.get_children("/config/changes")
        notes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in changes]
    finally:
        zk.stop()
    body = json.loads(data)
    assert body["version"] == 1
    for mech, iterations in (("SCRAM-SHA-256", 8192), ("SCRAM-SHA-512", 4096)):
        fields = dict(item.split("=", 1) for item in body["config"][mech].split(","))
        assert set(fields) == {"salt", "stored_key", "server_key", "iterations"}
        assert int(fields["iterations"]) == iterations
        assert ALICE_PW not in body["config"][mech]
    assert {"version": 2, "entity_path": f"users/{ALICE}"} in notes
    out = cli_ok(
        "configs", "--bootstrap-server", secure.addr("PLAINTEXT"), "--entity-type", "users",
        "--entity-name", ALICE, "--describe",
    )  # fmt: skip
    assert out.strip() == (
        f"SCRAM credential configs for user-principal '{ALICE}' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096"
    )
    bad = kafka_py(
        "configs", "--bootstrap-server", secure.addr("PLAINTEXT"), "--entity-type", "users",
        "--entity-name", "x", "--alter", "--add-config", "SCRAM-SHA-256=[iterations=10,password=p]",
    )  # fmt: skip
    assert bad.returncode != 0 and "Too few iterations" in one_line(bad.stderr)


def test_a_user_name_is_sanitized_in_its_znode_as_kafka_does(secure: Secure) -> None:
    """Kafka URL-encodes a user's name in ``/config/users/<name>`` for SCRAM credentials as
    for quotas (``Sanitizer``): one znode per user whatever its name holds (``/``, ``@``,
    spaces), and the same znode a quota of that user is stored in."""
    from kazoo.client import KazooClient

    user, password = "ops team/bob@example.com", "bob-secret"
    for config in (f"SCRAM-SHA-256=[password={password}]", "producer_byte_rate=1048576"):
        cli_ok(
            "configs", "--bootstrap-server", secure.addr("PLAINTEXT"), "--entity-type", "users",
            "--entity-name", user, "--alter", "--add-config", config,
        )  # fmt: skip
    zk = KazooClient(hosts=secure.cluster.zk_connect)
    zk.start(timeout=15)
    try:
        znode = json.loads(zk.get("/config/users/ops%20team%2Fbob%40example.com")[0])
    finally:
        zk.stop()
    assert set(znode["config"]) == {"SCRAM-SHA-256", "producer_byte_rate"}
    auth = {"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password}
    md = AdminClient(secure.conf("SASL_SSL", **auth)).list_topics(timeout=20)
    assert md.brokers
    out = cli_ok(
        "configs", "--bootstrap-server", secure.addr("PLAINTEXT"), "--entity-type", "users",
        "--entity-name", user, "--describe",
    )  # fmt: skip
    assert f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256" in out


def test_confluent_sasl_ssl_scram_sha_512_and_metadata_per_listener(secure: Secure) -> None:
    auth = {"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": ALICE, "sasl.password": ALICE_PW}
    topic = _topic(secure, "sec-confluent-scram")
    with secure.usage.record("confluent-kafka"):
        _round_trip_confluent(secure, "SASL_SSL", topic, 20, **auth)
    # Metadata answers with the addresses of the listener the client connected to
    for listener, extra in (("SASL_SSL", auth), ("PLAINTEXT", {})):
        md = AdminClient(secure.conf(listener, **extra)).list_topics(timeout=20)
        assert {(b.host, b.port) for b in md.brokers.values()} == {
            ("127.0.0.1", secure.ports[listener])
        }
    assert "sasl_authenticated" in secure.gateway_log()


def test_confluent_plain_and_scram_over_sasl_plaintext_and_reauthentication(
    secure: Secure,
) -> None:
    topic = _topic(secure, "sec-confluent-plain")
    plain = {"sasl.mechanisms": "PLAIN", "sasl.username": "carol", "sasl.password": "carol-secret"}
    _round_trip_confluent(secure, "SASL_PLAINTEXT", topic, 10, **plain)
    # KIP-368: librdkafka re-authenticates before the session lifetime ends; keep producing
    # across several lifetimes on the same connections
    p = Producer(secure.conf("SASL_PLAINTEXT", **plain))
    errors: list[Any] = []
    end = time.monotonic() + 2.5 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < end:
        p.produce(topic, b"x", on_delivery=lambda e, m: e and errors.append(e))
        p.flush(10)
        sent += 1
        time.sleep(0.2)
    assert p.flush(10) == 0 and not errors and sent > 5, errors
    scram = {"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": ALICE, "sasl.password": ALICE_PW}
    AdminClient(secure.conf("SASL_PLAINTEXT", **scram)).list_topics(timeout=20)


def _auth_error(secure: Secure, listener: str, **auth: Any) -> KafkaError:
    errors: list[KafkaError] = []
    p = Producer(secure.conf(listener, **auth, error_cb=errors.append))
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)  # librdkafka reports it through error_cb
    assert errors, "no error reported"
    return errors[0]


def test_bad_credentials_unknown_user_and_mechanism_refused(secure: Secure) -> None:
    wrong = _auth_error(
        secure,
        "SASL_SSL",
        **{"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": ALICE, "sasl.password": "nope"},
    )
    assert wrong.code() == KafkaError._AUTHENTICATION and "Invalid user credentials" in wrong.str()
    unknown = _auth_error(
        secure,
        "SASL_PLAINTEXT",
        **{"sasl.mechanisms": "PLAIN", "sasl.username": "mallory", "sasl.password": "x"},
    )
    assert unknown.code() == KafkaError._AUTHENTICATION
    assert "Invalid username or password" in unknown.str()
    # PLAIN is not enabled on SASL_SSL
    mech = _auth_error(
        secure,
        "SASL_SSL",
        **{"sasl.mechanisms": "PLAIN", "sasl.username": ALICE, "sasl.password": ALICE_PW},
    )
    assert "PLAIN" in mech.str() and "SCRAM-SHA-256" in mech.str(), mech.str()
    log = secure.gateway_log()
    assert "sasl_authentication_failed" in log and "nope" not in log
    import urllib.request

    url = secure.cluster.admin_url("gateway", 0) + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        metrics = resp.read().decode()
    assert (
        'kafka_server_socket_server_metrics_failed_authentication_total{listener="SASL_SSL",'
        'mechanism="SCRAM-SHA-512"}' in metrics
    )
    # and the gateway serves others
    AdminClient(secure.conf("PLAINTEXT")).list_topics(timeout=10)


def _raw_request(sock: socket.socket, api_key: int, version: int, body: dict[str, Any]) -> Any:
    sock.sendall(encode_request(api_key, version, 7, "raw", body))
    frame = read_frame(sock)
    assert frame is not None, "connection closed"
    return decode_response(api_key, version, frame)[1]


def _closed(sock: socket.socket) -> bool:
    return read_frame(sock, timeout=5.0) is None


def test_requests_before_authentication_and_after_expiry_close_the_connection(
    secure: Secure,
) -> None:
    host, port = "127.0.0.1", secure.ports["SASL_PLAINTEXT"]
    with socket.create_connection((host, port)) as s:
        s.sendall(encode_request(ApiKey.METADATA, 9, 1, "raw", {"topics": None}))
        assert _closed(s)
    with socket.create_connection((host, port)) as s:
        hs = _raw_request(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert hs["error_code"] == 0 and "PLAIN" in hs["mechanisms"]
        auth = _raw_request(
            s, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x00carol\x00carol-secret"}
        )
        assert auth["error_code"] == 0 and auth["session_lifetime"] == REAUTH_MS
        md = _raw_request(s, ApiKey.METADATA, 9, {"topics": None})
        assert md["brokers"][0]["port"] == port
        time.sleep(REAUTH_MS / 1000 + 0.5)
        s.sendall(encode_request(ApiKey.METADATA, 9, 2, "raw", {"topics": None}))
        assert _closed(s), "an expired session must not be served"
    # SaslHandshake v0: raw tokens (pre KIP-152 clients)
    with socket.create_connection((host, port)) as s:
        hs = _raw_request(s, ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
        assert hs["error_code"] == 0
        token = b"\x00carol\x00carol-secret"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert read_frame(s) == b""
        md = _raw_request(s, ApiKey.METADATA, 9, {"topics": None})
        assert md["brokers"]
    # garbage tokens never crash the gateway: wrong password then a request
    with socket.create_connection((host, port)) as s:
        _raw_request(s, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
        bad = _raw_request(s, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\xff\x00garbage"})
        assert bad["error_code"] == 58  # SASL_AUTHENTICATION_FAILED
        assert _closed(s)
    AdminClient(secure.conf("PLAINTEXT")).list_topics(timeout=10)


def test_mutual_tls_principal_and_plaintext_client_on_tls_port(secure: Secure) -> None:
    cert, key = secure.pki.client("alice-client", "/O=kafkapy/OU=clients/CN=Alice")
    topic = _topic(secure, "sec-mtls")
    tls = {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    _round_trip_confluent(secure, "SSL", topic, 5, **tls)
    assert "User:alice" in secure.gateway_log()
    # no client certificate: the TLS handshake fails
    errors: list[KafkaError] = []
    p = Producer(secure.conf("SSL", error_cb=errors.append))
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors
    # an expired client certificate is refused the same way
    old_cert, old_key = secure.pki.client("expired-client", "/OU=clients/CN=Old", days=-1)
    expired: list[KafkaError] = []
    p = Producer(
        secure.conf(
            "SSL",
            error_cb=expired.append,
            **{"ssl.certificate.location": str(old_cert), "ssl.key.location": str(old_key)},
        )
    )
    deadline = time.monotonic() + 15
    while not expired and time.monotonic() < deadline:
        p.poll(0.2)
    failures = (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    assert expired and all(e.code() in failures for e in expired), expired
    with pytest.raises(KafkaException):
        p.list_topics(timeout=3)
    assert "User:old" not in secure.gateway_log()
    # a plaintext client on the TLS port gets nowhere; the gateway keeps serving
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"])) as s:
        s.sendall(encode_request(ApiKey.API_VERSIONS, 0, 1, "plain", {}))
        assert _closed(s)
    ctx = ssl.create_default_context(cafile=str(secure.pki.ca))
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"])) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            assert s.version() in ("TLSv1.2", "TLSv1.3")
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(str(secure.pki.ca))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old.maximum_version = ssl.TLSVersion.TLSv1_1
        old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"])) as raw:
        with pytest.raises((ssl.SSLError, OSError)):
            old.wrap_socket(raw, server_hostname="127.0.0.1").do_handshake()


def test_kafka_python_sasl_ssl_scram_sha_256(secure: Secure) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = _topic(secure, "sec-kafka-python")
    common: dict[str, Any] = {
        "bootstrap_servers": secure.addr("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": ALICE,
        "sasl_plain_password": ALICE_PW,
        "ssl_cafile": str(secure.pki.ca),
    }
    with secure.usage.record("kafka-python"):
        p = KafkaProducer(**common)
        for i in range(10):
            p.send(topic, f"kp{i}".encode()).get(timeout=30)
        p.close()
        c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=15000, **common)
        got = [m.value for m, _ in zip(c, range(10), strict=False)]
        c.close()
    assert got == [f"kp{i}".encode() for i in range(10)]


def test_aiokafka_with_ssl_context_and_plain(secure: Secure) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = _topic(secure, "sec-aiokafka")

    async def run() -> list[bytes]:
        scram = {
            "bootstrap_servers": secure.addr("SASL_SSL"),
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": ALICE,
            "sasl_plain_password": ALICE_PW,
            "ssl_context": create_ssl_context(cafile=str(secure.pki.ca)),
        }
        p = AIOKafkaProducer(**scram)
        await p.start()
        try:
            for i in range(5):
                await p.send_and_wait(topic, f"ak{i}".encode())
        finally:
            await p.stop()
        plain = {
            "bootstrap_servers": secure.addr("SASL_PLAINTEXT"),
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "carol",
            "sasl_plain_password": "carol-secret",
        }
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **plain)
        await c.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for m in c:
                    got.append(m.value)
                    if len(got) == 5:
                        break
        finally:
            await c.stop()
        return got

    with secure.usage.record("aiokafka"):
        got = asyncio.run(run())
    assert got == [f"ak{i}".encode() for i in range(5)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_sasl_plaintext_plain_and_sasl_ssl(secure: Secure) -> None:
    topic = _topic(secure, "sec-kcat")
    kcat = shutil.which("kcat") or "kcat"
    plain = [
        "-b", secure.addr("SASL_PLAINTEXT"), "-X", "security.protocol=SASL_PLAINTEXT",
        "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=carol",
        "-X", "sasl.password=carol-secret",
    ]  # fmt: skip
    with secure.usage.record("kcat"):
        subprocess.run(
            [kcat, *plain, "-P", "-t", topic], input=b"k1\nk2\nk3\n", check=True, timeout=60
        )
    scram = [
        "-b", secure.addr("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
        "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", f"sasl.username={ALICE}",
        "-X", f"sasl.password={ALICE_PW}", "-X", f"ssl.ca.location={secure.pki.ca}",
    ]  # fmt: skip
    out = subprocess.run(
        [kcat, *scram, "-C", "-t", topic, "-o", "beginning", "-e"],
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout.split() == [b"k1", b"k2", b"k3"]
    bad = subprocess.run(
        [kcat, *plain[:-2], "-X", "sasl.password=wrong", "-L", "-m", "5"],
        capture_output=True,
        timeout=60,
    )
    assert bad.returncode != 0 and b"Authentication failed" in bad.stderr


KafkaJSCases = dict[str, tuple[str, dict[str, Any]]]


@pytest.fixture(scope="module")
def kafkajs_cases(secure: Secure) -> KafkaJSCases:
    """The listener/authentication pairs of issue 17 as kafkajs options: name -> (listener,
    spec fields)."""
    cert, key = secure.pki.client("kafkajs-client", "/O=kafkapy/OU=clients/CN=KafkaJS")
    ca = str(secure.pki.ca)
    return {
        "sasl-ssl-scram-512": (
            "SASL_SSL",
            {
                "ssl": {"ca": ca},
                "sasl": {"mechanism": "scram-sha-512", "username": ALICE, "password": ALICE_PW},
            },
        ),
        "sasl-plaintext-plain": (
            "SASL_PLAINTEXT",
            {"sasl": {"mechanism": "plain", "username": "carol", "password": "carol-secret"}},
        ),
        "sasl-plaintext-scram-256": (
            "SASL_PLAINTEXT",
            {"sasl": {"mechanism": "scram-sha-256", "username": ALICE, "password": ALICE_PW}},
        ),
        "ssl-client-cert": ("SSL", {"ssl": {"ca": ca, "cert": str(cert), "key": str(key)}}),
    }


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_kafkajs_produces_and_consumes_on_every_secure_listener(
    secure: Secure, kafkajs_cases: KafkaJSCases, tmp_path: Path
) -> None:
    """kafkajs's idempotent producer then its group consumer, per listener/mechanism; the four
    run side by side (each group waits out group.initial.rebalance.delay.ms). On the
    SASL_PLAINTEXT listener (3 s session lifetime, KIP-368) kafkajs re-authenticates on its
    open connections."""
    from test_clients_kafkajs import js_messages, js_read_records, run_node

    cases = kafkajs_cases  # the module's listener/authentication pairs
    topics = {name: _topic(secure, f"sec-kafkajs-{name}") for name in cases}
    log_start = len(secure.gateway_log())

    def round_trip(name: str) -> tuple[list[Rec], dict[str, Any], dict[str, Any]]:
        listener, auth = cases[name]
        topic = topics[name]
        records = make_records(name, 30, partitions=1, null_header_values=False)
        work = tmp_path / name
        work.mkdir()
        base = {"brokers": [secure.addr(listener)], "topic": topic, **auth}
        produced = run_node(
            "produce.js", base | {"compression": "none", "messages": js_messages(records)}, work
        )
        if not produced["ok"]:
            return records, produced, {}
        consumed = run_node(
            "consume.js",
            base | {"groupId": f"g-{topic}", "expected": len(records), "timeoutMs": 30_000},
            work,
        )
        return records, produced, consumed

    with secure.usage.record("kafkajs"), ThreadPoolExecutor(len(cases)) as pool:
        results = dict(zip(cases, pool.map(round_trip, cases), strict=True))
    for name, (records, produced, consumed) in results.items():
        assert produced["ok"], (name, produced["error"], produced["stderr"][-2000:])
        assert consumed["ok"], (name, consumed["error"], consumed["stderr"][-2000:])
        ((send,),) = produced["result"]
        assert send["errorCode"] == 0 and int(send["baseOffset"]) == 0, (name, send)
        assert_partition_logs(records, js_read_records(consumed["result"]))
    log = secure.gateway_log()[log_start:]
    # the SSL listener's principal comes from the kafkajs client certificate's subject
    assert "User:kafkajs" in log
    # KIP-368: successful authentications per connection on SASL_PLAINTEXT (kafkajs
    # re-authenticates when less than its reauthenticationThreshold, 10 s, of the session is
    # left, so with a 3 s lifetime before each request)
    per_connection = Counter(
        (e["peer"], e["mechanism"])
        for e in map(json.loads, (line for line in log.splitlines() if line.startswith("{")))
        if e.get("event") == "sasl_authenticated" and e["listener"] == "SASL_PLAINTEXT"
    )
    reauthenticated = {mech for (_, mech), n in per_connection.items() if n > 1}
    assert reauthenticated == {"PLAIN", "SCRAM-SHA-256"}, per_connection


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_kafkajs_bad_credentials_refused_and_gateway_serves_others(
    secure: Secure, kafkajs_cases: KafkaJSCases, tmp_path: Path
) -> None:
    """Wrong SCRAM and PLAIN passwords and an unknown user fail with kafkajs's SASL
    authentication error, a mechanism the listener does not enable with
    UNSUPPORTED_SASL_MECHANISM, an expired or missing client certificate and a plaintext client
    on the TLS port with the connection closed; afterwards a kafkajs producer with the right
    password is served on the same listener."""
    from test_clients_kafkajs import js_messages, run_node

    cases = kafkajs_cases  # the module's listener/authentication pairs
    topic = _topic(secure, "sec-kafkajs-refused")

    def spec(name: str, **change: Any) -> dict[str, Any]:
        listener, auth = cases[name]
        return {
            "brokers": [secure.addr(listener)],
            "topic": topic,
            "compression": "none",
            "messages": js_messages(make_records("refused", 1, partitions=1)),
            **auth,
            **change,
        }

    def sasl(name: str, **change: str) -> dict[str, Any]:
        return spec(name, sasl=cases[name][1]["sasl"] | change)

    old_cert, old_key = secure.pki.client("kafkajs-expired", "/OU=clients/CN=OldJS", days=-1)
    ca = str(secure.pki.ca)
    bad = {
        "wrong-scram-512": sasl("sasl-ssl-scram-512", password="nope"),
        "wrong-scram-256": sasl("sasl-plaintext-scram-256", password="nope"),
        "wrong-plain": sasl("sasl-plaintext-plain", password="nope"),
        "unknown-user": sasl("sasl-plaintext-plain", username="mallory"),
        "unknown-mechanism": sasl("sasl-ssl-scram-512", mechanism="plain"),
        # refused at the TLS layer: kafkajs sees the connection closed (one retry, not five)
        "expired-cert": spec(
            "ssl-client-cert",
            ssl={"ca": ca, "cert": str(old_cert), "key": str(old_key)},
            retries=1,
        ),
        "no-cert": spec("ssl-client-cert", ssl={"ca": ca}, retries=1),
        "plaintext-on-tls": spec("sasl-ssl-scram-512", ssl=None, retries=1),
    }
    before = _failed_authentications(secure)

    def attempt(name: str) -> dict[str, Any]:
        work = tmp_path / name
        work.mkdir()
        return run_node("produce.js", bad[name], work, timeout=60)

    with ThreadPoolExecutor(len(bad)) as pool:
        got = dict(zip(bad, pool.map(attempt, bad), strict=True))
    for name, res in got.items():
        assert not res["ok"], name
    for name in ("wrong-scram-512", "wrong-scram-256", "wrong-plain", "unknown-user"):
        assert got[name]["error"]["name"] == "KafkaJSSASLAuthenticationError", got[name]["error"]
    assert "Invalid user credentials" in got["wrong-scram-512"]["error"]["message"]
    assert "Invalid user credentials" in got["wrong-scram-256"]["error"]["message"]
    assert "Invalid username or password" in got["wrong-plain"]["error"]["message"]
    assert "Invalid username or password" in got["unknown-user"]["error"]["message"]
    # SaslHandshake answers UNSUPPORTED_SASL_MECHANISM (33), as Kafka does
    assert got["unknown-mechanism"]["error"]["type"] == "UNSUPPORTED_SASL_MECHANISM"
    for name in ("expired-cert", "no-cert", "plaintext-on-tls"):
        error = got[name]["error"]
        assert error["name"] == "KafkaJSNumberOfRetriesExceeded", (name, error)
        assert error["message"] == "Closed connection", (name, error)
    assert "User:oldjs" not in secure.gateway_log()
    after = _failed_authentications(secure)
    failed = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert failed == {
        ("SASL_SSL", "SCRAM-SHA-512"): 1,
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"): 1,
        ("SASL_PLAINTEXT", "PLAIN"): 2,
    }
    assert "nope" not in secure.gateway_log()
    # the gateway keeps serving: the right password on the same listener
    ok = run_node("produce.js", spec("sasl-ssl-scram-512"), tmp_path)
    assert ok["ok"], (ok["error"], ok["stderr"][-2000:])


def _failed_authentications(sec: Secure) -> dict[tuple[str, str], float]:
    """The gateway's failed-authentication counters by (listener, mechanism)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    url = sec.cluster.admin_url("gateway", 0) + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    name = "kafka_server_socket_server_metrics_failed_authentication_total"
    return {
        (s.labels["listener"], s.labels["mechanism"]): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name
    }


def test_certificate_reload_without_restart(secure: Secure) -> None:
    """New server certificate files are picked up by new connections (old ones untouched)."""
    ctx = ssl.create_default_context(cafile=str(secure.pki.ca))

    def serial() -> int:
        with socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"])) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                der = s.getpeercert(binary_form=True)
        assert der is not None
        out = subprocess.run(
            ["openssl", "x509", "-inform", "DER", "-noout", "-serial"],
            input=der,
            capture_output=True,
            check=True,
        )
        return int(out.stdout.decode().strip().split("=")[1], 16)

    before = serial()
    cert, key = secure.pki.server_like("server2")
    tmp = secure.pki.server.with_suffix(".new")
    tmp.write_bytes(cert.read_bytes() + key.read_bytes())
    tmp.replace(secure.pki.server)
    deadline = time.monotonic() + 15
    while serial() == before:
        assert time.monotonic() < deadline, "certificate not reloaded"
        time.sleep(0.3)
    assert "tls_certificates_reloaded" in secure.gateway_log()


def test_configs_over_sasl_ssl_with_a_kafka_command_config_file(
    secure: Secure, tmp_path: Path
) -> None:
    """``kafka-py configs --command-config`` takes the file kafka-configs.sh takes (Java
    property names: SCRAM through sasl.jaas.config, a PEM trust store); a file it cannot use,
    or a wrong password, is one line and a non-zero exit."""
    t = _topic(secure, "cmdcfg")
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"

    def props(password: str = ALICE_PW, **more: str) -> Path:
        lines = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": f'{scram} required username="{ALICE}" password="{password}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(secure.pki.ca),
            **more,
        }
        path = tmp_path / f"client-{len(list(tmp_path.iterdir()))}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        return path

    def configs(path: Path, *args: str) -> list[str]:
        return [
            "configs", "--bootstrap-server", secure.addr("SASL_SSL"), "--command-config",
            str(path), "--request-timeout-ms", "10000", "--entity-type", "topics",
            "--entity-name", t, *args,
        ]  # fmt: skip

    good = props()
    out = cli_ok(*configs(good, "--alter", "--add-config", "retention.ms=3600000"))
    assert out == f"Completed updating config for topic {t}.\n"
    lines = cli_ok(*configs(good, "--describe")).splitlines()
    assert lines[0] == f"Dynamic configs for topic {t} are:"
    assert lines[1].startswith("  retention.ms=3600000 sensitive=false"), lines
    # the librdkafka clients of the other commands read the same file
    listed = cli_ok(
        "topics", "--bootstrap-server", secure.addr("SASL_SSL"), "--command-config", str(good),
        "list",
    )  # fmt: skip
    assert t in listed.split()
    # the file a Kafka tool reads with a JKS trust store, a wrong password, no file at all
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    bad = {
        "JKS": props(**{"ssl.truststore.type": "JKS", "ssl.truststore.location": str(jks)}),
        "password": props(password="wrong"),
        "missing": tmp_path / "none.properties",
    }
    errors = {}
    for what, path in bad.items():
        res = kafka_py(*configs(path, "--describe"), timeout=60)
        assert res.returncode != 0, (what, res.stdout)
        errors[what] = one_line(res.stderr)
    print(errors)
    assert "a JKS trust store cannot be read here" in errors["JKS"]
    assert errors["password"].startswith("error: Authentication failed at "), errors
    assert errors["missing"].startswith("error: cannot read"), errors
