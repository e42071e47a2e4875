"""Log engine: appends, reads, indexes, rolls, epochs, truncation - in Kafka's on-disk format."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import (
    compute_crc,
    crc_ok,
    iter_headers,
    parse_header,
    validate_batches,
)
from services.common.records.compression import Codec
from services.common.records.record import Record, build_batch, iter_batch_records
from services.storage.log import (
    AppendOrigin,
    Log,
    LogConfig,
    UnexpectedAppendOffsetError,
)
from services.storage.log.record_validation import RecordValidationError

NOW = 1_700_000_000_000
TOPIC_ID = bytes(range(16))


def make_batch(
    n: int = 1, ts: int = NOW, size: int = 20, ts_step: int = 0, **kw: object
) -> bytearray:
    recs = [Record(timestamp=ts + i * ts_step, value=bytes([65 + i % 26]) * size) for i in range(n)]
    return bytearray(build_batch(recs, **kw))  # type: ignore[arg-type]


def append(log: Log, buf: bytearray, epoch: int = 0, now: int = NOW):
    return log.append_as_leader(buf, validate_batches(buf), epoch, now)


def open_log(path: Path, **cfg: object) -> Log:
    return Log.open(
        path / "orders-0",
        "orders",
        0,
        LogConfig(**cfg),
        now_ms=lambda: NOW,  # type: ignore[arg-type]
        topic_id=TOPIC_ID,
    )


def offsets_in(data: bytes) -> list[int]:
    return [r.offset for _, r in iter_batch_records(data)]


def test_new_log_files_are_kafkas(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_index_bytes=1000)
    d = tmp_path / "orders-0"
    names = sorted(os.listdir(d))
    assert names == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
        "partition.metadata",
    ]
    assert (
        d / "partition.metadata"
    ).read_text() == "version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw\n"
    assert (d / "leader-epoch-checkpoint").read_bytes() == b""
    # the active segment's indexes are preallocated to segment.index.bytes (rounded to entries)
    assert (d / "00000000000000000000.index").stat().st_size == 1000
    assert (d / "00000000000000000000.timeindex").stat().st_size == 996
    assert log.log_end_offset == 0 and log.log_start_offset == 0
    log.close()
    assert (d / "00000000000000000000.index").stat().st_size == 0
    assert (d / "00000000000000000000.timeindex").stat().st_size == 0


def test_append_assigns_offsets_in_place_and_writes_wire_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = make_batch(3)
    second = make_batch(2)
    info1 = append(log, first, epoch=7)
    info2 = append(log, second, epoch=7)
    assert (info1.first_offset, info1.last_offset, info1.record_count) == (0, 2, 3)
    assert (info2.first_offset, info2.last_offset) == (3, 4)
    assert info1.log_append_time == -1 and not info1.duplicate
    # baseOffset and partitionLeaderEpoch were rewritten in the caller's buffer; CRC still valid
    h = parse_header(second)
    assert (h.base_offset, h.partition_leader_epoch) == (3, 7)
    assert crc_ok(second, h)
    # the .log file is exactly the batches back to back, as on the wire
    data = (tmp_path / "orders-0" / "00000000000000000000.log").read_bytes()
    assert data == bytes(first) + bytes(second)
    assert log.log_end_offset == 5
    assert (tmp_path / "orders-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n7 0\n"


def test_read_returns_whole_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    bufs = [make_batch(5) for _ in range(4)]
    for b in bufs:
        append(log, b)
    size = len(bufs[0])
    # offset inside the second batch -> the whole second batch first
    info = log.read(7, 10_000)
    assert info.first_offset == 5
    assert info.records == b"".join(bytes(b) for b in bufs[1:])
    assert (info.log_start_offset, info.log_end_offset) == (0, 20)
    # max_bytes: only whole batches
    assert offsets_in(log.read(0, 2 * size + size // 2).records) == list(range(10))
    # KIP-74: one batch even if larger than max_bytes, unless min_one_batch is off
    assert log.read(12, 10).records == bytes(bufs[2])
    assert log.read(12, 10, min_one_batch=False).records == b""
    # high watermark cut: no batch whose base offset >= max_offset
    assert offsets_in(log.read(0, 10_000, max_offset=10).records) == list(range(10))
    assert offsets_in(log.read(0, 10_000, max_offset=11).records) == list(range(15))
    assert log.read(10, 10_000, max_offset=10).records == b""
    # offset == LEO: empty; outside [log start, LEO]: OFFSET_OUT_OF_RANGE
    empty = log.read(20, 100)
    assert empty.records == b"" and empty.first_offset is None
    with pytest.raises(KafkaError) as e:
        log.read(21, 100)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def expected_index(
    sizes: list[int], last_offsets: list[int], interval: int
) -> list[tuple[int, int]]:
    """Kafka's rule: before appending, add (lastOffset, position) if > interval bytes since the last entry."""
    entries, since, pos = [], 0, 0
    for size, last in zip(sizes, last_offsets, strict=True):
        if since > interval:
            entries.append((last, pos))
            since = 0
        since += size
        pos += size
    return entries


