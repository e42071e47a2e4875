"""Transactions in the log: markers, last stable offset, ``.txnindex`` (Kafka's format),
aborted transactions for read_committed, fencing, and the same state after a clean or
unclean restart, a truncation and on a follower."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import validate_batches
from services.common.records.record import Record, build_batch, build_end_txn_marker
from services.storage.log import AppendOrigin, Log, LogConfig, files
from services.storage.log.txn_index import ENTRY_SIZE, AbortedTxn, TxnIndex

NOW = 1_700_000_000_000
A, B = 1001, 2002


class Producer:
    """Transactional batches of one producer id, with sequences."""

    def __init__(self, pid: int, epoch: int = 0) -> None:
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def batch(self, n: int = 2) -> bytearray:
        recs = [Record(timestamp=NOW, value=b"%d-%d" % (self.pid, self.seq + i)) for i in range(n)]
        buf = build_batch(
            recs,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=True,
        )
        self.seq += n
        return bytearray(buf)

    def marker(
        self, commit: bool, coordinator_epoch: int = 1, epoch: int | None = None
    ) -> bytearray:
        return bytearray(
            build_end_txn_marker(
                commit,
                producer_id=self.pid,
                producer_epoch=self.epoch if epoch is None else epoch,
                coordinator_epoch=coordinator_epoch,
                timestamp=NOW,
            )
        )


def open_log(d: Path, **kw: object) -> Log:
    cfg = LogConfig(**{k: v for k, v in kw.items() if k == "segment_bytes"})  # type: ignore[arg-type]
    rest = {k: v for k, v in kw.items() if k != "segment_bytes"}
    return Log.open(d, "t", 0, cfg, now_ms=lambda: NOW, **rest)  # type: ignore[arg-type]


def append(log: Log, buf: bytearray, origin: AppendOrigin = AppendOrigin.CLIENT) -> int:
    info = log.append_as_leader(buf, validate_batches(buf), 0, NOW, origin=origin)
    log.high_watermark = log.log_end_offset  # as if every replica had it
    return info.first_offset


def mark(log: Log, buf: bytearray) -> int:
    return append(log, buf, AppendOrigin.COORDINATOR)


def state(log: Log) -> tuple[int, list[tuple[int, int]], bytes]:
    """(LSO, aborted transactions from 0 to the LSO, every .txnindex file's bytes)."""
    lso = log.last_stable_offset
    aborted = [(t.producer_id, t.first_offset) for t in log.aborted_transactions(0, lso)]
    raw = b"".join(p.read_bytes() for p in sorted(log.dir.glob("*" + files.TXN_INDEX_SUFFIX)))
    return lso, aborted, raw


def interleaved(log: Log) -> tuple[Producer, Producer]:
    """A: 0-1 open ... B: 2-3, A: 4-5, A aborts at 6, B commits at 7, B: 8-9 left open."""
    a, b = Producer(A), Producer(B)
    assert append(log, a.batch()) == 0
    assert append(log, b.batch()) == 2
    assert log.last_stable_offset == 0
    append(log, a.batch())
    assert mark(log, a.marker(False)) == 6
    assert log.last_stable_offset == 2  # B's transaction is still open
    assert mark(log, b.marker(True)) == 7
    assert log.last_stable_offset == 8
    assert append(log, b.batch()) == 8
    return a, b


def test_txn_index_entry_is_kafkas_34_bytes(tmp_path: Path) -> None:
    idx = TxnIndex(tmp_path / "x.txnindex")
    idx.append(AbortedTxn(7, 10, 20, 15))
    raw = (tmp_path / "x.txnindex").read_bytes()
    assert len(raw) == ENTRY_SIZE == 34
    assert raw == struct.pack(">hqqqq", 0, 7, 10, 20, 15)
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(7, 21, 20, 22))  # markers only move forward
    # a torn tail (crash in the middle of a write) keeps the whole entries
    (tmp_path / "x.txnindex").write_bytes(raw + raw[:10])
    assert TxnIndex(tmp_path / "x.txnindex").entries == [AbortedTxn(7, 10, 20, 15)]


