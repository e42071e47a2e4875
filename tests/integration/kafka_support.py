"""Helpers shared by the real-client integration tests.

One client-independent record model (`Rec`), a deterministic record generator covering the
interesting shapes (null/empty keys and values, duplicate header keys, null header values,
explicit CreateTime timestamps, binary and large values), a strict comparison of what a client
read back against what was produced, a confluent-kafka reader used as the independent verifier,
and a raw ApiVersions v0 probe (hand-encoded, so it does not depend on the product's codec).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import re
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

if TYPE_CHECKING:
    from services.cli.local_cluster import LocalCluster

EXTERNAL_BOOTSTRAP_ENV = "KAFKAPY_ITEST_BOOTSTRAP"
ZONES = ("zone-a", "zone-b", "zone-c")
STORAGE_NODES = 3
# The harness cluster has 3 storage nodes; a single-node reference broker needs 1.
REPLICATION_FACTOR = int(os.environ.get("KAFKAPY_ITEST_REPLICATION_FACTOR", "3"))
DEFAULT_PARTITIONS = 3
# num.partitions of the harness cluster (Kafka's default is 1; a distinct value proves that
# auto-created topics really take the setting).
NUM_PARTITIONS = 2

Header = tuple[str, bytes | None]
_topic_seq = itertools.count()
CREATE_TIME = 0  # timestamp type as Kafka numbers it (1 = LogAppendTime)
BIG_VALUE_BYTES = 100 * 1024


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as any client sees it (offset excluded: it is checked separately)."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int


@dataclass(frozen=True, slots=True)
class ReadRecord:
    """One record as read back: where it sits and what its timestamp type was."""

    offset: int
    timestamp_type: int
    rec: Rec


def now_ms() -> int:
    return int(time.time() * 1000)


def _headers(i: int, null_header_values: bool) -> tuple[Header, ...]:
    match i % 5:
        case 0:
            return ()
        case 1:
            return (("trace-id", f"t-{i}".encode()),)
        case 2:  # duplicate keys keep their order; an empty (non-null) value
            return (("dup", b"first"), ("dup", b"second"), ("empty", b""))
        case 3:
            return (("nullable", None if null_header_values else b"-"), ("dup", b"x"))
        case _:
            return (("bin", bytes(range(256))[i % 7 :]), ("ключ", "wert-ü".encode()))


def make_records(
    tag: str,
    count: int,
    partitions: int = 3,
    *,
    base_ts: int | None = None,
    headers: bool = True,
    null_header_values: bool = True,
    null_key_and_value: bool = True,
    big_values: bool = True,
) -> list[Rec]:
    """``count`` records spread round-robin over ``partitions``; deterministic for a tag.

    Shapes: null keys (i%7==0), empty keys (i%19==4), null values (i%13==5; with i%7==0 both
    are null unless ``null_key_and_value`` is off), empty values (i%17==3), binary values of
    0..~1 KiB, a 100 KiB value every 1000 records, five header patterns, and explicit
    CreateTime timestamps one hour in the past, 1 ms apart.
    """
    rnd = random.Random(tag)
    ts0 = (now_ms() - 3_600_000) if base_ts is None else base_ts
    out: list[Rec] = []
    for i in range(count):
        key: bytes | None = f"{tag}-key-{i}".encode()
        if i % 7 == 0:
            key = None
        elif i % 19 == 4:
            key = b""
        value: bytes | None
        if i % 13 == 5:
            value = None
        elif i % 17 == 3:
            value = b""
        elif big_values and i % 1000 == 999:
            value = f"{tag}:{i}:".encode() + rnd.randbytes(BIG_VALUE_BYTES)
        else:
            value = f"{tag}:{i}:".encode() + rnd.randbytes((i * 37) % 1000)
        if key is None and value is None and not null_key_and_value:
            key = f"{tag}-both-null-{i}".encode()
        hdrs = _headers(i, null_header_values) if headers else ()
        out.append(Rec(i % partitions, key, value, hdrs, ts0 + i))
    return out


def make_text_records(tag: str, count: int, partition: int, *, first_index: int = 0) -> list[Rec]:
    """Printable records for line-oriented tools (kcat): no ':', '|', ',' or newlines.

    Null keys (i%7==0) and null values (i%13==5) are both expressible with ``kcat -Z``.
    Timestamps are left 0: the tool stamps the records itself.
    """
    out: list[Rec] = []
    for i in range(first_index, first_index + count):
        key = None if i % 7 == 0 else f"{tag}-k{i}".encode()
        value = None if i % 13 == 5 else (f"{tag}-v{i}-" + "abcdefghij" * (i % 50)).encode()
        out.append(Rec(partition, key, value, (), 0))
    return out


def by_partition(records: Iterable[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = defaultdict(list)
    for r in records:
        out[r.partition].append(r)
    return dict(out)


def _describe(r: Rec | None) -> str:
    if r is None:
        return "<missing>"

    def short(b: bytes | None) -> str:
        if b is None:
            return "null"
        return repr(b[:40]) + (f"...({len(b)} bytes)" if len(b) > 40 else "")

    hdrs = [(k, short(v)) for k, v in r.headers]
    return (
        f"p{r.partition} key={short(r.key)} value={short(r.value)} headers={hdrs} ts={r.timestamp}"
    )


def assert_partition_logs(
    expected: Sequence[Rec],
    got: Mapping[int, Sequence[ReadRecord]],
    *,
    check_timestamps: bool = True,
    timestamp_range: tuple[int, int] | None = None,
) -> None:
    """Each partition holds exactly the expected records, in produce order, at offsets 0..n-1.

    With ``check_timestamps`` the CreateTime timestamps must match exactly; with
    ``timestamp_range`` (tools that stamp records themselves) they must fall in that range.
    """
    want = by_partition(expected)
    stray = {p: len(rs) for p, rs in got.items() if rs and p not in want}
    assert not stray, f"records in partitions that should be empty: {stray}"
    for p, recs in sorted(want.items()):
        read = list(got.get(p, ()))
        offsets = [r.offset for r in read]
        assert offsets == list(range(len(read))), (
            f"partition {p}: offsets are not 0..{len(read) - 1}: first bad at "
            f"{next((i for i, o in enumerate(offsets) if o != i), None)}"
        )
        for i, rr in enumerate(read):
            assert rr.timestamp_type == CREATE_TIME, f"p{p}@{i}: timestamp type {rr.timestamp_type}"
            if timestamp_range is not None:
                lo, hi = timestamp_range
                assert lo <= rr.rec.timestamp <= hi, (
                    f"p{p}@{i}: timestamp {rr.rec.timestamp} outside [{lo}, {hi}]"
                )
        if check_timestamps:
            actual = [rr.rec for rr in read]
        else:
            actual = [Rec(r.rec.partition, r.rec.key, r.rec.value, r.rec.headers, 0) for r in read]
            recs = [Rec(r.partition, r.key, r.value, r.headers, 0) for r in recs]
        if actual != recs:
            n = min(len(actual), len(recs))
            first = next((i for i in range(n) if actual[i] != recs[i]), n)
            want_rec = recs[first] if first < len(recs) else None
            got_rec = actual[first] if first < len(actual) else None
            raise AssertionError(
                f"partition {p}: read {len(actual)} records, expected {len(recs)}; first "
                f"difference at offset {first}:\n  expected {_describe(want_rec)}"
                f"\n  got      {_describe(got_rec)}"
            )


def confluent_read_record(msg: object) -> ReadRecord:
    """A confluent_kafka Message -> ReadRecord."""
    ts_type, ts = msg.timestamp()  # type: ignore[attr-defined]
    # confluent reports TIMESTAMP_CREATE_TIME=1, TIMESTAMP_LOG_APPEND_TIME=2
    kafka_ts_type = {1: 0, 2: 1}.get(ts_type, -1)
    hdrs = tuple(msg.headers() or ())  # type: ignore[attr-defined]
    rec = Rec(msg.partition(), msg.key(), msg.value(), hdrs, ts)  # type: ignore[attr-defined]
    return ReadRecord(msg.offset(), kafka_ts_type, rec)  # type: ignore[attr-defined]


def consume_confluent(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int],
    expected_count: int,
    *,
    timeout: float = 60.0,
    extra_config: Mapping[str, object] | None = None,
) -> dict[int, list[ReadRecord]]:
    """Read every partition from the beginning to its end with assign() (no group protocol).

    Stops when every partition reported EOF after at least ``expected_count`` records were
    read in total; fails on any consumer error or on timeout.
    """
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"verifier-{topic}",  # required by the binding; no group protocol is used
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
    }
    conf.update(extra_config or {})
    consumer = Consumer(conf)
    out: dict[int, list[ReadRecord]] = {p: [] for p in partitions}
    eof: set[int] = set()
    total = 0
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout
        while not (total >= expected_count and eof >= set(partitions)):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"read {total}/{expected_count} records from {topic} within {timeout}s; "
                    f"partitions at EOF: {sorted(eof)}"
                )
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                part = msg.partition()
                assert part is not None, f"message without partition: {err}"
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof.add(part)
                        continue
                    raise AssertionError(f"consumer error on {topic}: {err}")
                eof.discard(part)
                out[part].append(confluent_read_record(msg))
                total += 1
    finally:
        consumer.close()
    return out


# ---- raw protocol probe (hand-encoded ApiVersions v0, independent of the product's codec) ----


def read_frame(sock: socket.socket, timeout: float = 10.0) -> bytes | None:
    """One size-prefixed response, or None when the server closed the connection."""
    sock.settimeout(timeout)
    head = _read_exact(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    body = _read_exact(sock, size)
    if body is None:
        raise AssertionError(f"connection closed inside a {size}-byte response")
    return body


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return None if not buf else bytes(buf)
        buf += chunk
    return bytes(buf)


def request_header_v1(api_key: int, version: int, correlation_id: int, client_id: str) -> bytes:
    cid = client_id.encode()
    return struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid


def api_versions(host: str, port: int, version: int = 0) -> dict[int, tuple[int, int]]:
    """ApiVersions over a fresh connection: {api_key: (min, max)}. Uses v0 framing for v0;
    any other version is sent with a v0 body (empty) — the KIP-511 fallback answers it."""
    with socket.create_connection((host, port), timeout=10) as s:
        body = request_header_v1(18, version, 7, "probe")
        s.sendall(struct.pack(">i", len(body)) + body)
        resp = read_frame(s)
    assert resp is not None, "server closed the connection on ApiVersions"
    corr, err, n = struct.unpack_from(">ihi", resp, 0)
    assert corr == 7
    assert err == 0, f"ApiVersions error {err}"
    out: dict[int, tuple[int, int]] = {}
    for i in range(n):
        k, lo, hi = struct.unpack_from(">hhh", resp, 10 + 6 * i)
        out[k] = (lo, hi)
    return out


def split_bootstrap(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    return host, int(port)


class RawClient:
    """One connection; requests encoded with the product codec (top-level fields left out
    take their defaults), answers read in order. :meth:`authenticate` logs it in with SASL
    (PLAIN or SCRAM) in KIP-152 framing."""

    def __init__(self, bootstrap: str, client_id: str = "raw-it") -> None:
        self.sock = socket.create_connection(split_bootstrap(bootstrap), timeout=10)
        self.corr = 0
        self.client_id = client_id

    def close(self) -> None:
        self.sock.close()

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> int:
        from services.common.protocol import default_dict, encode_request, message_spec

        self.corr += 1
        defaults = default_dict(message_spec(int(api_key), version, "request"))
        assert set(body) <= set(defaults), f"not fields of the request: {set(body) - set(defaults)}"
        full = {**defaults, **body}
        try:
            self.sock.sendall(
                encode_request(int(api_key), version, self.corr, self.client_id, full)
            )
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may close before it has read everything: that is a close too
        return self.corr

    def recv(self, api_key: int, version: int, corr: int) -> dict[str, Any]:
        from services.common.protocol import decode_response

        frame = read_frame(self.sock)
        assert frame is not None, f"connection closed waiting for api {int(api_key)} {corr}"
        got, body = decode_response(int(api_key), version, frame)
        assert got == corr, f"response for correlation id {got}, expected {corr}"
        return body

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return self.recv(api_key, version, self.send(api_key, version, body))

    def authenticate(self, mechanism: str, user: str, password: str) -> None:
        """SaslHandshake v1 + SaslAuthenticate v2 (PLAIN or SCRAM) by the CLI's client side
        (services/cli/wire_security.py); raises CliError when refused."""
        from services.cli.wire_security import WireSecurity

        sec = WireSecurity("SASL_PLAINTEXT", mechanism, user, password)
        sec.authenticate(self.call, "the gateway")


def produce_confluent(
    bootstrap: str,
    topic: str,
    records: Sequence[Rec],
    *,
    config: Mapping[str, object] | None = None,
    timeout: float = 60.0,
) -> list[tuple[int, int]]:
    """Produce ``records`` with an idempotent confluent-kafka Producer; every delivery must
    succeed. Returns (partition, offset) per record, in produce order."""
    from confluent_kafka import Producer

    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
    }
    conf.update(config or {})
    producer = Producer(conf)
    results: list[tuple[int, int] | None] = [None] * len(records)
    errors: list[str] = []

    def on_delivery(index: int):  # noqa: ANN202 - closure factory
        def cb(err: KafkaError | None, msg: object) -> None:
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                results[index] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

        return cb

    for i, r in enumerate(records):
        while True:
            try:
                producer.produce(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    timestamp=r.timestamp,
                    headers=list(r.headers) or None,
                    on_delivery=on_delivery(i),
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(timeout)
    assert remaining == 0, f"{remaining} records not delivered within {timeout}s"
    assert not errors, f"{len(errors)} delivery errors, first: {errors[:3]}"
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def assert_delivery_offsets(records: Sequence[Rec], delivered: Sequence[tuple[int, int]]) -> None:
    """Acknowledged offsets are 0..n-1 per partition, in produce order."""
    per_part: dict[int, list[int]] = defaultdict(list)
    for r, (p, off) in zip(records, delivered, strict=True):
        assert p == r.partition, f"record for partition {r.partition} acknowledged on {p}"
        per_part[p].append(off)
    for p, offs in per_part.items():
        assert offs == list(range(len(offs))), f"partition {p}: acknowledged offsets {offs[:10]}..."


# ---- topics ----


class TopicFactory(Protocol):
    def __call__(
        self,
        partitions: int = DEFAULT_PARTITIONS,
        *,
        config: dict[str, str] | None = None,
        replication_factor: int = REPLICATION_FACTOR,
        prefix: str | None = None,
    ) -> str: ...


def unique_topic_name(hint: str) -> str:
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", hint).strip("-.")[:60] or "t"
    return f"it-{base}-{next(_topic_seq)}-{uuid.uuid4().hex[:6]}"


def gateway_requests(cluster: Any, request: str, gateway: int = 0) -> dict[int, int]:
    """Requests of one API that a gateway (index) of a ``LocalCluster`` has served:
    {version: count}."""
    with urllib.request.urlopen(cluster.admin_url("gateway", gateway) + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[int, int] = {}
    for labels, value in re.findall(
        r"kafka_network_requestmetrics_requests_total\{([^}]*)\} (\S+)", text
    ):
        version = re.search(r'version="(\d+)"', labels)
        if f'request="{request}"' in labels and version:
            out[int(version.group(1))] = int(float(value))
    return out


def wait_for(
    what: str, cond: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1
) -> Any:
    """Poll ``cond`` until it returns something truthy (returned); AssertionError naming
    ``what`` and the last value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def wait_for_topic(admin: Any, name: str, partitions: int, timeout: float = 30.0) -> None:
    """Until Metadata shows ``name`` with ``partitions`` partitions, each with a leader."""
    deadline = time.monotonic() + timeout
    last = "no metadata"
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=10)
        t = md.topics.get(name)
        if t is None:
            last = "topic missing"
        elif t.error is not None:
            last = f"topic error {t.error}"
        elif len(t.partitions) != partitions:
            last = f"{len(t.partitions)} partitions"
        elif any(p.leader < 0 or p.error is not None for p in t.partitions.values()):
            last = "partitions without leader: " + ", ".join(
                f"{p.id}:{p.leader}/{p.error}"
                for p in t.partitions.values()
                if p.leader < 0 or p.error is not None
            )
        else:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} not ready within {timeout}s: {last}")