def test_index_entries_and_lookups_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=3000, index_interval_bytes=250)
    batches = [make_batch(1 + i % 3, size=30 + (i * 7) % 50) for i in range(60)]
    for b in batches:
        append(log, b)
    segs = log.segments
    assert len(segs) > 3
    next_base = 0
    for seg in segs:
        assert seg.base_offset == next_base
        assert seg.size <= 3000
        raw = seg.log_path.read_bytes()
        headers = list(iter_headers(raw))
        expected = expected_index([h.size for h in headers], [h.last_offset for h in headers], 250)
        assert seg.offset_index.entries_list() == expected
        if seg is not segs[-1]:
            # trimmed, 8-byte big-endian entries: relative offset, position
            idx = seg.index_path.read_bytes()
            assert len(idx) == 8 * len(expected)
            assert [struct.unpack_from(">ii", idx, i) for i in range(0, len(idx), 8)] == [
                (o - seg.base_offset, p) for o, p in expected
            ]
        next_base = headers[-1].last_offset + 1 if headers else next_base
    # every offset reads back from the batch that holds it
    for offset in range(log.log_end_offset):
        data = log.read(offset, 1).records
        h = parse_header(data)
        assert h.base_offset <= offset <= h.last_offset


def test_time_index_entries(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=1)
    for i, ts in enumerate([NOW + 50, NOW + 10, NOW + 60, NOW + 60, NOW + 80]):
        append(log, make_batch(2, ts=ts), now=NOW + i)
    seg = log.segments[0]
    # entries only when the max timestamp grows; (max timestamp so far, last offset of its batch)
    assert seg.time_index.entries_list() == [(NOW + 50, 1), (NOW + 60, 5), (NOW + 80, 9)]
    log.close()
    raw = (tmp_path / "orders-0" / "00000000000000000000.timeindex").read_bytes()
    assert [struct.unpack_from(">qi", raw, i) for i in range(0, len(raw), 12)] == [
        (NOW + 50, 1),
        (NOW + 60, 5),
        (NOW + 80, 9),
    ]


def test_roll_by_size_trims_indexes_and_snapshots_producers(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000, index_interval_bytes=100, segment_index_bytes=4000)
    size = len(make_batch(2, size=100))
    for _ in range(12):
        append(log, make_batch(2, size=100))
    per_segment = 1000 // size
    assert [s.base_offset for s in log.segments] == list(range(0, 24, per_segment * 2))
    d = tmp_path / "orders-0"
    for seg in log.segments[:-1]:
        assert seg.size == per_segment * size
        assert seg.index_path.stat().st_size == 8 * seg.offset_index.entries
        assert seg.time_index_path.stat().st_size == 12 * seg.time_index.entries
        assert (d / f"{log.segments[1].base_offset:020d}.snapshot").exists()
    assert log.segments[-1].index_path.stat().st_size == 4000


