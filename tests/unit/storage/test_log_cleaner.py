"""Log compaction (services/storage/log/cleaner.py) on real log files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from services.common.records.batch import iter_headers, validate_batches
from services.common.records.compression import Codec
from services.common.records.record import Record, build_batch, iter_batch_records
from services.storage.log import Log, LogConfig, cleaner, files
from services.storage.log.cleaner import (
    CleanerSettings,
    CleanStats,
    clean,
    cleanable_range,
)
from services.storage.log.offset_map import ENTRY_OVERHEAD_BYTES
from services.storage.log.segment import LogSegment
from services.storage.replication.batches import follower_batches

NOW = 1_700_000_000_000
HOUR = 3_600_000
SETTINGS = CleanerSettings()


def open_log(tmp_path: Path, **cfg: object) -> Log:
    config = LogConfig(
        segment_bytes=cfg.pop("segment_bytes", 400),  # type: ignore[arg-type]
        cleanup_policy=("compact",),
        file_delete_delay_ms=0,
        **cfg,  # type: ignore[arg-type]
    )
    return Log.open(tmp_path / "t-0", "t", 0, config, now_ms=lambda: NOW)


def append(lg: Log, *records: tuple[bytes | None, bytes | None], **batch: object) -> None:
    """One batch holding ``records`` (key, value); the high watermark follows."""
    buf = bytearray(
        build_batch(
            [Record(timestamp=NOW, key=k, value=v) for k, v in records],
            **batch,  # type: ignore[arg-type]
        )
    )
    lg.append_as_leader(buf, validate_batches(buf), 0, NOW)
    lg.high_watermark = lg.log_end_offset


def contents(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, read through the log's own read path."""
    data = bytes(lg.read(lg.log_start_offset, 1 << 30).records)
    return [(r.offset, r.key, r.value) for _, r in iter_batch_records(data)]


def compact(lg: Log, checkpoint: int | None = None) -> CleanStats:
    rng = cleanable_range(lg, checkpoint, NOW)
    assert rng is not None
    return clean(lg, rng, SETTINGS, NOW)


def test_only_the_latest_value_of_each_key_survives(tmp_path: Path) -> None:
    # the checklist's example: K1 has 3 messages and only V4 survives
    lg = open_log(tmp_path)
    for k, v in [(b"K1", b"V1"), (b"K2", b"V2"), (b"K1", b"V3"), (b"K1", b"V4"), (b"K3", b"V5")]:
        append(lg, (k, v))
    lg.roll()
    append(lg, (b"K2", b"V6"))  # the active segment is never cleaned
    before_leo = lg.log_end_offset
    stats = compact(lg)
    assert stats.end_offset == 5 and not stats.aborted
    # K2's V2 stays: its later value is in the active segment, which the map does not cover
    assert contents(lg) == [
        (1, b"K2", b"V2"),
        (3, b"K1", b"V4"),
        (4, b"K3", b"V5"),
        (5, b"K2", b"V6"),
    ]
    assert lg.log_end_offset == before_leo
    # offsets are kept: a read from a removed offset starts at the next kept batch
    assert lg.read(2, 1 << 20).first_offset == 3
    assert lg.log_start_offset == 0


