"""Recovery after kill -9 reads only what follows the recovery point, and the background flush
keeps that point near the log end (kill -9 simulated by dropping the log without close())."""

from __future__ import annotations

import os
from pathlib import Path

from services.common.records.batch import validate_batches
from services.common.records.record import Record, build_batch, iter_batch_records
from services.storage.log import Log, LogConfig

NOW = 1_700_000_000_000
# one big segment (like Kafka's 1 GiB default): nothing rolls
BIG = LogConfig(segment_bytes=64 * 1024 * 1024, index_interval_bytes=300)
SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=150, segment_index_bytes=800)


def open_log(d: Path, cfg: LogConfig = BIG, **kw: object) -> Log:
    return Log.open(d, "t", 0, cfg, now_ms=lambda: NOW, **kw)  # type: ignore[arg-type]


def append(log: Log, count: int, *, pid: int = -1, first_seq: int = 0) -> None:
    for i in range(count):
        recs = [Record(timestamp=NOW + i, value=bytes([97 + i % 26]) * 100) for _ in range(2)]
        kw = {} if pid < 0 else {"producer_id": pid, "producer_epoch": 0}
        seq = {} if pid < 0 else {"base_sequence": first_seq + 2 * i}
        buf = bytearray(build_batch(recs, **kw, **seq))  # type: ignore[arg-type]
        log.append_as_leader(buf, validate_batches(buf), 3, NOW)


def kill(log: Log) -> None:
    for seg in log.segments:
        seg.close_handles()


def offsets(log: Log) -> list[int]:
    return [r.offset for _, r in iter_batch_records(log.read(0, 10**8).records)]