def test_roll_by_time_uses_first_batch_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    append(log, make_batch(ts=NOW))
    append(log, make_batch(ts=NOW + 1000))  # exactly segment.ms: no roll yet
    assert len(log.segments) == 1
    append(log, make_batch(ts=NOW + 1001))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_append_validation_errors(tmp_path: Path) -> None:
    log = open_log(
        tmp_path,
        max_message_bytes=200,
        segment_bytes=1000,
        message_timestamp_difference_max_ms=1000,
    )
    with pytest.raises(KafkaError) as e:
        append(log, make_batch(1, size=300))
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE
    with pytest.raises(RecordValidationError) as e:
        append(log, make_batch(1, ts=NOW - 5000))
    assert e.value.code == ErrorCode.INVALID_TIMESTAMP
    many = bytearray(b"".join(make_batch(1, size=100) for _ in range(10)))
    with pytest.raises(KafkaError) as e:
        append(log, many)
    assert e.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    marker = bytearray(
        build_batch(
            [Record(timestamp=NOW, key=b"\0\0\0\1", value=b"\0\0\0\0\0\0")],
            producer_id=1,
            producer_epoch=0,
            is_control=True,
            is_transactional=True,
        )
    )
    with pytest.raises(KafkaError) as e:
        append(log, marker)
    assert e.value.code == ErrorCode.INVALID_RECORD
    # the coordinator may write control batches
    log.append_as_leader(marker, validate_batches(marker), 0, NOW, origin=AppendOrigin.COORDINATOR)
    assert log.log_end_offset == 1


@pytest.mark.parametrize("policy", [("compact",), ("compact", "delete")])
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.ZSTD])
def test_compacted_topic_refuses_records_without_key(
    tmp_path: Path, policy: tuple[str, ...], codec: Codec
) -> None:
    """Kafka's LogValidator: one keyless record refuses the whole append, compressed or not."""
    log = open_log(tmp_path, cleanup_policy=policy)
    keyed = [Record(timestamp=NOW, key=b"k%d" % i, value=b"v") for i in range(3)]
    ok = bytearray(build_batch(keyed, compression=codec))
    mixed = bytearray(build_batch([*keyed, Record(timestamp=NOW, value=b"v")], compression=codec))
    with pytest.raises(RecordValidationError) as e:
        append(log, bytearray(ok + mixed))
    assert e.value.code == ErrorCode.INVALID_RECORD
    why = "Compacted topic cannot accept message without key in topic partition orders-0"
    assert e.value.record_errors == [(3, why)]  # the keyless record's index in its batch
    assert e.value.message == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=3, message='{why}')]"
    )
    assert log.log_end_offset == 0
    assert append(log, ok).last_offset == 2
    # tombstones (a key and no value) are what compaction is for
    tombstone = bytearray(build_batch([Record(timestamp=NOW, key=b"k1", value=None)]))
    assert append(log, tombstone).first_offset == 3


def test_every_failing_record_is_reported_with_its_index(tmp_path: Path) -> None:
    """KIP-467: all failing records of the batch, by index; nothing of the batch is appended."""
    log = open_log(tmp_path, cleanup_policy=("compact",))
    recs = [
        Record(timestamp=NOW, key=None if i % 10 == 0 else b"k%d" % i, value=b"v")
        for i in range(100)
    ]
    with pytest.raises(RecordValidationError) as e:
        append(log, bytearray(build_batch(recs, compression=Codec.LZ4)))
    assert e.value.code == ErrorCode.INVALID_RECORD
    assert [i for i, _ in e.value.record_errors] == list(range(0, 100, 10))
    assert "due to 10 record errors in total" in e.value.message
    assert e.value.message.count("RecordError(") == 3  # Kafka shows the first three
    assert log.log_end_offset == 0