def test_a_clean_log_is_not_cleanable_until_new_segments_roll(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for i in range(6):
        append(lg, (b"k%d" % (i % 2), b"v%d" % i))
    lg.roll()
    append(lg, (b"k0", b"late"))
    stats = compact(lg)
    assert cleanable_range(lg, stats.end_offset, NOW) is None
    lg.roll()
    rng = cleanable_range(lg, stats.end_offset, NOW)
    assert rng is not None
    assert rng.first_dirty_offset == stats.end_offset
    assert 0 < rng.dirty_ratio < 1
    clean(lg, rng, SETTINGS, NOW)
    assert [(k, v) for _, k, v in contents(lg)] == [(b"k1", b"v5"), (b"k0", b"late")]


def test_nothing_above_the_high_watermark_is_cleaned(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for i in range(4):
        append(lg, (b"k", b"v%d" % i))
        lg.roll()
    lg.high_watermark = 2
    rng = cleanable_range(lg, None, NOW)
    assert rng is not None and rng.first_uncleanable_offset == 2


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path: Path) -> None:
    lg = open_log(tmp_path, min_compaction_lag_ms=HOUR)
    append(lg, (b"k", b"v"))
    lg.roll()
    assert cleanable_range(lg, None, NOW) is None  # records stamped NOW are too young
    assert cleanable_range(lg, None, NOW + 2 * HOUR) is not None


def test_max_compaction_lag_makes_a_log_overdue_and_rolls_the_active_segment(
    tmp_path: Path,
) -> None:
    lg = open_log(tmp_path, max_compaction_lag_ms=HOUR, segment_ms=7 * 24 * HOUR)
    assert lg.config.max_segment_ms == HOUR
    append(lg, (b"k", b"v"))
    lg.roll()
    assert not cleanable_range(lg, None, NOW).overdue  # type: ignore[union-attr]
    assert cleanable_range(lg, None, NOW + 2 * HOUR).overdue  # type: ignore[union-attr]


def test_tombstones_stay_for_delete_retention_ms_then_go(tmp_path: Path) -> None:
    lg = open_log(tmp_path, delete_retention_ms=0)
    append(lg, (b"a", b"1"))
    append(lg, (b"b", b"2"))
    append(lg, (b"a", None))
    lg.roll()
    append(lg, (b"c", b"3"))
    first = compact(lg)
    # the first cleaning has no clean head, so its delete horizon is 0: the tombstone stays
    assert contents(lg)[:2] == [(1, b"b", b"2"), (2, b"a", None)]
    lg.roll()
    compact(lg, first.end_offset)
    assert contents(lg) == [(1, b"b", b"2"), (3, b"c", b"3")]


def test_tombstones_within_delete_retention_ms_are_kept(tmp_path: Path) -> None:
    lg = open_log(tmp_path)  # delete.retention.ms 24 h
    append(lg, (b"a", b"1"))
    append(lg, (b"a", None))
    lg.roll()
    first = compact(lg)
    append(lg, (b"b", b"2"))
    lg.roll()
    compact(lg, first.end_offset)
    assert (1, b"a", None) in contents(lg)


def test_keyless_records_are_dropped(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    lg.update_config(LogConfig(segment_bytes=400, file_delete_delay_ms=0))  # delete policy
    append(lg, (None, b"no key"), (b"k", b"v"))
    lg.update_config(LogConfig(segment_bytes=400, cleanup_policy=("compact",)))
    lg.roll()
    stats = compact(lg)
    assert stats.keyless_dropped == 1
    assert contents(lg) == [(1, b"k", b"v")]


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.LZ4, Codec.ZSTD, Codec.SNAPPY])
def test_a_rewritten_batch_keeps_codec_offsets_headers_and_producer(
    tmp_path: Path, codec: Codec
) -> None:
    lg = open_log(tmp_path, segment_bytes=4000)
    buf = bytearray(
        build_batch(
            [
                Record(
                    timestamp=NOW + i, key=b"k%d" % (i % 3), value=b"v%d" % i, headers=[("h", b"x")]
                )
                for i in range(6)
            ],
            compression=codec,
        )
    )
    lg.append_as_leader(buf, validate_batches(buf), 7, NOW)
    lg.high_watermark = lg.log_end_offset
    lg.roll()
    compact(lg)
    data = bytes(lg.read(0, 1 << 20).records)
    (h,) = list(iter_headers(data))
    assert (h.base_offset, h.last_offset, h.compression) == (0, 5, codec)
    assert h.partition_leader_epoch == 7
    recs = [r for _, r in iter_batch_records(data)]
    assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == [
        (3, b"k0", b"v3", NOW + 3),
        (4, b"k1", b"v4", NOW + 4),
        (5, b"k2", b"v5", NOW + 5),
    ]
    assert all(r.headers == [("h", b"x")] for r in recs)


