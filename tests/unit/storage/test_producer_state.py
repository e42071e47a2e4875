"""Idempotent producer state: duplicates, sequence/epoch rules, snapshots, restart."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import validate_batches
from services.common.records.record import Record, build_batch, build_end_txn_marker
from services.storage.log import AppendOrigin, Log, LogConfig
from services.storage.producer_state import (
    INT32_MAX,
    CorruptSnapshotError,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
)

NOW = 1_700_000_000_000
PID = 4242


def make_batch(
    seq: int, n: int = 2, epoch: int = 0, pid: int = PID, txn: bool = False, ts: int = NOW
) -> bytearray:
    recs = [Record(timestamp=ts, value=b"v%d" % i) for i in range(n)]
    return bytearray(
        build_batch(
            recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn
        )
    )


def open_log(tmp_path: Path, **cfg: object) -> Log:
    return Log.open(tmp_path / "t-0", "t", 0, LogConfig(**cfg), now_ms=lambda: NOW)  # type: ignore[arg-type]


def append(log: Log, buf: bytearray, origin: AppendOrigin = AppendOrigin.CLIENT):
    return log.append_as_leader(buf, validate_batches(buf), 0, NOW, origin=origin)


def error_code(log: Log, buf: bytearray) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        append(log, buf)
    return e.value.code


def test_duplicate_returns_original_offsets_and_is_not_appended(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = append(log, make_batch(0))
    second = append(log, make_batch(2, n=3))
    size = log.size_bytes()
    dup = append(log, make_batch(0))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (
        first.first_offset,
        first.last_offset,
    )
    dup2 = append(log, make_batch(2, n=3))
    assert dup2.duplicate and (dup2.first_offset, dup2.last_offset) == (2, 4)
    assert not second.duplicate
    assert log.size_bytes() == size and log.log_end_offset == 5


def test_only_the_last_five_batches_are_remembered(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(6):
        append(log, make_batch(2 * i))
    assert append(log, make_batch(2)).duplicate  # 2nd batch: still among the last five
    assert error_code(log, make_batch(0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_and_epoch_rules(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, make_batch(0))
    assert error_code(log, make_batch(5)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # gap
    assert error_code(log, make_batch(1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlap
    append(log, make_batch(2))
    # a new epoch must restart at sequence 0
    assert error_code(log, make_batch(4, epoch=1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    append(log, make_batch(0, epoch=1))
    # the old epoch is now fenced
    assert error_code(log, make_batch(4, epoch=0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    # replication does not validate
    assert not log.append_as_follower(*_assigned(log, make_batch(9, epoch=0))).duplicate
    # an unknown producer (state expired or deleted) may start at any sequence
    assert not append(log, make_batch(77, pid=999)).duplicate
    append(log, make_batch(79, pid=999))


def _assigned(log: Log, buf: bytearray) -> tuple[bytearray, list]:
    struct.pack_into(">q", buf, 0, log.log_end_offset)
    return buf, validate_batches(buf)


def test_sequence_wraps_after_int32_max(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, make_batch(INT32_MAX - 1, n=2, pid=7))  # sequences MAX-1, MAX
    entry = log.producer_state.last_entry(7)
    assert entry is not None and entry.last_seq == INT32_MAX
    append(log, make_batch(0, n=1, pid=7))
    assert log.producer_state.last_entry(7).last_seq == 0
    assert error_code(log, make_batch(2, n=1, pid=7)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_transactions_and_markers(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, make_batch(0, txn=True))
    assert log.producer_state.last_entry(PID).current_txn_first_offset == 0
    assert error_code(log, make_batch(2)) == ErrorCode.INVALID_TXN_STATE
    marker = bytearray(
        build_end_txn_marker(
            True, producer_id=PID, producer_epoch=0, coordinator_epoch=3, timestamp=NOW
        )
    )
    append(log, marker, origin=AppendOrigin.COORDINATOR)
    assert log.producer_state.last_entry(PID).current_txn_first_offset is None
    append(log, make_batch(2))


def test_dedup_survives_clean_and_unclean_restart(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    for i in range(8):
        append(log, make_batch(2 * i, n=2))
    assert len(log.segments) > 1
    log.close()
    snap = tmp_path / "t-0" / f"{log.log_end_offset:020d}.snapshot"
    assert snap.exists()
    again = Log.open(
        tmp_path / "t-0",
        "t",
        0,
        LogConfig(segment_bytes=400),
        now_ms=lambda: NOW,
        clean_shutdown=True,
    )
    dup = append(again, make_batch(14, n=2))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (14, 15)
    assert error_code(again, make_batch(17)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    append(again, make_batch(16))
    # crash: no close, no snapshot at the end; state comes from the last roll snapshot + replay
    for seg in again.segments:
        seg.close_handles()
    snap.unlink()
    crashed = Log.open(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=400), now_ms=lambda: NOW)
    assert append(crashed, make_batch(16)).duplicate
    assert append(crashed, make_batch(14)).duplicate  # replayed batches keep up to five
    append(crashed, make_batch(18))


def test_truncation_reloads_producer_state(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    for i in range(8):
        append(log, make_batch(2 * i, n=2))
    log.truncate_to(10)
    assert log.producer_state.last_entry(PID).last_seq == 9
    append(log, make_batch(10))


def test_snapshot_is_kafkas_format() -> None:
    entry = ProducerStateEntry(
        PID,
        producer_epoch=3,
        coordinator_epoch=2,
        last_timestamp=NOW,
        current_txn_first_offset=None,
    )
    entry.add_batch(3, 10, 14, 100, 104, NOW)
    data = encode_snapshot([entry])
    version, crc = struct.unpack_from(">hI", data, 0)
    assert version == 1 and crc == crc32c.crc32c(data[6:])
    assert struct.unpack_from(">i", data, 6) == (1,)
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (PID, 3, 14, 104, 4, NOW, 2, -1)
    assert len(data) == 10 + 46
    (decoded,) = decode_snapshot(data)
    assert decoded.producer_epoch == 3 and decoded.coordinator_epoch == 2
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in decoded.batches] == [
        (10, 14, 100, 104)
    ]
    corrupt = bytearray(data)
    corrupt[-1] ^= 1
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(corrupt))


def test_corrupt_snapshot_falls_back_to_an_older_one(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path, now_ms=lambda: NOW)
    buf = make_batch(0)
    (h,) = validate_batches(buf)
    psm.update(h, 0, 1)
    assert psm.take_snapshot() == tmp_path / "00000000000000000002.snapshot"
    psm.update_map_end_offset(5)
    psm.take_snapshot()
    (tmp_path / "00000000000000000005.snapshot").write_bytes(b"\0\1garbage")
    fresh = ProducerStateManager(tmp_path, now_ms=lambda: NOW)
    assert fresh.load_snapshot(0, 10) == 2
    assert fresh.last_entry(PID).last_seq == 1
    assert not (tmp_path / "00000000000000000005.snapshot").exists()


def test_expired_producers_are_removed(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000, now_ms=lambda: NOW)
    (h,) = validate_batches(make_batch(0, ts=NOW))
    psm.update(h, 0, 1)
    assert psm.remove_expired_producers(NOW + 999) == []
    assert psm.remove_expired_producers(NOW + 1000) == [PID]
    assert psm.last_entry(PID) is None


def test_retry_reaching_the_new_leader_is_a_duplicate(tmp_path: Path) -> None:
    """Issue 12 §0, storage side: batches the old leader appended and a follower replicated
    but never acknowledged are recognised by that follower once it leads - whichever of the
    last five the client retries - and the batch after them continues the sequence."""
    old = Log.open(tmp_path / "a" / "t-0", "t", 0, LogConfig(), now_ms=lambda: NOW)
    new = Log.open(tmp_path / "b" / "t-0", "t", 0, LogConfig(), now_ms=lambda: NOW)
    placed = [append(old, make_batch(2 * i)) for i in range(6)]
    copied = old.read(0, 1 << 20).records
    new.append_as_follower(copied, validate_batches(bytearray(copied)))
    # the client retries the unacknowledged batches in order; the oldest fell out of the window
    assert error_code(new, make_batch(0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    for i in range(1, 6):
        dup = append(new, make_batch(2 * i))
        assert dup.duplicate
        assert (dup.first_offset, dup.last_offset) == (
            placed[i].first_offset,
            placed[i].last_offset,
        )
    assert new.log_end_offset == old.log_end_offset
    assert append(new, make_batch(12)).first_offset == old.log_end_offset
    # a new leader that truncated (it was behind) rebuilds its state from what it kept
    behind = Log.open(tmp_path / "c" / "t-0", "t", 0, LogConfig(), now_ms=lambda: NOW)
    behind.append_as_follower(copied, validate_batches(bytearray(copied)))
    behind.truncate_to(placed[3].first_offset)
    assert append(behind, make_batch(4)).duplicate
    assert append(behind, make_batch(6)).first_offset == placed[3].first_offset


def test_a_marker_between_verification_and_append_voids_the_guard(tmp_path: Path) -> None:
    """KIP-890 part 1 (Kafka's VerificationStateEntry): the guard of a verification started
    before the producer's marker landed no longer verifies anything; a new one is handed out."""
    log = open_log(tmp_path)
    state = log.producer_state
    assert not state.has_ongoing_txn(PID, 0)
    guard = state.verification_guard(PID, 0)
    assert guard > 0 and state.verification_guard(PID, 0) == guard  # one per producer and epoch
    assert state.is_verified(PID, 0, guard) and not state.is_verified(PID, 1, guard)
    assert not state.is_verified(PID, 0, 0)
    append(log, make_batch(0, txn=True))  # appended with the guard: the transaction is open
    assert state.has_ongoing_txn(PID, 0) and not state.has_ongoing_txn(PID, 1)
    marker = bytearray(
        build_end_txn_marker(
            True, producer_id=PID, producer_epoch=0, coordinator_epoch=3, timestamp=NOW
        )
    )
    append(log, marker, origin=AppendOrigin.COORDINATOR)
    assert not state.has_ongoing_txn(PID, 0)
    assert not state.is_verified(PID, 0, guard)  # a late batch of the ended transaction
    assert state.verification_guard(PID, 0) != guard
