"""Topic compression.type: the leader stores batches in the topic's codec (Kafka's LogValidator)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import compute_crc, crc_ok, iter_headers, validate_batches
from services.common.records.compression import Codec
from services.common.records.record import Record, build_batch, iter_batch_records
from services.storage.log import LogConfig
from tests.unit.storage.test_log import NOW, append, open_log

TOPIC_CODECS = {
    "uncompressed": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}


def producer_batch(codec: int, *, base_sequence: int = 0, n: int = 5) -> bytearray:
    """An idempotent producer's batch: keys, null and binary values, headers, distinct ts."""
    recs = [
        Record(
            timestamp=NOW - 1000 + 7 * i,
            key=None if i == 0 else b"key-%d" % i,
            value=None if i == 1 else bytes(range(i * 13 % 256)) * 3,
            headers=[("h", b"v%d" % i), ("dup", None), ("dup", b"")],
        )
        for i in range(n)
    ]
    return bytearray(
        build_batch(
            recs,
            compression=codec,
            producer_id=4711,
            producer_epoch=3,
            base_sequence=base_sequence,
        )
    )


def stored(log_dir: Path) -> bytes:
    (seg,) = sorted(log_dir.glob("*.log"))
    return seg.read_bytes()


def records_of(data: bytes | bytearray) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for _, r in iter_batch_records(data)]


@pytest.mark.parametrize("source", list(Codec))
@pytest.mark.parametrize("topic_codec", list(TOPIC_CODECS))
def test_batches_are_stored_in_the_topic_codec(
    tmp_path: Path, topic_codec: str, source: Codec
) -> None:
    log = open_log(tmp_path, compression_type=topic_codec)
    first = producer_batch(source)
    second = producer_batch(source, base_sequence=5)
    want = records_of(first) + [(o + 5, *rest) for o, *rest in records_of(second)]
    assert append(log, first, epoch=2).first_offset == 0
    info = append(log, second, epoch=2)
    assert (info.first_offset, info.last_offset) == (5, 9)

    data = stored(log.dir)
    headers = list(iter_headers(data))
    assert [h.compression for h in headers] == [TOPIC_CODECS[topic_codec]] * 2
    for h, seq in zip(headers, (0, 5), strict=True):
        assert crc_ok(data, h)
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (4711, 3, seq)
        assert h.partition_leader_epoch == 2
        assert (h.base_timestamp, h.max_timestamp) == (NOW - 1000, NOW - 1000 + 28)
    assert records_of(data) == want
    assert log.read(0, 1 << 20).records == data


def test_retry_of_a_rewritten_batch_is_a_duplicate(tmp_path: Path) -> None:
    """The producer state sees the producer's sequence range, so a retry of the original
    (uncompressed) batch is recognised and answered with the first append's offsets."""
    log = open_log(tmp_path, compression_type="gzip")
    assert append(log, producer_batch(Codec.NONE)).last_offset == 4
    retry = append(log, producer_batch(Codec.NONE))
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 4)
    with pytest.raises(KafkaError) as e:  # a gap in the sequence is still refused
        append(log, producer_batch(Codec.NONE, base_sequence=7))
    assert e.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 5


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_producer_codec_and_same_codec_store_the_producers_bytes(
    tmp_path: Path, codec: Codec
) -> None:
    """compression.type=producer (and a batch already in the topic's codec) is stored as sent:
    only baseOffset and partitionLeaderEpoch are rewritten in place."""
    for topic_codec in ("producer", "gzip" if codec == Codec.GZIP else "uncompressed"):
        log = open_log(tmp_path / topic_codec, compression_type=topic_codec)
        buf = producer_batch(codec)
        sent = bytes(buf)
        append(log, buf)
        assert stored(log.dir) == bytes(buf)
        assert bytes(buf)[21:] == sent[21:]  # header from attributes on, and records: as sent


def test_rewritten_batch_larger_than_max_message_bytes_is_refused(tmp_path: Path) -> None:
    value = os.urandom(4000)  # incompressible: gzip makes it larger
    buf = bytearray(build_batch([Record(timestamp=NOW, value=value)]))
    log = open_log(tmp_path, compression_type="gzip", max_message_bytes=len(buf))
    with pytest.raises(KafkaError) as e:
        append(log, buf)
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0


def test_batch_without_incremental_inner_offsets_is_refused(tmp_path: Path) -> None:
    """Headers that agree (2 records, lastOffsetDelta 1) over records numbered 0 and 2: the
    gateway's header check passes it, the rewrite refuses it as Kafka does."""
    recs = [Record(offset=0, timestamp=NOW, value=b"a"), Record(offset=2, timestamp=NOW)]
    buf = bytearray(build_batch(recs, keep_offsets=True))
    struct.pack_into(">i", buf, 23, 1)  # lastOffsetDelta
    struct.pack_into(">I", buf, 17, compute_crc(buf, 0, len(buf)))
    headers = validate_batches(buf)
    log = open_log(tmp_path, compression_type="zstd")
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(buf, headers, 0, NOW)
    assert e.value.code == ErrorCode.INVALID_RECORD
    assert log.log_end_offset == 0


def test_compression_type_config() -> None:
    assert LogConfig().target_codec is None
    assert LogConfig.from_topic_config({"compression.type": "producer"}).target_codec is None
    for name, codec in TOPIC_CODECS.items():
        assert LogConfig.from_topic_config({"compression.type": name}).target_codec == codec