def test_a_producers_last_batch_stays_as_an_empty_batch(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    append(lg, (b"k", b"idempotent"), producer_id=42, producer_epoch=3, base_sequence=0)
    append(lg, (b"other", b"x"), producer_id=43, producer_epoch=0, base_sequence=0)
    append(lg, (b"other", b"y"), producer_id=43, producer_epoch=0, base_sequence=1)
    append(lg, (b"k", b"plain"))
    lg.roll()
    compact(lg)
    data = bytes(lg.read(0, 1 << 20).records)
    headers = list(iter_headers(data))
    # producer 42's only batch is empty now but keeps its offsets, epoch and sequence;
    # producer 43's first batch, superseded and not its last, is gone
    assert [(h.base_offset, h.record_count, h.producer_id) for h in headers] == [
        (0, 0, 42),
        (2, 1, 43),
        (3, 1, -1),
    ]
    assert (headers[0].producer_epoch, headers[0].base_sequence) == (3, 0)
    assert headers[0].max_timestamp == NOW
    # the state is rebuilt from those batches after a restart without snapshots
    lg.close()
    for p in (tmp_path / "t-0").glob("*.snapshot"):
        p.unlink()
    lg = Log.open(tmp_path / "t-0", "t", 0, lg.config, now_ms=lambda: NOW)
    assert lg.producer_state.last_entry(42).last_seq == 0  # type: ignore[union-attr]


def test_small_segments_are_merged_up_to_segment_bytes(tmp_path: Path) -> None:
    lg = open_log(tmp_path, segment_bytes=1000)
    for i in range(8):
        append(lg, (b"k%d" % i, b"v"))
        lg.roll()
    append(lg, (b"k8", b"v"))
    assert len(lg.segments) == 9
    compact(lg)
    assert len(lg.segments) < 9
    assert sum(s.size for s in lg.segments[:-1]) == 8 * lg.segments[-1].size
    assert [o for o, _, _ in contents(lg)] == list(range(9))
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.suffix == ".log")
    assert names == [files.log_file(lg.dir, s.base_offset).name for s in lg.segments]


def budget_for(keys: int, key_len: int = 2) -> CleanerSettings:
    """Settings whose offset map holds exactly ``keys`` keys of ``key_len`` bytes."""
    size = keys * (ENTRY_OVERHEAD_BYTES + key_len)
    return CleanerSettings(dedupe_buffer_size=size, io_buffer_load_factor=1)