def test_timestamps_are_checked_per_record(tmp_path: Path) -> None:
    """Every record's CreateTime, not just the batch's first and largest, as LogValidator;
    a timestamp error makes the whole answer INVALID_TIMESTAMP, even next to a keyless record."""
    log = open_log(tmp_path, cleanup_policy=("compact",), message_timestamp_difference_max_ms=1000)
    # record 1 is older than the first one, so the batch header (first and max) hides it
    recs = [
        Record(timestamp=NOW, key=b"a", value=b"v"),
        Record(timestamp=NOW - 5000, key=b"b", value=b"v"),
        Record(timestamp=NOW, key=None, value=b"v"),
        Record(timestamp=NOW + 1000, key=b"d", value=b"v"),  # the bound itself is allowed
    ]
    with pytest.raises(RecordValidationError) as e:
        append(log, bytearray(build_batch(recs)))
    assert e.value.code == ErrorCode.INVALID_TIMESTAMP
    assert e.value.message == "One or more records have been rejected due to invalid timestamp"
    assert [i for i, _ in e.value.record_errors] == [1, 2]
    assert e.value.record_errors[0][1] == (
        f"Timestamp {NOW - 5000} of message with offset 1 is out of range. "
        f"The timestamp should be within [{NOW - 1000}, {NOW + 1000}]"
    )
    assert log.log_end_offset == 0


def test_producers_may_not_claim_log_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    claimed = bytearray(build_batch([Record(timestamp=NOW, value=b"v")] * 2))
    struct.pack_into(">h", claimed, 21, struct.unpack_from(">h", claimed, 21)[0] | 0x08)
    struct.pack_into(">I", claimed, 17, compute_crc(claimed, 0, len(claimed)))
    with pytest.raises(RecordValidationError) as e:
        append(log, claimed)
    assert e.value.code == ErrorCode.INVALID_TIMESTAMP
    assert [i for i, _ in e.value.record_errors] == [0, 1]


def test_keyless_records_go_into_delete_policy_topics(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy=("delete",))
    assert append(log, make_batch(2)).last_offset == 1


def test_log_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    buf = make_batch(3, ts=NOW - 10_000)
    info = append(log, buf, now=NOW + 5)
    assert info.log_append_time == NOW + 5
    h = parse_header(buf)
    assert h.log_append_time and h.max_timestamp == NOW + 5 and crc_ok(buf, h)
    assert log.read(0, 1000).records == bytes(buf)
    assert log.offset_for_timestamp(NOW) == (0, NOW + 5)


def test_offset_for_timestamp_and_max_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600, index_interval_bytes=50)
    # batch i holds 4 records with timestamps NOW + 10*i + (0, 1, 2, 3)
    for i in range(20):
        append(log, make_batch(4, ts=NOW + 10 * i, ts_step=1, size=10))
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(NOW - 1) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 52) == (22, NOW + 52)
    assert log.offset_for_timestamp(NOW + 54) == (24, NOW + 60)  # first record >= target
    assert log.offset_for_timestamp(NOW + 193) == (79, NOW + 193)
    assert log.offset_for_timestamp(NOW + 194) is None
    assert log.max_timestamp_offset() == (79, NOW + 193)
    # out-of-order timestamps: the record carrying the largest timestamp, exactly
    log2 = Log.open(tmp_path / "t-1", "t", 1, LogConfig(), now_ms=lambda: NOW)
    recs = [Record(timestamp=NOW + t, value=b"v") for t in (5, 90, 7, 90, 3)]
    buf = bytearray(build_batch(recs))
    log2.append_as_leader(buf, validate_batches(buf), 0, NOW)
    append(log2, make_batch(1, ts=NOW + 20))
    assert log2.max_timestamp_offset() == (1, NOW + 90)
    assert log2.offset_for_timestamp(NOW + 6) == (1, NOW + 90)
    assert log2.offset_for_timestamp(NOW + 91) is None
    empty = Log.open(tmp_path / "t-2", "t", 2, LogConfig(), now_ms=lambda: NOW)
    assert empty.max_timestamp_offset() is None and empty.offset_for_timestamp(0) is None


