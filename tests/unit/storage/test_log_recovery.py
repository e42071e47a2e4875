"""Log loading and recovery after an unclean shutdown (kill -9 simulated by not closing)."""

from __future__ import annotations

import os
from pathlib import Path

from services.common.records.batch import validate_batches
from services.common.records.record import Record, build_batch, iter_batch_records
from services.storage.log import Log, LogConfig

NOW = 1_700_000_000_000
CFG = LogConfig(segment_bytes=1200, index_interval_bytes=150, segment_index_bytes=800)


def make_batch(n: int = 2, ts: int = NOW, size: int = 40, **kw: object) -> bytearray:
    recs = [Record(timestamp=ts + i, value=bytes([97 + i % 26]) * size) for i in range(n)]
    return bytearray(build_batch(recs, **kw))  # type: ignore[arg-type]


def open_log(dir: Path, **kw: object) -> Log:
    return Log.open(dir, "t", 0, CFG, now_ms=lambda: NOW, **kw)  # type: ignore[arg-type]


def fill(log: Log, count: int) -> None:
    for i in range(count):
        buf = make_batch(1 + i % 3, ts=NOW + i)
        log.append_as_leader(buf, validate_batches(buf), i // 10, NOW)


def kill(log: Log) -> None:
    """Drop the log without close(): no trimming, no snapshot, no flush."""
    for seg in log.segments:
        seg.close_handles()


def index_state(log: Log) -> list[tuple[int, list[tuple[int, int]], list[tuple[int, int]]]]:
    return [
        (s.base_offset, s.offset_index.entries_list(), s.time_index.entries_list())
        for s in log.segments
    ]


def all_offsets(log: Log) -> list[int]:
    return [r.offset for _, r in iter_batch_records(log.read(0, 10**7).records)]


def test_torn_tail_is_truncated_and_indexes_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    fill(log, 30)
    leo = log.log_end_offset
    expected_data = log.read(0, 10**7).records
    indexes_before = index_state(log)
    active = log.segments[-1]
    assert len(log.segments) >= 3
    # preallocated active index files stay untrimmed after a crash
    assert active.index_path.stat().st_size == 800
    kill(log)
    partial = make_batch(3)
    with open(active.log_path, "ab") as f:
        f.write(bytes(partial[:-7]))  # a torn write of the next batch

    recovered = open_log(d, recovery_point=0)
    assert recovered.log_end_offset == leo
    assert recovered.recovery_point == 0
    assert recovered.read(0, 10**7).records == expected_data
    assert all_offsets(recovered) == list(range(leo))
    after = index_state(recovered)
    for (base, offsets, times), (base2, offsets2, times2) in zip(
        indexes_before, after, strict=True
    ):
        assert base == base2 and offsets == offsets2
        # recovery appends the segment's max timestamp as a final entry, like Kafka
        assert times2[: len(times)] == times and times2[-1][0] == max(t for t, _ in times2)
    assert active.log_path.stat().st_size == recovered.segments[-1].size
    # appends continue where the valid data ended, indexes keep growing correctly
    buf = make_batch(2)
    info = recovered.append_as_leader(buf, validate_batches(buf), 5, NOW)
    assert info.first_offset == leo


def test_garbage_tail_and_zeroed_preallocation(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log.open(d, "t", 0, LogConfig(preallocate=True, segment_bytes=4096), now_ms=lambda: NOW)
    fill(log, 5)
    leo = log.log_end_offset
    assert log.segments[-1].log_path.stat().st_size == 4096  # preallocated, zeros after the data
    kill(log)
    recovered = Log.open(
        d, "t", 0, LogConfig(preallocate=True, segment_bytes=4096), now_ms=lambda: NOW
    )
    assert recovered.log_end_offset == leo
    assert recovered.segments[-1].log_path.stat().st_size == recovered.segments[-1].size
    with open(recovered.segments[-1].log_path, "ab") as f:
        f.write(os.urandom(100))
    kill(recovered)
    again = Log.open(d, "t", 0, LogConfig(), now_ms=lambda: NOW)
    assert again.log_end_offset == leo and all_offsets(again) == list(range(leo))


def test_corrupt_crc_in_the_middle_truncates_from_there(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    fill(log, 30)
    seg = log.segments[1]
    headers = list(validate_batches(seg.log_path.read_bytes()))
    victim = headers[2]
    later_segments = [s.base_offset for s in log.segments[2:]]
    kill(log)
    with open(seg.log_path, "r+b") as f:
        f.seek(victim.position + victim.size - 1)
        last = f.read(1)
        f.seek(victim.position + victim.size - 1)
        f.write(bytes([last[0] ^ 0xFF]))

    recovered = open_log(d, recovery_point=0)
    assert recovered.log_end_offset == victim.base_offset
    assert [s.base_offset for s in recovered.segments] == [0, seg.base_offset]
    assert recovered.segments[-1].size == victim.position
    for base in later_segments:
        assert not (d / f"{base:020d}.log").exists()
    assert all_offsets(recovered) == list(range(victim.base_offset))
    # epochs past the new end are dropped from the cache
    assert all(e.start_offset < victim.base_offset for e in recovered.leader_epoch_cache.entries)


def test_clean_shutdown_skips_recovery(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    fill(log, 20)
    leo = log.log_end_offset
    log.close()
    seg_path = d / "00000000000000000000.log"
    size = seg_path.stat().st_size
    with open(seg_path, "r+b") as f:  # break a CRC: only a recovery would notice
        f.seek(size - 1)
        f.write(b"\xee")
    clean = open_log(d, clean_shutdown=True, recovery_point=0)
    assert clean.log_end_offset == leo and clean.recovery_point == leo
    assert seg_path.stat().st_size == size
    kill(clean)
    unclean = open_log(d, recovery_point=0)
    assert unclean.log_end_offset < leo
    assert [s.base_offset for s in unclean.segments] == [0]


def test_recovery_starts_at_the_recovery_point_segment(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    fill(log, 30)
    leo = log.log_end_offset
    third = log.segments[2].base_offset
    kill(log)
    first_segment = d / "00000000000000000000.log"
    size = first_segment.stat().st_size
    with open(first_segment, "r+b") as f:  # corruption below the recovery point is not scanned
        f.seek(size - 1)
        f.write(b"\x00")
    recovered = open_log(d, recovery_point=third + 1)
    assert recovered.log_end_offset == leo
    assert first_segment.stat().st_size == size


def test_missing_or_untrimmed_index_is_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    fill(log, 30)
    before = index_state(log)
    log.close()
    (d / "00000000000000000000.index").unlink()
    with open(d / f"{before[1][0]:020d}.index", "r+b") as f:  # like an index never trimmed
        f.truncate(800)
    with open(d / f"{before[1][0]:020d}.timeindex", "r+b") as f:
        f.truncate(792)
    reopened = open_log(d, clean_shutdown=True)
    after = index_state(reopened)
    assert [(b, o) for b, o, _ in after] == [(b, o) for b, o, _ in before]
    assert after[1][2] == before[1][2]
    assert all_offsets(reopened) == list(range(reopened.log_end_offset))


def test_leftover_files_are_removed(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    fill(log, 3)
    log.close()
    for name in (
        "00000000000000000000.log.deleted",
        "00000000000000000007.log.cleaned",
        "00000000000000000007.index.swap",
        "leader-epoch-checkpoint.tmp",
        "00000000000000000099.index",
    ):
        (d / name).write_bytes(b"junk")
    reopened = open_log(d, clean_shutdown=True)
    assert sorted(p.name for p in d.iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        f"{log.log_end_offset:020d}.snapshot",
        "leader-epoch-checkpoint",
    ]
    assert reopened.log_end_offset == log.log_end_offset


def test_log_start_offset_from_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    fill(log, 30)
    leo = log.log_end_offset
    log.close()
    reopened = open_log(d, clean_shutdown=True, log_start_offset=5)
    assert reopened.log_start_offset == 5 and reopened.high_watermark == 5
    reopened.close()
    beyond = open_log(d, clean_shutdown=True, log_start_offset=leo + 10)
    assert (beyond.log_start_offset, beyond.log_end_offset) == (leo + 10, leo + 10)
    assert [s.base_offset for s in beyond.segments] == [leo + 10]


def test_untrimmed_preallocated_segment_claimed_clean_is_recovered(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    cfg = LogConfig(preallocate=True, segment_bytes=4096)
    log = Log.open(d, "t", 0, cfg, now_ms=lambda: NOW)
    fill(log, 4)
    leo = log.log_end_offset
    kill(log)  # the preallocated zeros stay behind the data
    reopened = Log.open(d, "t", 0, cfg, now_ms=lambda: NOW, clean_shutdown=True)
    assert reopened.log_end_offset == leo
    buf = make_batch(2)
    assert reopened.append_as_leader(buf, validate_batches(buf), 0, NOW).first_offset == leo
    assert all_offsets(reopened) == list(range(leo + 2))