def index_state(log: Log) -> list[tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
    return [(s.offset_index.entries_list(), s.time_index.entries_list()) for s in log.segments]


def test_only_the_unflushed_tail_of_the_active_segment_is_rescanned(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    append(log, 200)
    log.flush()
    flushed_size = log.size_bytes()
    recovery_point = log.recovery_point
    assert recovery_point == log.log_end_offset == 400
    append(log, 30)
    tail = log.size_bytes() - flushed_size
    leo = log.log_end_offset
    indexes = index_state(log)
    assert len(log.segments) == 1
    kill(log)

    recovered = open_log(d, recovery_point=recovery_point)
    r = recovered.recovery
    assert r is not None
    assert (r.from_position, r.bytes_scanned, r.batches_recovered) == (flushed_size, tail, 30)
    assert r.bytes_truncated == 0
    assert recovered.log_end_offset == leo and offsets(recovered) == list(range(leo))
    # the kept prefix of the index plus the entries rebuilt from the tail's batch positions
    # are those the appends wrote (the time index gains the final max-timestamp entry)
    (oi, ti), ((oi0, ti0),) = index_state(recovered)[0], indexes
    assert oi == oi0 and ti[: len(ti0)] == ti0
    # a full rescan (no recovery point) reads everything, and agrees
    kill(recovered)
    full = open_log(d, recovery_point=0)
    assert full.recovery is not None and full.recovery.bytes_scanned == full.size_bytes()
    assert index_state(full)[0][0] == oi


def test_torn_tail_after_the_recovery_point_is_cut_and_the_index_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    append(log, 100)
    log.flush()
    recovery_point = log.recovery_point
    append(log, 40)
    leo = log.log_end_offset
    size = log.size_bytes()
    entries = log.segments[0].offset_index.entries_list()
    active = log.segments[0]
    kill(log)
    # a half-written batch, and index entries written after the fsync that point past it
    with open(active.log_path, "ab") as f:
        torn = build_batch([Record(timestamp=NOW, value=b"x" * 500)])
        f.write(torn[: len(torn) // 2])
    with open(active.index_path, "r+b") as f:
        f.seek(len(entries) * 8)
        f.write(((leo + 5 - active.base_offset).to_bytes(4, "big")) + size.to_bytes(4, "big"))

    recovered = open_log(d, recovery_point=recovery_point)
    r = recovered.recovery
    assert r is not None and r.bytes_truncated == len(torn) // 2 and r.batches_recovered == 40
    assert recovered.log_end_offset == leo and recovered.size_bytes() == size
    assert active.log_path.stat().st_size == size
    assert recovered.segments[0].offset_index.entries_list() == entries
    assert offsets(recovered) == list(range(leo))
    append(recovered, 1)  # appends continue after the cut
    assert recovered.log_end_offset == leo + 2


def test_corrupt_batch_in_the_tail_ends_the_log_there(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    append(log, 50)
    log.flush()
    recovery_point, flushed_size = log.recovery_point, log.size_bytes()
    append(log, 10)
    active = log.segments[0]
    kill(log)
    headers = validate_batches(active.log_path.read_bytes())
    victim = next(h for h in headers if h.position > flushed_size + 1000)
    with open(active.log_path, "r+b") as f:
        f.seek(victim.position + victim.size - 3)
        f.write(b"\xff\xff\xff")
    recovered = open_log(d, recovery_point=recovery_point)
    assert recovered.log_end_offset == victim.base_offset
    assert offsets(recovered) == list(range(victim.base_offset))


def test_segments_below_the_recovery_point_are_not_read(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, SMALL)
    append(log, 40)
    assert len(log.segments) >= 5
    log.maybe_flush(NOW)  # the roll's flush: the recovery point moves to the active base
    assert log.recovery_point == log.segments[-1].base_offset
    recovery_point, leo = log.recovery_point, log.log_end_offset
    kill(log)
    first = d / "00000000000000000000.log"
    with open(first, "r+b") as f:  # damage below the recovery point: never read
        f.seek(first.stat().st_size - 1)
        f.write(b"\x00")
    recovered = open_log(d, SMALL, recovery_point=recovery_point)
    r = recovered.recovery
    assert r is not None
    assert r.segments_skipped == len(recovered.segments) - 1 and r.segments_recovered == 1
    assert r.from_segment == recovery_point and r.from_position == 0
    assert recovered.log_end_offset == leo


def test_background_flush_moves_the_recovery_point_and_snapshots_producers(
    tmp_path: Path,
) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    append(log, 50, pid=7)
    assert not log.maybe_flush(NOW + 5_000, max_unflushed_ms=10_000)
    assert log.recovery_point == 0
    assert log.maybe_flush(NOW + 10_000, max_unflushed_ms=10_000)
    assert log.recovery_point == log.log_end_offset == 100
    snapshots = sorted(p.name for p in d.glob("*.snapshot"))
    assert snapshots == [f"{100:020d}.snapshot"]
    append(log, 20, pid=7, first_seq=100)
    assert not log.maybe_flush(NOW + 15_000, max_unflushed_ms=10_000)  # 10 s after the last
    assert log.maybe_flush(NOW + 20_000, max_unflushed_ms=10_000)
    # the previous snapshot inside the active segment is replaced, not accumulated
    assert sorted(p.name for p in d.glob("*.snapshot")) == [f"{140:020d}.snapshot"]
    append(log, 5, pid=7, first_seq=140)
    kill(log)

    recovered = open_log(d, recovery_point=140)
    assert recovered.recovery is not None and recovered.recovery.batches_recovered == 5
    assert recovered.producer_state_replayed_from == 140  # not from 0
    entry = recovered.producer_state.last_entry(7)
    assert entry is not None and entry.last_seq == 149
    # an idempotent retry of the last batch is still recognised as a duplicate
    recs = [Record(timestamp=NOW + 4, value=bytes([97 + 4]) * 100) for _ in range(2)]
    buf = bytearray(build_batch(recs, producer_id=7, producer_epoch=0, base_sequence=148))
    info = recovered.append_as_leader(buf, validate_batches(buf), 3, NOW)
    assert info.duplicate and info.first_offset == 148


def test_without_the_background_flush_nothing_moves(tmp_path: Path) -> None:
    """Kafka's defaults (flush.ms and flush.messages unlimited, no roll): no fsync at all."""
    log = open_log(tmp_path / "t-0")
    append(log, 50)
    assert not log.maybe_flush(NOW + 10**9)
    assert log.recovery_point == 0


def test_a_truncation_during_the_fsync_keeps_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, 50)
    with log.locked():
        plan = log._plan_flush(log.log_end_offset)
    log.truncate_to(20)  # meanwhile a follower truncates (the fsync runs without the lock)
    append(log, 10)
    log._run_flush(plan)
    with log.locked():
        log._finish_flush(plan)
    assert log.recovery_point == 0  # not 100: offsets 20-99 were replaced after the plan
    log.flush()
    assert log.recovery_point == log.log_end_offset == 40


def test_flush_fsyncs_descriptors_that_outlive_a_concurrent_close(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    append(log, 10)
    with log.locked():
        plan = log._plan_flush(log.log_end_offset)
    fds = [t for t in plan.targets if isinstance(t, int)]
    paths = [t for t in plan.targets if isinstance(t, Path)]
    assert fds and paths  # the active segment's open files; rolled ones by path
    for seg in log.segments:  # e.g. retention deleting segments meanwhile
        seg.close_handles()
    paths[0].unlink()
    log._run_flush(plan)  # own duplicates stay valid; a file gone needs no fsync
    assert plan.targets == []
    for fd in fds:  # closed afterwards
        try:
            os.fstat(fd)
        except OSError:
            continue
        raise AssertionError(f"descriptor {fd} left open")


def test_index_files_read_back_in_chunks_and_whole(tmp_path: Path) -> None:
    from services.storage.log.index import OffsetIndex, TimeIndex

    ti = TimeIndex(tmp_path / "0.timeindex", 100, 12 * 5000, writable=True)
    oi = OffsetIndex(tmp_path / "0.index", 100, 8 * 5000, writable=True)
    times = [(NOW + 7 * i + (1 << 33), 100 + 3 * i) for i in range(3000)]
    for i, (ts, off) in enumerate(times):
        ti.maybe_append(ts, off)
        oi.append(off, 1 + 50 * i)
    ti.close_handle()
    oi.close_handle()
    # reopened untrimmed (preallocated, as after a crash): the entries, then zeros
    ti2 = TimeIndex(tmp_path / "0.timeindex", 100, 12 * 5000, writable=False)
    oi2 = OffsetIndex(tmp_path / "0.index", 100, 8 * 5000, writable=False)
    assert ti2.entries == oi2.entries == 5000
    read = list(ti2.iter_file_entries())
    assert [(ts, 100 + rel) for ts, rel in read[:3000]] == times
    assert set(read[3000:]) == {(0, 0)}
    assert [(100 + k, v) for k, v in oi2.iter_file_entries()][:3000] == [
        (off, 1 + 50 * i) for i, (_, off) in enumerate(times)
    ]
    ti2.truncate_to_entries(3000)
    oi2.truncate_to_entries(3000)
    assert ti2.entries_list() == times and ti2.last_entry == times[-1]
    assert oi2.lookup(100 + 3 * 1500 + 1) == (100 + 3 * 1500, 1 + 50 * 1500)


def test_a_log_deleted_during_the_fsync_is_no_error(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    append(log, 10)
    with log.locked():
        plan = log._plan_flush(log.log_end_offset)
    assert plan.sync_dir
    log.delete()  # topic deletion while the background flush runs
    log._run_flush(plan)
    assert not (tmp_path / "t-0").exists()