def test_the_offset_map_budget_limits_one_cleaning(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    for i in range(6):
        append(lg, (b"k%d" % i, b"v"))
        lg.roll()
    rng = cleanable_range(lg, None, NOW)
    assert rng is not None
    stats = clean(lg, rng, budget_for(2), NOW)
    assert stats.end_offset == 2  # two keys fit: the cleaning stops at the third
    assert stats.map_entries == 2
    assert stats.map_bytes == 2 * (ENTRY_OVERHEAD_BYTES + 2)


def test_a_full_map_ends_the_range_inside_a_segment_and_the_next_cleaning_goes_on(
    tmp_path: Path,
) -> None:
    """Kafka stops mapping at the first record that does not fit, even inside a batch; what
    lies past that point stays untouched, whatever it is, until a later cleaning."""
    lg = open_log(tmp_path, segment_bytes=1 << 20, delete_retention_ms=0)
    append(lg, (b"a", b"1"), (b"b", b"2"))
    append(lg, (b"a", b"3"), (b"c", b"4"), (b"a", b"5"))  # the map fills at c (offset 3)
    compacted = lg.config
    lg.update_config(LogConfig(segment_bytes=1 << 20))  # a keyless record written before
    append(lg, (None, b"keyless"))  # the topic became compacted
    lg.update_config(compacted)
    append(lg, (b"b", None))
    append(lg, (b"c", b"6"))
    lg.roll()
    append(lg, (b"z", b"active"))
    rng = cleanable_range(lg, None, NOW)
    assert rng is not None
    first = clean(lg, rng, budget_for(2), NOW)
    assert (first.end_offset, first.map_entries) == (3, 2)
    # below offset 3 only a@2 and b@1 stay; from 3 on everything stays, even the keyless
    # record and the tombstone
    assert contents(lg) == [
        (1, b"b", b"2"),
        (2, b"a", b"3"),
        (3, b"c", b"4"),
        (4, b"a", b"5"),
        (5, None, b"keyless"),
        (6, b"b", None),
        (7, b"c", b"6"),
        (8, b"z", b"active"),
    ]
    # the next cleaning maps from offset 3 on, not again from the segment's start
    rng = cleanable_range(lg, first.end_offset, NOW)
    assert rng is not None and rng.first_dirty_offset == 3
    second = clean(lg, rng, budget_for(2), NOW)
    assert second.end_offset == 6 and second.map_entries == 2  # c and a; b's tombstone waits
    third = clean(lg, cleanable_range(lg, second.end_offset, NOW), budget_for(2), NOW)  # type: ignore[arg-type]
    assert third.end_offset == 8
    # the delete horizon of the third pass lies before the tombstone's segment: it stays
    assert contents(lg) == [
        (4, b"a", b"5"),
        (6, b"b", None),
        (7, b"c", b"6"),
        (8, b"z", b"active"),
    ]


def test_long_keys_cost_the_map_no_more_than_their_digest(tmp_path: Path) -> None:
    lg = open_log(tmp_path, segment_bytes=1 << 20)
    keys = [b"%04d" % i + b"k" * 2000 for i in range(20)]  # differ only in their first bytes
    for round_ in range(2):
        for k in keys:
            append(lg, (k, b"v%d" % round_))
    lg.roll()
    append(lg, (b"active", b"x"))
    stats = clean(lg, cleanable_range(lg, None, NOW), budget_for(20, 16), NOW)  # type: ignore[arg-type]
    assert stats.end_offset == 40 and stats.map_entries == 20
    assert stats.map_bytes == 20 * (ENTRY_OVERHEAD_BYTES + 16)
    assert [(k, v) for _, k, v in contents(lg)][:20] == [(k, b"v1") for k in keys]


def test_a_read_buffer_smaller_than_a_batch_cleans_the_same(tmp_path: Path) -> None:
    """``log.cleaner.io.buffer.size`` sets the read chunk; a batch larger than the chunk is
    read whole."""
    results = []
    for name, io_buffer_size in [("big", 524288), ("tiny", 2)]:
        lg = open_log(tmp_path / name, segment_bytes=1 << 20)
        for i in range(30):
            append(lg, *[(b"k%d" % ((i + j) % 7), b"v%d-%d" % (i, j) * 20) for j in range(5)])
        lg.roll()
        append(lg, (b"active", b"x"))
        rng = cleanable_range(lg, None, NOW)
        assert rng is not None
        stats = clean(lg, rng, CleanerSettings(io_buffer_size=io_buffer_size), NOW)
        assert stats.records_read == 150
        results.append(contents(lg))
    assert results[0] == results[1]
    assert len(results[0]) == 8  # one record of each of the 7 keys, and the active one


def after_each_group(monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]) -> None:
    """Run ``action`` between the writing of each cleaned group and its swap."""
    write_group = cleaner._clean_group

    def write_then_act(*args: object) -> LogSegment:
        seg = write_group(*args)  # type: ignore[arg-type]
        action()
        return seg

    monkeypatch.setattr(cleaner, "_clean_group", write_then_act)