def test_lso_aborted_list_and_index(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    interleaved(log)
    lso, aborted, raw = state(log)
    assert lso == 8 and aborted == [(A, 0)]
    # the abort at 6 was written while B's transaction (from 2) was open: LSO 2 in the entry
    assert raw == struct.pack(">hqqqq", 0, A, 0, 6, 2)
    # a fetch range that ends before the aborted data does not list it
    assert log.aborted_transactions(7, 8) == []
    # the LSO waits for the marker to be replicated (Kafka's unreplicated transactions)
    p = Producer(3003)
    append(log, p.batch())
    log.append_as_leader(
        m := p.marker(True), validate_batches(m), 0, NOW, origin=AppendOrigin.COORDINATOR
    )
    assert log.last_stable_offset == 8  # B still open; then B commits, replicated later
    log.append_as_leader(
        m := Producer(B, 0).marker(True),
        validate_batches(m),
        0,
        NOW,
        origin=AppendOrigin.COORDINATOR,
    )
    assert log.last_stable_offset == 8  # the high watermark has not reached the markers
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == log.log_end_offset == 14


def test_marker_fencing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a = Producer(A, epoch=2)
    append(log, a.batch())
    mark(log, a.marker(False, coordinator_epoch=5))
    with pytest.raises(KafkaError) as e:
        mark(log, a.marker(True, coordinator_epoch=4))
    assert e.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    with pytest.raises(KafkaError) as e:
        mark(log, a.marker(True, coordinator_epoch=5, epoch=1))
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as e:  # clients never write markers
        append(log, a.marker(True, coordinator_epoch=5))
    assert e.value.code == ErrorCode.INVALID_RECORD
    mark(log, a.marker(True, coordinator_epoch=6, epoch=3))  # a bumped epoch is fine


@pytest.mark.parametrize("clean", [True, False])
def test_restart_rebuilds_the_same_state(tmp_path: Path, clean: bool) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=300)
    interleaved(log)
    b = Producer(B)
    b.seq = 4
    for _ in range(3):  # more segments: the markers and data spread over several
        mark(log, b.marker(False))
        append(log, b.batch())
    assert len(log.segments) > 2
    before = state(log)
    if clean:
        log.close()
    else:  # crash before any flush: the index files are lost (the roll snapshots are not)
        for seg in log.segments:
            seg.close_handles()
        assert list(d.glob("*.snapshot"))
        for p in d.glob("*" + files.TXN_INDEX_SUFFIX):
            p.unlink()
    again = open_log(d, clean_shutdown=clean)
    again.high_watermark = again.log_end_offset
    assert state(again) == before
    assert again.producer_state.ongoing_txns() == log.producer_state.ongoing_txns()


def test_truncation_drops_index_entries_and_reopens_the_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    interleaved(log)
    log.truncate_to(6)  # the abort marker goes: A's transaction is open again
    log.high_watermark = log.log_end_offset
    assert state(log) == (0, [], b"")
    assert log.producer_state.ongoing_txns() == {A: 0, B: 2}


def test_follower_builds_the_same_index(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l" / "t-0", segment_bytes=300)
    interleaved(leader)
    follower = open_log(tmp_path / "f" / "t-0", segment_bytes=300)
    offset = 0
    while offset < leader.log_end_offset:
        read = leader.read(offset, 100)
        data = bytes(read.records)
        headers = validate_batches(bytearray(data))
        follower.append_as_follower(data, headers, NOW)
        offset = headers[-1].next_offset
    follower.high_watermark = follower.log_end_offset
    assert state(follower) == state(leader)


def test_retention_deletes_the_index_with_its_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    interleaved(log)
    log.roll()
    holder = next(i for i, seg in enumerate(log.segments) if seg.txn_index.path.exists())
    path = log.segments[holder].txn_index.path
    log.maybe_increment_log_start_offset(log.segments[holder + 1].base_offset)
    log.delete_retained_segments(NOW)
    log.purge_deleted(NOW + 10**9)
    assert not path.exists() and not list(log.dir.glob("*.txnindex*"))
