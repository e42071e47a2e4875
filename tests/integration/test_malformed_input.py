"""Malformed input on raw sockets to the gateway, while a well-behaved producer keeps working.

Table-driven: each case opens its own connection, sends something broken and checks what Kafka
does (close the connection, or answer with an error). Throughout, a confluent-kafka producer in a
thread produces to its own topic; every one of its records must be acknowledged and readable
afterwards, and the gateway process must still be running at the end.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_support import (
    RawClient,
    Rec,
    TopicFactory,
    assert_partition_logs,
    consume_confluent,
    read_frame,
    request_header_v1,
    split_bootstrap,
)

from services.cli.local_cluster import LocalCluster
from services.common.errors import ErrorCode
from services.common.protocol import (
    ApiKey,
    decode_response,
    encode_request,
)
from services.common.records.record import Record, build_batch, iter_batch_records

pytestmark = pytest.mark.integration

SOCKET_REQUEST_MAX_BYTES = 104_857_600
CLOSE_WAIT_S = 10.0


@dataclass
class Outcome:
    closed: bool  # the server closed the connection without answering
    frame: bytes | None  # the response frame (without size) when it answered


def _await_outcome(sock: socket.socket) -> Outcome:
    try:
        frame = read_frame(sock, timeout=CLOSE_WAIT_S)
    except TimeoutError:
        raise AssertionError(
            f"the server neither answered nor closed within {CLOSE_WAIT_S}s"
        ) from None
    return Outcome(closed=frame is None, frame=frame)


def _send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may close before it has read everything: that is a close too


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# ---- the cases: each returns what happened on its own connection ----


def case_truncated_frame(sock: socket.socket) -> Outcome:
    """Size says 100, 10 bytes follow, then the client half-closes."""
    _send(sock, struct.pack(">i", 100) + request_header_v1(18, 0, 1, "x")[:10])
    sock.shutdown(socket.SHUT_WR)
    return _await_outcome(sock)


def case_negative_size(sock: socket.socket) -> Outcome:
    _send(sock, struct.pack(">i", -1) + b"\x00" * 16)
    return _await_outcome(sock)


def case_zero_size(sock: socket.socket) -> Outcome:
    _send(sock, struct.pack(">i", 0))
    return _await_outcome(sock)


def case_huge_size(sock: socket.socket) -> Outcome:
    """A size above socket.request.max.bytes: closed without waiting for the body."""
    _send(sock, struct.pack(">i", SOCKET_REQUEST_MAX_BYTES + 1) + b"\x00" * 64)
    return _await_outcome(sock)


def case_unknown_api_key(sock: socket.socket) -> Outcome:
    _send(sock, _frame(request_header_v1(9999, 0, 5, "x")))
    return _await_outcome(sock)


def case_metadata_v99(sock: socket.socket) -> Outcome:
    _send(sock, _frame(request_header_v1(int(ApiKey.METADATA), 99, 6, "x") + b"\x00" * 8))
    return _await_outcome(sock)


def case_header_then_garbage(sock: socket.socket) -> Outcome:
    """A valid Metadata v1 header followed by bytes that are no Metadata body."""
    body = b"\x7f\xff\xff\xff" + b"\xab" * 40  # topic array count 2^31-1, then junk
    _send(sock, _frame(request_header_v1(int(ApiKey.METADATA), 1, 7, "x") + body))
    return _await_outcome(sock)


def case_all_garbage(sock: socket.socket) -> Outcome:
    _send(sock, _frame(b"\xff" * 64))
    return _await_outcome(sock)


def case_client_id_past_frame(sock: socket.socket) -> Outcome:
    """The client_id length points past the end of the frame."""
    _send(sock, _frame(struct.pack(">hhih", int(ApiKey.API_VERSIONS), 0, 8, 500) + b"abc"))
    return _await_outcome(sock)


def expect_closed(o: Outcome) -> None:
    assert o.closed, f"expected the server to close the connection, got a response {o.frame!r:.200}"


def expect_closed_or_unsupported(o: Outcome) -> None:
    """Kafka closes on a request version it cannot parse; an UNSUPPORTED_VERSION answer (error 35
    right after the correlation id) is accepted too."""
    if o.closed:
        return
    assert o.frame is not None
    corr, err = struct.unpack_from(">ih", o.frame, 0)
    assert corr == 6 and err == ErrorCode.UNSUPPORTED_VERSION, (corr, err, o.frame[:64])


CASES: list[tuple[str, Callable[[socket.socket], Outcome], Callable[[Outcome], None]]] = [
    ("truncated-frame", case_truncated_frame, expect_closed),
    ("negative-size", case_negative_size, expect_closed),
    ("zero-size", case_zero_size, expect_closed),
    ("huge-size", case_huge_size, expect_closed),
    ("unknown-api-key", case_unknown_api_key, expect_closed),
    ("metadata-v99", case_metadata_v99, expect_closed_or_unsupported),
    ("header-then-garbage", case_header_then_garbage, expect_closed),
    ("all-garbage", case_all_garbage, expect_closed),
    ("client-id-past-frame", case_client_id_past_frame, expect_closed),
]


class BackgroundProducer:
    """A confluent-kafka producer in a thread, producing steadily until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.records: list[Rec] = []
        self.acked = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 60000,
            }
        )
        self._thread = threading.Thread(target=self._run, name="bg-producer", daemon=True)

    def _on_delivery(self, err: object, msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked += 1

    def _run(self) -> None:
        i = 0
        base = int(time.time() * 1000)
        while not self._stop.is_set():
            r = Rec(
                i % 3,
                f"bg-{i}".encode(),
                f"background-{i}".encode() * 3,
                (("seq", str(i).encode()),),
                base + i,
            )
            self._producer.produce(
                self.topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp=r.timestamp,
                headers=list(r.headers),
                on_delivery=self._on_delivery,
            )
            self.records.append(r)
            i += 1
            self._producer.poll(0.005)

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop producing and wait for every outstanding acknowledgement."""
        self._stop.set()
        self._thread.join(10)
        remaining = self._producer.flush(60)
        assert remaining == 0, f"{remaining} background records not delivered"

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def background(bootstrap: str, topic: TopicFactory) -> Iterator[BackgroundProducer]:
    with BackgroundProducer(bootstrap, topic()) as bg:
        time.sleep(0.3)  # producing before the first malformed request
        yield bg


def _connect(bootstrap: str) -> socket.socket:
    return socket.create_connection(split_bootstrap(bootstrap), timeout=10)


def _api_versions_ok(sock: socket.socket, corr: int) -> None:
    _send(sock, _frame(request_header_v1(int(ApiKey.API_VERSIONS), 0, corr, "x")))
    frame = read_frame(sock)
    assert frame is not None, "connection closed on a valid ApiVersions v0"
    c, err, n = struct.unpack_from(">ihi", frame, 0)
    assert (c, err) == (corr, 0) and n > 0


def _corrupt_produce(sock: socket.socket, topic: str, version: int, corr: int) -> dict:
    batch = bytearray(
        build_batch(
            [
                Record(timestamp=1_700_000_000_000 + i, key=b"k", value=b"corrupt-me-%d" % i)
                for i in range(5)
            ]
        )
    )
    batch[-3] ^= 0xFF  # a record byte: the header stays valid, the CRC32C no longer matches
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}],
    }
    _send(sock, encode_request(int(ApiKey.PRODUCE), version, corr, "malformed", body))
    frame = read_frame(sock)
    assert frame is not None, "connection closed on a Produce with a corrupt batch"
    got_corr, resp = decode_response(int(ApiKey.PRODUCE), version, frame)
    assert got_corr == corr
    return resp


def test_malformed_input(
    cluster: LocalCluster, bootstrap: str, topic: TopicFactory, background: BackgroundProducer
) -> None:
    failures: list[str] = []
    for name, run, check in CASES:
        with _connect(bootstrap) as sock:
            try:
                check(run(sock))
            except AssertionError as exc:
                failures.append(f"{name}: {exc}")
        # the gateway still accepts and answers a well-formed request after each case
        with _connect(bootstrap) as sock:
            _api_versions_ok(sock, 1000)

    # ApiVersions v99: KIP-511 answer in v0 format with error 35 and our ranges; stays open
    with _connect(bootstrap) as sock:
        _send(sock, _frame(request_header_v1(int(ApiKey.API_VERSIONS), 99, 42, "x")))
        frame = read_frame(sock)
        assert frame is not None, "connection closed on ApiVersions v99 (KIP-511 wants an answer)"
        corr, err, n = struct.unpack_from(">ihi", frame, 0)
        assert corr == 42 and err == ErrorCode.UNSUPPORTED_VERSION, (corr, err)
        keys = {
            struct.unpack_from(">hhh", frame, 10 + 6 * i)[0]: struct.unpack_from(
                ">hhh", frame, 10 + 6 * i
            )[1:]
            for i in range(n)
        }
        assert int(ApiKey.API_VERSIONS) in keys and int(ApiKey.PRODUCE) in keys, keys
        assert len(frame) == 10 + 6 * n, "a v0 body has no throttle time or tagged fields"
        _api_versions_ok(sock, 43)

    # Produce with a corrupted batch CRC: per-partition CORRUPT_MESSAGE, connection stays open
    target = topic()
    with _connect(bootstrap) as sock:
        for i, version in enumerate((3, 9)):
            resp = _corrupt_produce(sock, target, version, 50 + i)
            (t,) = resp["responses"]
            (p,) = t["partition_responses"]
            assert (t["name"], p["index"]) == (target, 0)
            assert p["error_code"] == ErrorCode.CORRUPT_MESSAGE, p
        _api_versions_ok(sock, 60)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm-probe"})
    try:
        assert c.get_watermark_offsets(TopicPartition(target, 0), timeout=10) == (0, 0)
    finally:
        c.close()

    assert not failures, "\n".join(failures)

    # the gateway process survived everything
    assert "gateway-0" in cluster.pids(), f"gateway not running: exited {cluster.exited()}"
    assert "gateway-0" not in cluster.exited()

    # the well-behaved producer was never disturbed: all acknowledged, all readable
    background.stop()
    assert not background.errors, background.errors[:5]
    produced = background.records
    assert len(produced) > 50, f"background producer made only {len(produced)} records"
    assert background.acked == len(produced)
    got = consume_confluent(bootstrap, background.topic, [0, 1, 2], len(produced))
    assert_partition_logs(produced, got)


# ---- well-formed but wrong: Kafka's per-partition answers on raw Produce/Fetch ----


def _produce_body(topic: str, partition: int, records: bytes | None, acks: int = -1) -> dict:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout": 10000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


def _partition_result(resp: dict) -> dict:
    (t,) = resp["responses"]
    (p,) = t["partition_responses"]
    return p


def _batch(pid: int, epoch: int, seq: int, n: int, tag: str) -> bytes:
    return build_batch(
        [
            Record(
                timestamp=1_700_000_000_000 + i,
                key=f"{tag}{i}".encode(),
                value=f"{tag}-value-{i}".encode(),
            )
            for i in range(n)
        ],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def _fetch_body(topic: str, partition: int, offset: int) -> dict:
    return {
        "replica_id": -1,
        "max_wait": 100,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def test_raw_produce_and_fetch_semantics(bootstrap: str, topic: TopicFactory) -> None:
    """Idempotent dedup and sequence checks, unknown partition/topic, invalid acks, acks=0
    (no response, order kept), Fetch contents, high watermark and OFFSET_OUT_OF_RANGE."""
    name = topic()
    c = RawClient(bootstrap)
    try:
        pid_resp = c.call(
            ApiKey.INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": None,
                "transaction_timeout": 60000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        assert pid_resp["error_code"] == 0 and pid_resp["producer_id"] >= 0, pid_resp
        pid, epoch = pid_resp["producer_id"], pid_resp["producer_epoch"]

        first = _batch(pid, epoch, 0, 3, "a")
        p = _partition_result(c.call(ApiKey.PRODUCE, 9, _produce_body(name, 0, first)))
        assert (p["error_code"], p["base_offset"]) == (0, 0), p
        # the same batch again: a duplicate, acknowledged with the original offset, not appended
        p = _partition_result(c.call(ApiKey.PRODUCE, 9, _produce_body(name, 0, first)))
        assert (p["error_code"], p["base_offset"]) == (0, 0), p
        p = _partition_result(
            c.call(ApiKey.PRODUCE, 9, _produce_body(name, 0, _batch(pid, epoch, 3, 2, "b")))
        )
        assert (p["error_code"], p["base_offset"]) == (0, 3), p
        # a gap in the sequence
        p = _partition_result(
            c.call(ApiKey.PRODUCE, 9, _produce_body(name, 0, _batch(pid, epoch, 10, 1, "c")))
        )
        assert p["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, p

        plain = build_batch([Record(timestamp=1_700_000_000_000, key=b"k", value=b"v")])
        p = _partition_result(c.call(ApiKey.PRODUCE, 9, _produce_body(name, 99, plain)))
        assert p["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, p
        p = _partition_result(c.call(ApiKey.PRODUCE, 9, _produce_body(name + "-missing", 0, plain)))
        assert p["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, p
        resp = c.call(ApiKey.PRODUCE, 9, _produce_body(name, 1, plain, acks=2))
        assert _partition_result(resp)["error_code"] == ErrorCode.INVALID_REQUIRED_ACKS, resp

        # acks=0: no response at all; the next request's answer is the next thing on the wire
        c.send(ApiKey.PRODUCE, 9, _produce_body(name, 2, plain, acks=0))
        corr = c.send(
            ApiKey.API_VERSIONS,
            3,
            {"client_software_name": "raw-it", "client_software_version": "1"},
        )
        assert c.recv(ApiKey.API_VERSIONS, 3, corr)["error_code"] == 0

        # Fetch returns exactly the 5 appended records (the duplicate was not written)
        resp = c.call(ApiKey.FETCH, 12, _fetch_body(name, 0, 0))
        (t,) = resp["responses"]
        (fp,) = t["partitions"]
        assert fp["error_code"] == 0 and fp["high_watermark"] == 5, fp
        got = [(r.offset, r.key, r.value) for _, r in iter_batch_records(fp["records"] or b"")]
        want = [(i, f"a{i}".encode(), f"a-value-{i}".encode()) for i in range(3)] + [
            (3 + i, f"b{i}".encode(), f"b-value-{i}".encode()) for i in range(2)
        ]
        assert got == want, got
        # the acks=0 record reached partition 2 (its high watermark moves once replicated)
        deadline = time.monotonic() + 10
        while True:
            fp = c.call(ApiKey.FETCH, 12, _fetch_body(name, 2, 0))["responses"][0]["partitions"][0]
            if fp["high_watermark"] == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert fp["error_code"] == 0 and fp["high_watermark"] == 1, fp
        assert [r.value for _, r in iter_batch_records(fp["records"] or b"")] == [b"v"]
        # beyond the log end
        resp = c.call(ApiKey.FETCH, 12, _fetch_body(name, 0, 1000))
        fp = resp["responses"][0]["partitions"][0]
        assert fp["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE, fp
    finally:
        c.close()
