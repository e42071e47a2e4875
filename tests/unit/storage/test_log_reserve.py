"""Disk blocks reserved ahead of the active segment: the files keep Kafka's exact sizes and
bytes, and no reserved block outlives the segment's time as the active one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.common.records.batch import validate_batches
from services.common.records.record import Record, build_batch
from services.storage.log import Log, LogConfig, reserve

NOW = 1_700_000_000_000


def _reserving_works(dir: Path) -> bool:
    probe = dir / "probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT)
    try:
        return reserve.reserve(fd, 0, 1 << 20) and os.fstat(fd).st_blocks * 512 >= 1 << 20
    finally:
        os.close(fd)
        probe.unlink()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    if not _reserving_works(tmp_path):
        pytest.skip("this filesystem does not reserve blocks with FALLOC_FL_KEEP_SIZE")
    return tmp_path / "t-0"


def batch(n: int = 10, size: int = 1000) -> bytearray:
    return bytearray(build_batch([Record(timestamp=NOW, value=b"v" * size) for _ in range(n)]))


def append(log: Log, buf: bytearray) -> None:
    log.append_as_leader(buf, validate_batches(buf), 0, NOW)


def allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_appends_reserve_blocks_ahead_without_changing_the_file(log_dir: Path) -> None:
    log = Log.open(log_dir, "t", 0, LogConfig(), now_ms=lambda: NOW)
    written = b""
    for _ in range(5):
        buf = batch()
        append(log, buf)
        written += bytes(buf)
    segment = log.segments[-1].log_path
    assert segment.read_bytes() == written  # the file is the batches, nothing after them
    assert allocated(segment) > len(written) + 4096  # blocks reserved past the end
    log.close()
    assert segment.read_bytes() == written
    assert allocated(segment) <= len(written) + 4096  # given back at close


def test_a_roll_gives_back_the_reserved_blocks_of_the_old_segment(log_dir: Path) -> None:
    log = Log.open(log_dir, "t", 0, LogConfig(segment_bytes=30_000), now_ms=lambda: NOW)
    for _ in range(8):
        append(log, batch())
    assert len(log.segments) >= 2
    for seg in log.segments[:-1]:
        assert allocated(seg.log_path) <= seg.size + 4096
        assert seg.log_path.stat().st_size == seg.size
    assert allocated(log.segments[-1].log_path) > log.segments[-1].size + 4096
    log.close()


def test_reserved_blocks_beyond_a_truncation_point_go(log_dir: Path) -> None:
    log = Log.open(log_dir, "t", 0, LogConfig(), now_ms=lambda: NOW)
    for _ in range(4):
        append(log, batch())
    log.truncate_to(20)
    seg = log.segments[-1]
    assert seg.log_path.stat().st_size == seg.size
    assert allocated(seg.log_path) <= seg.size + 4096
    append(log, batch())  # reserves again from the new end
    assert log.log_end_offset == 30
    log.close()


def test_recovery_gives_back_blocks_reserved_before_a_crash(log_dir: Path) -> None:
    log = Log.open(log_dir, "t", 0, LogConfig(), now_ms=lambda: NOW)
    for _ in range(3):
        append(log, batch())
    seg = log.segments[-1]
    size, path = seg.size, seg.log_path
    for s in log.segments:  # kill -9: no close, the reservation stays
        s.close_handles()
    assert allocated(path) > size + 4096
    reopened = Log.open(log_dir, "t", 0, LogConfig(), now_ms=lambda: NOW, clean_shutdown=False)
    assert reopened.log_end_offset == 30
    assert path.stat().st_size == size
    assert allocated(path) <= size + 4096
    reopened.close()


def test_a_filesystem_that_refuses_leaves_appends_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def refuse(fd: int, offset: int, length: int) -> bool:
        calls.append(offset)
        return False

    monkeypatch.setattr(reserve, "reserve", refuse)
    log = Log.open(tmp_path / "t-0", "t", 0, LogConfig(), now_ms=lambda: NOW)
    written = b""
    for _ in range(3):
        buf = batch()
        append(log, buf)
        written += bytes(buf)
    assert len(calls) == 1  # asked once, then off for this segment
    assert log.segments[-1].log_path.read_bytes() == written
    log.close()


def test_how_far_ahead() -> None:
    assert reserve.ahead_bytes(0, 100) == 100 + reserve.MIN_AHEAD_BYTES
    assert reserve.ahead_bytes(1 << 20, 100) == 100 + (1 << 20)
    assert reserve.ahead_bytes(1 << 30, 100) == 100 + reserve.MAX_AHEAD_BYTES


def test_giving_blocks_back_keeps_the_modification_time(log_dir: Path) -> None:
    """A segment's mtime is its age for retention (no timestamps) and roll after a restart."""
    log = Log.open(log_dir, "t", 0, LogConfig(), now_ms=lambda: NOW)
    append(log, batch())
    seg = log.segments[-1]
    os.utime(seg.log_path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    assert allocated(seg.log_path) > seg.size + 4096
    log.close()
    assert allocated(seg.log_path) <= seg.size + 4096
    assert seg.log_path.stat().st_mtime_ns == 1_600_000_000_000_000_000