def wait_for_topic_gone(admin: Any, name: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if name not in admin.list_topics(timeout=10).topics:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} still listed {timeout}s after deletion")


# ---- which APIs each client used (for docs/compatibility.md) ----


class ApiUsage:
    """Attributes the gateway's per-API request counters to the client active in a phase.

    Scrapes ``kafka_network_requestmetrics_requests_total{request,version}`` from the gateway's
    /metrics before and after ``with usage.record(client):`` and adds the difference to that
    client. Tests run one client phase at a time, so the deltas belong to that client (plus the
    session's idle AdminClient, which only refreshes Metadata). Without a metrics URL (external
    broker) it records nothing.
    """

    METRIC = "kafka_network_requestmetrics_requests"

    def __init__(self, metrics_url: str | None) -> None:
        self.metrics_url = metrics_url
        self.used: dict[str, dict[str, set[int]]] = {}

    def snapshot(self) -> dict[tuple[str, int], float] | None:
        """The gateway's request counters, or None when they cannot be read (never raises:
        a failed scrape must not hide the test's own outcome)."""
        if self.metrics_url is None:
            return None
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        try:
            with urllib.request.urlopen(self.metrics_url, timeout=10) as resp:
                text = resp.read().decode()
        except OSError:
            return None
        out: dict[tuple[str, int], float] = {}
        for fam in text_string_to_metric_families(text):
            if fam.name != self.METRIC:
                continue
            for s in fam.samples:
                if s.name.endswith("_total"):
                    out[(s.labels["request"], int(s.labels["version"]))] = s.value
        return out

    @contextlib.contextmanager
    def record(self, client: str) -> Iterator[None]:
        before = self.snapshot()
        try:
            yield
        finally:
            after = self.snapshot()
            if before is not None and after is not None:
                for key, value in after.items():
                    if value > before.get(key, 0.0):
                        self.used.setdefault(client, {}).setdefault(key[0], set()).add(key[1])

    def as_json(self) -> dict[str, dict[str, list[int]]]:
        return {
            c: {api: sorted(vs) for api, vs in sorted(apis.items())}
            for c, apis in sorted(self.used.items())
        }