def test_a_log_changed_underneath_aborts_the_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lg = open_log(tmp_path)
    for i in range(4):
        append(lg, (b"k", b"v%d" % i))
        lg.roll()
    rng = cleanable_range(lg, None, NOW)
    assert rng is not None
    after_each_group(monkeypatch, lambda: lg.truncate_to(1))  # a follower's leader changed
    stats = clean(lg, rng, SETTINGS, NOW)
    assert stats.aborted
    assert contents(lg) == [(0, b"k", b"v0")]
    assert not [p for p in lg.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert lg.take_truncation_mark() == 1
    assert lg.take_truncation_mark() is None


def test_a_truncation_during_the_cleaning_aborts_it_even_after_new_rolls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower truncated into the segments being cleaned, then appended and rolled past
    them again: the cleaned copy holds the records from before the truncation, so it must not
    be swapped in."""
    lg = open_log(tmp_path, segment_bytes=10_000)
    for i in range(4):
        append(lg, (b"k%d" % i, b"old%d" % i))
    lg.roll()
    append(lg, (b"z", b"active"))
    rng = cleanable_range(lg, None, NOW)
    assert rng is not None

    def truncate_and_refill() -> None:
        lg.truncate_to(2)
        append(lg, (b"k2", b"new2"), (b"k3", b"new3"))
        lg.roll()
        append(lg, (b"z", b"active again"))

    after_each_group(monkeypatch, truncate_and_refill)
    stats = clean(lg, rng, SETTINGS, NOW)
    assert stats.aborted
    assert contents(lg) == [
        (0, b"k0", b"old0"),
        (1, b"k1", b"old1"),
        (2, b"k2", b"new2"),
        (3, b"k3", b"new3"),
        (4, b"z", b"active again"),
    ]


def test_a_segment_purged_before_the_cleaner_reads_it_aborts_the_cleaning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lg = open_log(tmp_path)
    for i in range(4):
        append(lg, (b"k", b"v%d" % i))
        lg.roll()
    rng = cleanable_range(lg, None, NOW)
    assert rng is not None

    def purged(path: object, flags: int) -> int:
        raise FileNotFoundError(path)

    monkeypatch.setattr(cleaner.os, "open", purged)  # retention removed the file meanwhile
    stats = clean(lg, rng, SETTINGS, NOW)
    monkeypatch.undo()
    assert stats.aborted and stats.end_offset == 0
    assert [v for _, _, v in contents(lg)] == [b"v0", b"v1", b"v2", b"v3"]


def _crash_during_swap(monkeypatch: pytest.MonkeyPatch, lg: Log, old_renamed: bool) -> None:
    """Clean, but stop the swap as a crash would: the ``.swap`` segment is written, the old
    segments are (or are not yet) renamed ``.deleted``, and the log is never closed."""

    def crash(old: list, new: object, truncations: object = None) -> bool:  # type: ignore[type-arg]
        if old_renamed:
            for seg in old:
                seg.rename_with_suffix(files.DELETED_SUFFIX)
        raise SystemExit("crash")

    monkeypatch.setattr(lg, "replace_segments", crash)
    with pytest.raises(SystemExit):
        compact(lg)


@pytest.mark.parametrize("old_renamed", [False, True])
def test_a_swap_cut_short_by_a_crash_is_completed_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_renamed: bool
) -> None:
    lg = open_log(tmp_path, segment_bytes=10_000)
    for i in range(6):
        append(lg, (b"k%d" % (i % 2), b"v%d" % i))
        lg.roll()
    append(lg, (b"k2", b"tail"))
    expected = [(4, b"k0", b"v4"), (5, b"k1", b"v5"), (6, b"k2", b"tail")]
    _crash_during_swap(monkeypatch, lg, old_renamed)
    assert list(lg.dir.glob("*.log.swap"))
    reopened = Log.open(lg.dir, "t", 0, lg.config, now_ms=lambda: NOW)
    reopened.high_watermark = reopened.log_end_offset
    assert contents(reopened) == expected
    assert reopened.log_end_offset == 7
    left = sorted(p.name for p in lg.dir.iterdir() if ".log" in p.name)
    assert left == [files.log_file(lg.dir, s.base_offset).name for s in reopened.segments]


def test_a_half_written_cleaned_segment_is_removed_on_open(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    append(lg, (b"k", b"v"))
    lg.roll()
    append(lg, (b"k", b"w"))
    cleaned = files.suffixed(files.log_file(lg.dir, 0), files.CLEANED_SUFFIX)
    cleaned.write_bytes(b"\0" * 30)
    lg.close()
    reopened = Log.open(lg.dir, "t", 0, lg.config, now_ms=lambda: NOW)
    reopened.high_watermark = reopened.log_end_offset
    assert not cleaned.exists()
    assert contents(reopened) == [(0, b"k", b"v"), (1, b"k", b"w")]


def test_a_new_follower_copies_a_compacted_log(tmp_path: Path) -> None:
    """A replica that catches up after compaction (a new or long-dead follower) appends the
    leader's cleaned batches as they are: gaps, rewritten and empty batches."""
    lg = open_log(tmp_path)
    append(lg, (b"k", b"idempotent"), producer_id=42, producer_epoch=0, base_sequence=0)
    for i in range(6):
        append(lg, (b"k%d" % (i % 2), b"v%d" % i), (b"k", b"x%d" % i))
    lg.roll()
    compact(lg)
    data = bytes(lg.read(0, 1 << 20).records)
    follower = Log.open(tmp_path / "f" / "t-0", "t", 0, lg.config, now_ms=lambda: NOW)
    follower.append_as_follower(data, follower_batches(data), NOW)
    follower.high_watermark = follower.log_end_offset
    assert follower.log_end_offset == lg.log_end_offset
    assert contents(follower) == contents(lg)
    assert follower.producer_state.last_entry(42).last_seq == 0  # type: ignore[union-attr]


def test_the_cleaner_holds_one_segment_open_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lg = open_log(tmp_path, segment_bytes=100_000)
    for i in range(40):
        append(lg, (b"k%d" % (i % 3), b"v%d" % i))
        lg.roll()
    append(lg, (b"z", b"active"))
    open_now, most = 0, 0
    real_init, real_close = cleaner._SegmentReader.__init__, cleaner._SegmentReader.close

    def counting_init(self: object, fd: int, size: int, chunk: int) -> None:
        nonlocal open_now, most
        real_init(self, fd, size, chunk)  # type: ignore[arg-type]
        open_now += 1
        most = max(most, open_now)

    def counting_close(self: object) -> None:
        nonlocal open_now
        real_close(self)  # type: ignore[arg-type]
        open_now -= 1

    monkeypatch.setattr(cleaner._SegmentReader, "__init__", counting_init)
    monkeypatch.setattr(cleaner._SegmentReader, "close", counting_close)
    compact(lg)
    assert [k for _, k, _ in contents(lg)] == [b"k1", b"k2", b"k0", b"z"]
    assert most == 1 and open_now == 0


def test_aborted_records_are_removed_and_never_shadow_committed_ones(tmp_path: Path) -> None:
    """Kafka's cleaner: records of an aborted transaction go (they are not in the offset map,
    so a later aborted value never replaces a committed one), markers stay, and the aborted
    transaction stays in the cleaned segment's .txnindex; nothing past the LSO is cleaned.
    A marker whose transaction has no data left goes after its KIP-534 delete horizon."""
    from services.common.records.record import build_end_txn_marker, delete_horizon_ms
    from services.storage.log import AppendOrigin

    lg = open_log(tmp_path, segment_bytes=100_000)
    pid = 77

    def txn(seq: int, *records: tuple[bytes, bytes]) -> None:
        append(
            lg, *records, producer_id=pid, producer_epoch=0, base_sequence=seq,
            is_transactional=True,
        )  # fmt: skip

    def marker(commit: bool) -> None:
        buf = bytearray(
            build_end_txn_marker(
                commit, producer_id=pid, producer_epoch=0, coordinator_epoch=1, timestamp=NOW
            )
        )
        lg.append_as_leader(buf, validate_batches(buf), 0, NOW, origin=AppendOrigin.COORDINATOR)
        lg.high_watermark = lg.log_end_offset

    txn(0, (b"k", b"committed"))
    marker(True)  # offset 1
    txn(1, (b"k", b"aborted"), (b"j", b"aborted"))
    marker(False)  # offset 4
    lg.roll()
    txn(3, (b"k", b"open"))  # offset 5: an open transaction bounds the cleanable range
    lg.roll()
    rng = cleanable_range(lg, None, NOW)
    assert rng is not None and rng.first_uncleanable_offset == 5
    stats = clean(lg, rng, SETTINGS, NOW)
    assert stats.aborted_dropped == 2
    assert [(o, k, v) for o, k, v in contents(lg) if o < 5] == [
        (0, b"k", b"committed"),
        (1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x01"),  # COMMIT marker
        (4, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01"),  # ABORT marker
    ]
    entries = lg.segments[0].txn_index.entries
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in entries] == [(pid, 2, 4)]
    assert files.txn_index_file(lg.dir, 0).exists()
    # KIP-534: the next cleaning finds the ABORT marker without data: it gets a delete horizon
    # (the COMMIT marker's transaction still has its record: it stays as it is)
    day = lg.config.delete_retention_ms
    clean(lg, rng, SETTINGS, NOW)
    control = [h for h in iter_headers(bytes(lg.read(0, 1 << 20).records)) if h.is_control]
    assert [(h.base_offset, delete_horizon_ms(h)) for h in control] == [(1, None), (4, NOW + day)]
    clean(lg, rng, SETTINGS, NOW + day - 1)  # not yet
    assert len(lg.segments[0].txn_index.entries) == 1
    stats = clean(lg, rng, SETTINGS, NOW + day)
    assert stats.markers_dropped == 1
    assert [o for o, _, _ in contents(lg) if o < 5] == [0, 1]
    assert lg.segments[0].txn_index.entries == [] and lg.aborted_transactions(0, 5) == []
