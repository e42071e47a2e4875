"""Retention (time by largest timestamp, size, log start offset) and DeleteRecords."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import validate_batches
from services.common.records.record import Record, build_batch
from services.storage.log import Log, LogConfig

NOW = 1_700_000_000_000
HOUR = 3_600_000


def make_batch(ts: int, size: int = 100) -> bytearray:
    # keyed, so that the same batches go into compacted logs
    return bytearray(build_batch([Record(timestamp=ts, key=b"k", value=b"r" * size)]))


def build(tmp_path: Path, timestamps: list[int], **cfg: object) -> Log:
    """One batch per timestamp; ~3 batches per segment."""
    config = LogConfig(segment_bytes=520, file_delete_delay_ms=1000, **cfg)  # type: ignore[arg-type]
    log = Log.open(tmp_path / "t-0", "t", 0, config, now_ms=lambda: NOW)
    for ts in timestamps:
        buf = make_batch(ts)
        log.append_as_leader(buf, validate_batches(buf), 0, NOW)
    log.high_watermark = log.log_end_offset
    return log


def test_time_retention_uses_the_largest_timestamp(tmp_path: Path) -> None:
    # segment 0: old, old, old | segment 3: old, old, NEW (largest is new) | segment 6: ...
    ts = [NOW - 10 * HOUR] * 5 + [NOW - HOUR] + [NOW - 10 * HOUR] * 3
    log = build(tmp_path, ts, retention_ms=5 * HOUR)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert log.delete_retained_segments(NOW) == 1
    assert [s.base_offset for s in log.segments] == [3, 6]
    assert log.log_start_offset == 3
    d = tmp_path / "t-0"
    # renamed .deleted, removed after file.delete.delay.ms
    assert (d / "00000000000000000000.log.deleted").exists()
    assert (d / "00000000000000000000.index.deleted").exists()
    assert not (d / "00000000000000000000.log").exists()
    assert log.purge_deleted(NOW + 999) == 0
    assert log.purge_deleted(NOW + 1000) == 3
    assert not any(p.name.endswith(".deleted") for p in d.iterdir())
    with pytest.raises(KafkaError) as e:
        log.read(1, 1000)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.read(3, 10).first_offset == 3


def test_expired_active_segment_is_rolled_then_deleted(tmp_path: Path) -> None:
    log = build(tmp_path, [NOW - 10 * HOUR] * 7, retention_ms=HOUR)
    leo = log.log_end_offset
    assert log.delete_retained_segments(NOW) == 3
    assert [s.base_offset for s in log.segments] == [leo]
    assert (log.log_start_offset, log.log_end_offset) == (leo, leo)
    assert log.segments[0].size == 0
    assert log.delete_retained_segments(NOW) == 0  # an empty active segment stays


def test_only_segments_below_the_high_watermark_are_deleted(tmp_path: Path) -> None:
    log = build(tmp_path, [NOW - 10 * HOUR] * 7, retention_ms=HOUR)
    log.high_watermark = 4  # inside the second segment
    assert log.delete_retained_segments(NOW) == 1
    assert log.log_start_offset == 3
    log.high_watermark = 0  # clamps to the log start offset
    assert log.high_watermark == 3


def test_size_retention(tmp_path: Path) -> None:
    log = build(tmp_path, [NOW] * 8, retention_bytes=500)
    seg_size = log.segments[0].size
    total = log.size_bytes()
    assert log.delete_retained_segments(NOW) == (total - 500) // seg_size
    assert log.size_bytes() >= 500
    assert log.size_bytes() - log.segments[0].size < 500


def test_compact_only_topic_keeps_old_segments(tmp_path: Path) -> None:
    log = build(tmp_path, [NOW - 10 * HOUR] * 7, retention_ms=HOUR, cleanup_policy=("compact",))
    assert log.delete_retained_segments(NOW) == 0


def test_delete_records_moves_log_start_then_segments_go(tmp_path: Path) -> None:
    log = build(tmp_path, [NOW] * 8)
    log.high_watermark = 6
    with pytest.raises(KafkaError) as e:
        log.maybe_increment_log_start_offset(7)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.maybe_increment_log_start_offset(4)
    assert not log.maybe_increment_log_start_offset(2)
    assert log.log_start_offset == 4
    # reading from the new start returns the batch holding offset 4 (in segment 3)
    assert log.read(4, 10).first_offset == 4
    with pytest.raises(KafkaError):
        log.read(3, 10)
    assert log.delete_retained_segments(NOW) == 1  # segment 0 lies wholly below the start
    assert [s.base_offset for s in log.segments] == [3, 6]
    assert log.log_start_offset == 4