class Recorded:
    """Proxy that runs every method call of ``target`` inside ``usage.record(client)``."""

    def __init__(self, target: Any, usage: ApiUsage, client: str) -> None:
        self._target, self._usage, self._client = target, usage, client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._usage.record(self._client):
                return attr(*args, **kwargs)

        return call


# ---- the kafka-py command as its own process ----------------------------------------------


def kafka_py(
    *args: str, stdin: bytes | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m services.cli ARGS`` (what the ``kafka-py`` console script runs)."""
    proc = subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
    )
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    )


def cli_ok(*args: str, stdin: bytes | None = None, timeout: float = 60.0) -> str:
    """stdout of a kafka-py command that must succeed without a traceback."""
    res = kafka_py(*args, stdin=stdin, timeout=timeout)
    assert res.returncode == 0, f"{args}: exit {res.returncode}\n{res.stderr}"
    assert "Traceback" not in res.stderr
    return res.stdout


def one_line(text: str) -> str:
    """The only line of ``text`` (an error message of the CLI)."""
    lines = text.splitlines()
    assert len(lines) == 1, text
    return lines[0]


def zk_partition_state(zk_connect: str, topic: str, partition: int) -> dict[str, Any]:
    """``/brokers/topics/<t>/partitions/<p>/state`` as the controller wrote it, read with a
    kazoo client of its own (the storage leader, leader epoch and ISR)."""
    import json

    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zk_connect, timeout=10)
    zk.start(timeout=10)
    try:
        data, _ = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    finally:
        zk.stop()
        zk.close()
    state: dict[str, Any] = json.loads(data)
    return state


def shard_owner(zk: Any, group: str, kind: Any = None) -> tuple[int, int, int]:
    """(``__consumer_offsets`` partition, owning coordinator, shard epoch) of ``group``, from
    the controller's shard map in ZooKeeper (``zk``: a started KazooClient); ``kind``
    ``layout.TRANSACTION``: the same for a transactional id and ``__transaction_state``."""
    from services.common.zk.layout import GROUP, ShardMap, shard_of

    data, _ = zk.get((kind or GROUP).shards)
    shard_map = ShardMap.from_json(data)
    p = shard_of(group, shard_map.partitions)
    owner = shard_map.shards[p]
    return p, owner.owner, owner.epoch


def commit_retrying(c: Consumer, timeout: float) -> float:
    """Commit synchronously until it succeeds (retriable and coordinator errors are retried);
    returns how long it took."""
    started = time.monotonic()
    while True:
        try:
            c.commit(asynchronous=False)
            return time.monotonic() - started
        except KafkaException as exc:
            err = exc.args[0]
            assert err.retriable() or err.code() in (
                KafkaError.NOT_COORDINATOR,
                KafkaError.COORDINATOR_NOT_AVAILABLE,
                KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                KafkaError._WAIT_COORD,
                KafkaError.REQUEST_TIMED_OUT,
                KafkaError._TIMED_OUT,
            ), f"commit failed for good: {err}"
            assert time.monotonic() - started < timeout, f"no commit within {timeout}s: {err}"
            c.poll(0.2)


@contextlib.contextmanager
def running_cluster(
    tmp_path: Path, *, start_timeout: float = 90.0, **options: Any
) -> Iterator[LocalCluster]:
    """A started LocalCluster in ``tmp_path/cluster`` on free ports (``gateway_port`` and
    ``zk_port`` default to 0), stopped on leaving, whatever happened. ``options`` are
    LocalCluster's keyword arguments."""
    from services.cli.local_cluster import LocalCluster

    options.setdefault("gateway_port", 0)
    options.setdefault("zk_port", 0)
    cluster = LocalCluster(tmp_path / "cluster", **options)
    try:
        cluster.start(timeout=start_timeout)
        yield cluster
    finally:
        cluster.stop()


#: A gateway with one SASL_PLAINTEXT (PLAIN) listener, Kafka's ACL authorizer on and ``admin``
#: (password ADMIN_PASSWORD) as its super user: the ACL tests' cluster
ADMIN_PASSWORD = "admin-secret"
ACL_GATEWAY_FLAGS = [
    "--listener.security.protocol.map", "PLAINTEXT:SASL_PLAINTEXT",
    "--listener.name.plaintext.plain.sasl.jaas.config",
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="admin" password="{ADMIN_PASSWORD}" user_admin="{ADMIN_PASSWORD}";',
    "--authorizer.class.name", "kafka.security.authorizer.AclAuthorizer",
    "--super.users", "User:admin",
]  # fmt: skip
