"""The storage node's cleaner loop (services/storage/log_cleaner.py): which logs it cleans,
its checkpoint, and how truncation and deletion move that checkpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.common.records.batch import validate_batches
from services.common.records.record import Record, build_batch
from services.storage.log import Log, LogConfig, throttler
from services.storage.log import checkpoint as ckpt
from services.storage.log.cleaner import CleanerSettings
from services.storage.log.throttler import Throttler
from services.storage.log_cleaner import LogCleaner
from services.storage.metrics import StorageMetrics

NOW = 1_700_000_000_000


def make_log(tmp_path: Path, name: str, **cfg: object) -> Log:
    config = LogConfig(segment_bytes=400, file_delete_delay_ms=0, **cfg)  # type: ignore[arg-type]
    return Log.open(tmp_path / f"{name}-0", name, 0, config, now_ms=lambda: NOW)


def fill(lg: Log, batches: int, keys: int = 2) -> None:
    for i in range(batches):
        buf = bytearray(build_batch([Record(timestamp=NOW, key=b"k%d" % (i % keys), value=b"v")]))
        lg.append_as_leader(buf, validate_batches(buf), 0, NOW)
        lg.high_watermark = lg.log_end_offset
    lg.roll()


def cleaner_for(tmp_path: Path, logs: dict[tuple[str, int], Log]) -> LogCleaner:
    c = LogCleaner(tmp_path, lambda: logs, CleanerSettings(), StorageMetrics(), lambda: NOW)
    c.load_checkpoint()
    return c


def test_only_compacted_logs_over_their_dirty_ratio_are_cleaned(tmp_path: Path) -> None:
    compacted = make_log(tmp_path, "c", cleanup_policy=("compact",))
    deleting = make_log(tmp_path, "d")
    lazy = make_log(tmp_path, "l", cleanup_policy=("compact",), min_cleanable_dirty_ratio=1.0)
    for lg in (compacted, deleting, lazy):
        fill(lg, 6)
    logs = {("c", 0): compacted, ("d", 0): deleting, ("l", 0): lazy}
    cleaner = cleaner_for(tmp_path, logs)
    assert asyncio.run(cleaner.run_pass()) == 1
    assert cleaner.checkpoints == {("c", 0): 6}
    assert ckpt.read_offset_checkpoint(tmp_path / ckpt.CLEANER_OFFSET_CHECKPOINT) == {("c", 0): 6}
    assert len(list(iter_all(compacted))) == 2  # k0 and k1, once each
    assert len(list(iter_all(deleting))) == 6
    assert len(list(iter_all(lazy))) == 6
    # nothing new: the next pass does nothing
    assert asyncio.run(cleaner.run_pass()) == 0


def iter_all(lg: Log) -> list[int]:
    from services.common.records.record import iter_batch_records

    data = bytes(lg.read(lg.log_start_offset, 1 << 20).records)
    return [r.offset for _, r in iter_batch_records(data)]


def test_the_checkpoint_survives_a_restart_and_forgets_deleted_logs(tmp_path: Path) -> None:
    lg = make_log(tmp_path, "c", cleanup_policy=("compact",))
    fill(lg, 6)
    logs = {("c", 0): lg}
    asyncio.run(cleaner_for(tmp_path, logs).run_pass())
    again = cleaner_for(tmp_path, logs)
    assert again.checkpoints == {("c", 0): 6}
    assert asyncio.run(again.run_pass()) == 0
    logs.clear()  # the partition was deleted
    asyncio.run(again.run_pass())
    assert again.checkpoints == {}


def test_truncation_below_the_checkpoint_makes_the_new_data_dirty(tmp_path: Path) -> None:
    lg = make_log(tmp_path, "c", cleanup_policy=("compact",))
    fill(lg, 6)
    cleaner = cleaner_for(tmp_path, {("c", 0): lg})
    asyncio.run(cleaner.run_pass())
    lg.truncate_to(2)
    fill(lg, 4)  # offsets 2..5 again, from a new leader
    asyncio.run(cleaner.run_pass())
    assert cleaner.checkpoints[("c", 0)] == lg.segments[-1].base_offset
    assert iter_all(lg) == [4, 5]


def test_a_stopped_cleaner_does_nothing(tmp_path: Path) -> None:
    lg = make_log(tmp_path, "c", cleanup_policy=("compact",))
    fill(lg, 6)
    cleaner = cleaner_for(tmp_path, {("c", 0): lg})
    cleaner.stop()
    assert asyncio.run(cleaner.run_pass()) == 0


def test_a_log_that_cannot_be_cleaned_is_left_alone_and_counted(tmp_path: Path) -> None:
    broken = make_log(tmp_path, "b", cleanup_policy=("compact",))
    fine = make_log(tmp_path, "c", cleanup_policy=("compact",))
    fill(broken, 6)
    fill(fine, 6)
    seg = broken.segments[0]
    with open(seg.log_path, "r+b") as f:  # a record section that does not decode
        f.seek(61)
        f.write(b"\xff" * 8)
    logs = {("b", 0): broken, ("c", 0): fine}
    cleaner = cleaner_for(tmp_path, logs)
    asyncio.run(cleaner.run_pass())
    assert cleaner.uncleanable == {("b", 0)}
    assert cleaner.checkpoints == {("c", 0): 6}  # the other log was still cleaned
    assert cleaner.metrics.cleaner_uncleanable_partitions._value.get() == 1
    assert asyncio.run(cleaner.run_pass()) == 0  # not tried again
    assert not [p for p in broken.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]


def test_the_throttler_holds_the_cleaner_to_its_byte_rate() -> None:
    clock = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    t = Throttler(1000.0, clock=lambda: clock[0], sleep=sleep)
    for _ in range(10):  # 500 bytes every 0.1 s: 5,000 bytes/s asked, 1,000 allowed
        clock[0] += 0.1
        t.maybe_throttle(500)
    assert slept and abs(clock[0] - 5.0) < 0.01  # 5,000 bytes took 5 s
    assert Throttler(float("inf")).unlimited


def test_a_throttled_cleaning_sleeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lg = make_log(tmp_path, "c", cleanup_policy=("compact",))
    fill(lg, 6)
    c = LogCleaner(
        tmp_path,
        lambda: {("c", 0): lg},
        CleanerSettings(io_max_bytes_per_second=2000),
        StorageMetrics(),
        lambda: NOW,
    )
    monkeypatch.setattr(throttler, "CHECK_INTERVAL_S", 0.0)
    asyncio.run(c.run_pass())
    assert c.checkpoints == {("c", 0): 6}
    assert c.throttler.slept_s > 0.1  # ~500 bytes read and written at 2,000 bytes/s


def test_the_cleaner_hands_the_gil_over_once_per_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    sleeps: list[float] = []
    monkeypatch.setattr(throttler.time, "sleep", sleeps.append)
    y = throttler.GilYielder(0.001, clock=lambda: clock[0])
    for _ in range(10):
        clock[0] += 0.0004
        y.maybe_yield()
    assert sleeps == [0, 0, 0]  # at 1.2, 2.4 and 3.6 ms of work
