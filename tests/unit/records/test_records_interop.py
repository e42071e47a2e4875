"""Our batches against other implementations of the v2 format, in both directions.

- aiokafka's and kafka-python's record builders/readers (in-process);
- librdkafka (confluent-kafka) through its built-in mock cluster, which listens on 127.0.0.1:
  batches a real producer wrote are fetched raw and decoded by us, and batches we built are
  produced raw and read back by a real librdkafka consumer (with check.crcs).
"""

from __future__ import annotations

import socket
import struct
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder

from services.common.records.batch import crc_ok, iter_headers, parse_header, validate_batches
from services.common.records.compression import Codec
from services.common.records.record import (
    Record,
    build_batch,
    iter_records,
    parse_end_txn_marker,
)

with warnings.catch_warnings():  # kafka-python's import-time DeprecationWarnings
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch as KpBatch
    from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

T0 = 1_700_000_000_000
ALL_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
KP_CODECS = [Codec.NONE, Codec.GZIP]  # kafka-python here has no snappy/lz4/zstd module


def sample() -> list[Record]:
    return [
        Record(
            timestamp=T0 + i,
            key=None if i == 0 else b"key-%d" % i,
            value=None if i == 3 else b"compressible value %d " % i * 30,
            headers=[("h1", b"one"), ("h2", None)] if i % 2 else [],
        )
        for i in range(8)
    ]