def test_leader_epoch_cache_persisted(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, make_batch(2), epoch=0)
    append(log, make_batch(3), epoch=3)
    append(log, make_batch(1), epoch=3)
    append(log, make_batch(1), epoch=5)
    path = tmp_path / "orders-0" / "leader-epoch-checkpoint"
    assert path.read_text() == "0\n3\n0 0\n3 2\n5 6\n"
    cache = log.leader_epoch_cache
    assert cache.latest_epoch == 5
    assert cache.end_offset_for(0) == (0, 2)
    assert cache.end_offset_for(4) == (3, 6)
    assert cache.end_offset_for(5) == (5, 7)
    assert cache.end_offset_for(9) == (-1, -1)
    assert cache.epoch_for_offset(4) == 3
    log.close()
    reopened = open_log(tmp_path)
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.entries] == [
        (0, 0),
        (3, 2),
        (5, 6),
    ]


def test_follower_append(tmp_path: Path) -> None:
    leader = open_log(tmp_path)
    for epoch, n in ((1, 2), (1, 3), (4, 1)):
        append(
            leader,
            make_batch(n, producer_id=9, producer_epoch=0, base_sequence=leader.log_end_offset),
            epoch=epoch,
        )
    data = leader.read(0, 100_000).records
    follower = Log.open(tmp_path / "f" / "orders-0", "orders", 0, LogConfig(), now_ms=lambda: NOW)
    info = follower.append_as_follower(data, validate_batches(data))
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 5, 6)
    assert follower.log_end_offset == 6
    assert follower.read(0, 100_000).records == data
    assert [(e.epoch, e.start_offset) for e in follower.leader_epoch_cache.entries] == [
        (1, 0),
        (4, 5),
    ]
    assert follower.producer_state.last_entry(9).last_seq == 5
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(data, validate_batches(data))


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500, index_interval_bytes=60)
    for i in range(15):
        append(log, make_batch(2, size=40), epoch=1 if i < 8 else 2)
    assert len(log.segments) > 3
    log.high_watermark = 30
    before = [(s.base_offset, s.offset_index.entries_list()) for s in log.segments]
    target = log.segments[1].base_offset + 2
    assert log.truncate_to(target)
    assert log.log_end_offset == target and log.high_watermark == target
    assert [s.base_offset for s in log.segments] == [before[0][0], before[1][0]]
    assert all(o < target for o, _ in log.segments[-1].offset_index.entries_list())
    assert log.leader_epoch_cache.latest_epoch == 1
    assert offsets_in(log.read(0, 100_000).records) == list(range(target))
    info = append(log, make_batch(2, size=40), epoch=3)
    assert info.first_offset == target
    assert log.leader_epoch_cache.end_offset_for(1) == (1, target)
    assert not log.truncate_to(100)
    log.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    assert [s.base_offset for s in log.segments] == [50]
    assert log.leader_epoch_cache.entries == []
    assert append(log, make_batch(1)).first_offset == 50


def test_flush_and_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=5)
    append(log, make_batch(3))
    assert log.recovery_point == 0 and log.unflushed_messages == 3
    append(log, make_batch(3))
    assert log.recovery_point == 6 and log.unflushed_messages == 0
    append(log, make_batch(1))
    log.flush()
    assert log.recovery_point == 7
    timed = Log.open(tmp_path / "t-0", "t", 0, LogConfig(flush_ms=100), now_ms=lambda: NOW)
    append(timed, make_batch(1))
    assert not timed.maybe_flush(NOW + 50)
    assert timed.maybe_flush(NOW + 100) and timed.recovery_point == 1


def test_config_from_topic_config() -> None:
    from services.common.topic_config import effective_config

    cfg = LogConfig.from_topic_config(
        effective_config({"segment.bytes": "2048", "cleanup.policy": "compact,delete"})
    )
    assert cfg.segment_bytes == 2048 and cfg.cleanup_policy == ("compact", "delete")
    assert cfg.retention_ms == 604800000 and cfg.index_interval_bytes == 4096
    assert LogConfig.from_topic_config({"preallocate": "true", "retention.ms": "-1"}) == LogConfig(
        preallocate=True, retention_ms=-1
    )


def test_delete_removes_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, make_batch())
    log.delete()
    assert not (tmp_path / "orders-0").exists()