def as_tuples(records: list[Record]) -> list[tuple[object, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def foreign_tuples(batch: Iterable[Any]) -> list[tuple[object, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


@pytest.mark.parametrize(
    ("builder", "codec"),
    [(AioBuilder, c) for c in ALL_CODECS] + [(KpBuilder, c) for c in KP_CODECS],
)
def test_we_decode_their_batches(builder: type, codec: int) -> None:
    b = builder(2, codec, 0, 1000, 2, 17, 1 << 20)
    for i, r in enumerate(sample()):
        b.append(i, r.timestamp, r.key, r.value, r.headers)
    raw = bytes(b.build())
    [header] = validate_batches(raw)
    assert header.compression == codec  # the data compresses, so the builder kept the codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1000, 2, 17)
    decoded = list(iter_records(raw, header))
    expected = [(i, *t[1:]) for i, t in enumerate(as_tuples(sample()))]
    assert as_tuples(decoded) == expected
    assert [r.sequence for r in decoded] == list(range(17, 25))


@pytest.mark.parametrize(
    ("reader", "codec"),
    [(AioBatch, c) for c in ALL_CODECS] + [(KpBatch, c) for c in KP_CODECS],
)
def test_they_decode_our_batches(reader: type, codec: int) -> None:
    raw = build_batch(sample(), base_offset=500, compression=codec, producer_id=9, producer_epoch=0)
    theirs = reader(bytearray(raw) if reader is AioBatch else raw)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert theirs.base_offset == 500
    expected = [(500 + i, *t[1:]) for i, t in enumerate(as_tuples(sample()))]
    assert foreign_tuples(theirs) == expected


# --------------------------------------------------------------------------- librdkafka


def _request(addr: tuple[str, int], api_key: int, version: int, body: bytes) -> bytes:
    """One request/response round trip in the classic (non-flexible) framing."""
    client_id = b"kafka-py-test"
    msg = struct.pack(">hhih", api_key, version, 1, len(client_id)) + client_id + body
    with socket.create_connection(addr, timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(msg)) + msg)
        stream = sock.makefile("rb")
        (size,) = struct.unpack(">i", stream.read(4))
        response = stream.read(size)
    return response[4:]  # drop the correlation id


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _fetch_v4(addr: tuple[str, int], topic: str, offset: int) -> bytes:
    body = struct.pack(">iiiib", -1, 100, 1, 1 << 24, 0)
    body += struct.pack(">i", 1) + _string(topic) + struct.pack(">iiqi", 1, 0, offset, 1 << 24)
    resp = _request(addr, 1, 4, body)
    pos = 4 + 4  # throttle time, topic count
    (topic_len,) = struct.unpack_from(">h", resp, pos)
    pos += 2 + topic_len + 4  # topic, partition count
    _, error, _, _ = struct.unpack_from(">ihqq", resp, pos)
    assert error == 0
    pos += 22
    (aborted,) = struct.unpack_from(">i", resp, pos)
    pos += 4 + max(aborted, 0) * 16
    (length,) = struct.unpack_from(">i", resp, pos)
    return resp[pos + 4 : pos + 4 + max(length, 0)]


def _produce_v3(addr: tuple[str, int], topic: str, records: bytes) -> int:
    body = struct.pack(">hhi", -1, -1, 5000)  # no transactional id, acks=all, timeout
    body += struct.pack(">i", 1) + _string(topic)
    body += struct.pack(">iii", 1, 0, len(records)) + records
    resp = _request(addr, 0, 3, body)
    (topic_len,) = struct.unpack_from(">h", resp, 4)
    _, error, base_offset = struct.unpack_from(">ihq", resp, 4 + 2 + topic_len + 4)
    assert error == 0
    return int(base_offset)


def _fetch_all(addr: tuple[str, int], topic: str) -> Iterator[tuple[bytes, int]]:
    """(raw fetch response records, batch position) for every batch of partition 0."""
    offset = 0
    while True:
        raw = _fetch_v4(addr, topic, offset)
        headers = list(iter_headers(raw))
        if not headers:
            return
        for header in headers:
            yield raw, header.position
            offset = header.next_offset


def _mock_producer(**config: object) -> tuple[ck.Producer, tuple[str, int]]:
    producer = ck.Producer({"test.mock.num.brokers": 1, "log_level": 3, **config})
    broker = producer.list_topics(timeout=5).brokers[1]
    return producer, (broker.host, broker.port)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_decode_batches_librdkafka_produced(codec: str) -> None:
    producer, addr = _mock_producer(
        **{"compression.type": codec, "enable.idempotence": True, "linger.ms": 50}
    )
    originals = sample()
    for r in originals:
        producer.produce(
            "rd",
            partition=0,
            key=r.key,
            value=r.value,
            headers=list[tuple[str, str | bytes | None]](r.headers),
            timestamp=r.timestamp,
        )
    assert producer.flush(5) == 0
    decoded: list[Record] = []
    for raw, position in _fetch_all(addr, "rd"):
        header = parse_header(raw, position)
        assert crc_ok(raw, header)
        assert header.compression == Codec[codec.upper()]
        assert header.has_producer_id and header.base_sequence >= 0
        decoded.extend(iter_records(raw, header))
    expected = [(i, *t[1:]) for i, t in enumerate(as_tuples(originals))]
    assert as_tuples(decoded) == expected
    assert [r.sequence for r in decoded] == list(range(8))


def test_decode_librdkafka_transaction_marker() -> None:
    producer, addr = _mock_producer(**{"transactional.id": "tx-1"})
    producer.init_transactions(5)
    producer.begin_transaction()
    producer.produce("tx", partition=0, key=b"k", value=b"v")
    producer.commit_transaction(5)
    (data_raw, data_pos), (marker_raw, marker_pos) = _fetch_all(addr, "tx")
    data, marker = parse_header(data_raw, data_pos), parse_header(marker_raw, marker_pos)
    assert data.is_transactional and not data.is_control and crc_ok(data_raw, data)
    assert marker.is_transactional and marker.is_control and marker.base_offset == 1
    # (The mock cluster leaves the CRC of its markers unset, so it is not checked here.)
    [record] = iter_records(marker_raw, marker)
    end = parse_end_txn_marker(record)
    assert end.commit and end.version == 0


def test_librdkafka_consumes_our_batches() -> None:
    producer, addr = _mock_producer()
    producer.list_topics("ours", timeout=5)  # the mock cluster creates it on request
    next_offset = 0
    for codec in ALL_CODECS:
        base = _produce_v3(addr, "ours", build_batch(sample(), compression=codec))
        assert base == next_offset
        next_offset += 8
    consumer = ck.Consumer(
        {
            "bootstrap.servers": f"{addr[0]}:{addr[1]}",
            "group.id": "kafka-py-test",
            "enable.auto.commit": False,
            "check.crcs": True,
            "log_level": 3,
        }
    )
    try:
        consumer.assign([ck.TopicPartition("ours", 0, 0)])
        messages: list[ck.Message] = []
        deadline = time.monotonic() + 10
        while len(messages) < next_offset and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                messages.append(msg)
    finally:
        consumer.close()
    expected = [(i, *t[1:]) for i, t in enumerate(as_tuples(sample()) * len(ALL_CODECS))]
    got = [
        (m.offset(), m.timestamp()[1], m.key(), m.value(), list(m.headers() or []))
        for m in messages
    ]
    assert got == expected
    del producer
