"""Idempotent/transactional producer state of one partition (Kafka's ProducerStateManager).

Per producer id: the current producer epoch, metadata of its last 5 batches (for
duplicate detection), the coordinator epoch and the first offset of an ongoing
transaction. Sequence rules follow Kafka's ``ProducerAppendInfo``:

* epoch lower than the current one -> INVALID_PRODUCER_EPOCH (client appends);
* new (higher) epoch -> the sequence must restart at 0 (unless the producer has no state);
* same epoch -> the first sequence must follow the last one (wrapping after int32 max);
* unknown producer (state expired or deleted) -> any sequence is accepted;
* a batch with the same epoch and sequence range as one of the last 5 -> duplicate.

Snapshots use Kafka's own ``<offset>.snapshot`` format (version 1, readable by Kafka's
tools), all integers big-endian::

    int16 version = 1
    uint32 crc      CRC32C of everything after this field
    int32 count
    count x { int64 producer_id, int16 epoch, int32 last_sequence, int64 last_offset,
              int32 offset_delta, int64 timestamp, int32 coordinator_epoch,
              int64 current_txn_first_offset (-1 = none) }

Like Kafka, a snapshot keeps only the LAST batch of each producer; the batches after
the snapshot are replayed from the log headers when a log is opened.
"""

from __future__ import annotations

import enum
import os
import secrets
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import crc32c

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.records.batch import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from services.common.records.record import EndTxnMarker

log = get_logger(__name__)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
INT32_MAX = 2**31 - 1
SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

_SNAP_HEAD = struct.Struct(">hI")
_SNAP_COUNT = struct.Struct(">i")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = 6  # version (2) + crc (4)


class AppendOrigin(enum.Enum):
    CLIENT = "client"  # full validation (sequence + epoch + duplicates)
    COORDINATOR = "coordinator"  # group/txn coordinators: epoch checks only
    REPLICATION = "replication"  # follower appends: no validation


class CorruptSnapshotError(Exception):
    pass


def _decrement_sequence(seq: int, by: int) -> int:
    return seq - by if seq - by >= 0 else INT32_MAX - (by - seq) + 1


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker at ``last_offset`` (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        last_seq = header.last_sequence
        for b in self.batches:
            if b.first_seq == header.base_sequence and b.last_seq == last_seq:
                return b
        return None

    def maybe_update_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
    ) -> None:
        self.maybe_update_epoch(epoch)
        self.batches.append(
            BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp)
        )
        self.last_timestamp = timestamp


class ProducerStateManager:
    """Producer id -> state, with Kafka-format snapshots in the partition directory."""

    def __init__(
        self,
        dir: Path,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.dir = dir
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self._producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        self._last_snap_offset = 0
        # transactions whose marker is not yet below the high watermark (Kafka's
        # unreplicatedTxns): their data stays unstable until the marker is replicated
        self._unreplicated: list[CompletedTxn] = []
        # producer id -> first offset of its open transaction (kept as entries change, so the
        # LSO asked on every fetch does not walk every producer)
        self._ongoing: dict[int, int] = {}
        # KIP-890 part 1 (Kafka's VerificationStateEntry): producer id -> (epoch, guard, time)
        # of a first transactional append being verified with the transaction coordinator; a
        # marker of the producer drops it, so an append verified before the marker fails
        self._verifying: dict[int, tuple[int, int, int]] = {}

    # ------------------------------------------------------------------ reads
    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        return MappingProxyType(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an ongoing transaction or of a completed one whose marker
        is not replicated yet (the last stable offset is min(this, high watermark))."""
        if not self._ongoing and not self._unreplicated:
            return None
        offsets = list(self._ongoing.values())
        offsets.extend(t.first_offset for t in self._unreplicated)
        return min(offsets)

    def ongoing_txns(self) -> dict[int, int]:
        """Producer id -> first offset of its ongoing transaction."""
        return dict(self._ongoing)

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO right after ``completed`` ends (Kafka's lastStableOffset(completedTxn)):
        the first offset of the oldest other ongoing transaction, else the marker's next."""
        others = [
            first for pid, first in self.ongoing_txns().items() if pid != completed.producer_id
        ]
        return min(others) if others else completed.last_offset + 1

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Transactions whose marker is now below the high watermark are stable."""
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]

    # ----------------------------------------------------- KIP-890 verification
    def has_ongoing_txn(self, producer_id: int, epoch: int) -> bool:
        entry = self._producers.get(producer_id)
        return (
            entry is not None
            and entry.current_txn_first_offset is not None
            and entry.producer_epoch == epoch
        )

    def verification_guard(self, producer_id: int, epoch: int) -> int:
        """The guard of ``producer_id``'s verification at ``epoch`` (started if none is)."""
        state = self._verifying.get(producer_id)
        if state is not None and state[0] == epoch:
            return state[1]
        guard = secrets.randbits(62) + 1
        self._verifying[producer_id] = (epoch, guard, self._now_ms())
        return guard

    def is_verified(self, producer_id: int, epoch: int, guard: int) -> bool:
        """Whether ``guard`` is the current verification of ``producer_id`` at ``epoch``: false
        once a marker of the producer landed after the guard was handed out."""
        state = self._verifying.get(producer_id)
        return guard != 0 and state is not None and state[0] == epoch and state[1] == guard

    # ------------------------------------------------------------- validation
    def check(
        self,
        header: BatchHeader,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        first_offset: int = -1,
    ) -> BatchMetadata | None:
        """Validate one batch against the current state (no change).

        Returns the metadata of the batch it duplicates, or None; raises KafkaError
        (INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE).
        """
        return self.analyze([(header, first_offset)], origin)

    def analyze(
        self,
        batches: Iterable[tuple[BatchHeader, int]],
        origin: AppendOrigin = AppendOrigin.CLIENT,
        markers: Mapping[int, EndTxnMarker] | None = None,
    ) -> BatchMetadata | None:
        """Validate the batches of one append, each (header, first offset), in order;
        ``markers`` holds the transaction marker of each control batch by its index.
        Markers raise INVALID_PRODUCER_EPOCH (older producer epoch) and
        TRANSACTION_COORDINATOR_FENCED (older coordinator epoch) unless replicated."""
        working: dict[int, ProducerStateEntry] = {}
        for i, (header, first_offset) in enumerate(batches):
            marker = markers.get(i) if markers else None
            pid = header.producer_id
            if pid == NO_PRODUCER_ID:
                continue
            committed = self._producers.get(pid)
            if origin is AppendOrigin.CLIENT and committed is not None and pid not in working:
                duplicate = committed.find_duplicate(header)
                if duplicate is not None:
                    return duplicate
            current = working.get(pid) or committed
            self._validate(current, header, first_offset, origin, marker)
            updated = current.copy() if current is not None else ProducerStateEntry(pid)
            self._apply(
                updated, header, first_offset, first_offset + header.last_offset_delta, marker
            )
            working[pid] = updated
        return None

    def _validate(
        self,
        entry: ProducerStateEntry | None,
        header: BatchHeader,
        offset: int,
        origin: AppendOrigin,
        marker: EndTxnMarker | None = None,
    ) -> None:
        pid, epoch = header.producer_id, header.producer_epoch
        current_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
        if epoch < current_epoch:
            msg = (
                f"Epoch of producer {pid} at offset {offset} is {epoch}, which is smaller than "
                f"the last seen epoch {current_epoch}"
            )
            if origin is AppendOrigin.REPLICATION:
                log.warning(
                    "producer_epoch_regression",
                    producer_id=pid,
                    epoch=epoch,
                    current_epoch=current_epoch,
                    offset=offset,
                )
                return
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, msg)
        if header.is_control:
            if marker is not None and entry is not None:
                self._check_coordinator_epoch(entry, marker, offset, origin)
            return
        if origin is AppendOrigin.CLIENT:
            seq = header.base_sequence
            if epoch != current_epoch:
                if seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                    raise KafkaError(
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"Invalid sequence number for new epoch of producer {pid} at offset "
                        f"{offset}: {epoch} (request epoch), {seq} (seq. number), "
                        f"{current_epoch} (current producer epoch)",
                    )
            else:
                last_seq = entry.last_seq if entry is not None else NO_SEQUENCE
                if not _in_sequence(last_seq, seq):
                    raise KafkaError(
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"Out of order sequence number for producer {pid} at offset {offset}: "
                        f"{seq} (incoming seq. number), {last_seq} (current end sequence number)",
                    )
        if (
            origin is not AppendOrigin.REPLICATION
            and entry is not None
            and entry.current_txn_first_offset is not None
            and not header.is_transactional
        ):
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"Expected transactional write from producer {pid} at offset {offset}",
            )

    @staticmethod
    def _check_coordinator_epoch(
        entry: ProducerStateEntry, marker: EndTxnMarker, offset: int, origin: AppendOrigin
    ) -> None:
        if entry.coordinator_epoch <= marker.coordinator_epoch:
            return
        msg = (
            f"Invalid coordinator epoch for producer {entry.producer_id} at offset {offset}: "
            f"{marker.coordinator_epoch} (zombie), {entry.coordinator_epoch} (current)"
        )
        if origin is AppendOrigin.REPLICATION:
            log.info(
                "stale_coordinator_epoch_replicated", producer_id=entry.producer_id, offset=offset
            )
            return
        raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED, msg)

    @staticmethod
    def _apply(
        entry: ProducerStateEntry,
        header: BatchHeader,
        first_offset: int,
        last_offset: int,
        marker: EndTxnMarker | None = None,
    ) -> CompletedTxn | None:
        if header.is_control:
            # COMMIT/ABORT marker: the ongoing transaction (if any) ends here; only a
            # non-empty one is a completed transaction (LSO, transaction index)
            completed = None
            if marker is not None and entry.current_txn_first_offset is not None:
                completed = CompletedTxn(
                    entry.producer_id,
                    entry.current_txn_first_offset,
                    first_offset,
                    not marker.commit,
                )
            entry.maybe_update_epoch(header.producer_epoch)
            entry.current_txn_first_offset = None
            if marker is not None:
                entry.coordinator_epoch = marker.coordinator_epoch
            entry.last_timestamp = header.max_timestamp
            return completed
        entry.add_batch(
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            first_offset,
            last_offset,
            header.max_timestamp,
        )
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
        return None

    # ---------------------------------------------------------------- updates
    def update(
        self,
        header: BatchHeader,
        first_offset: int,
        last_offset: int,
        marker: EndTxnMarker | None = None,
    ) -> CompletedTxn | None:
        """Apply a batch that was appended at [first_offset, last_offset] (validated before);
        a marker (``marker``: its COMMIT/ABORT record) returns the transaction it completed."""
        completed = None
        if header.producer_id != NO_PRODUCER_ID:
            entry = self._producers.get(header.producer_id)
            if entry is None:
                entry = self._producers[header.producer_id] = ProducerStateEntry(header.producer_id)
            completed = self._apply(entry, header, first_offset, last_offset, marker)
            if header.is_control:
                self._verifying.pop(header.producer_id, None)
            if completed is not None:
                self._unreplicated.append(completed)
            if entry.current_txn_first_offset is None:
                self._ongoing.pop(entry.producer_id, None)
            else:
                self._ongoing[entry.producer_id] = entry.current_txn_first_offset
        self.map_end_offset = last_offset + 1
        return completed

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        """Forget producers idle for ``producer.id.expiration.ms`` without an open transaction."""
        now = self._now_ms() if now_ms is None else now_ms
        expired = [pid for pid, e in self._producers.items() if self._is_expired(e, now)]
        for pid in expired:
            del self._producers[pid]
        for pid, (_, _, started) in list(self._verifying.items()):
            if now - started >= self.producer_id_expiration_ms:
                del self._verifying[pid]
        return expired

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset
        latest = self.latest_snapshot_offset()
        self._last_snap_offset = latest if latest is not None else log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget every producer and delete every snapshot."""
        self._producers.clear()
        self._unreplicated.clear()
        self._ongoing.clear()
        self._verifying.clear()
        for off in self.snapshot_offsets():
            self.remove_snapshot(off)
        self._last_snap_offset = 0
        self.map_end_offset = offset

    def clear(self) -> None:
        self._producers.clear()
        self._unreplicated.clear()
        self._ongoing.clear()
        self._verifying.clear()

    # -------------------------------------------------------------- snapshots
    def snapshot_path(self, offset: int) -> Path:
        return self.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        out: list[int] = []
        if not self.dir.exists():
            return out
        for p in self.dir.iterdir():
            name = p.name
            if (
                name.endswith(SNAPSHOT_SUFFIX)
                and len(name) == 20 + len(SNAPSHOT_SUFFIX)
                and name[:20].isdigit()
            ):
                out.append(int(name[:20]))
        return sorted(out)

    def latest_snapshot_offset(self) -> int | None:
        offsets = self.snapshot_offsets()
        return offsets[-1] if offsets else None

    def take_snapshot(self, *, sync: bool = True) -> Path | None:
        """Write ``<map_end_offset>.snapshot`` unless a snapshot at that offset or later exists."""
        if self.map_end_offset <= self._last_snap_offset:
            return None
        path = self.snapshot_path(self.map_end_offset)
        write_snapshot(path, self._producers.values(), sync=sync)
        log.debug("producer_snapshot_written", path=str(path), producers=len(self._producers))
        self._last_snap_offset = self.map_end_offset
        return path

    def remove_snapshot(self, offset: int) -> None:
        self.snapshot_path(offset).unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off < offset:
                self.remove_snapshot(off)

    def delete_snapshots_after(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off > offset:
                self.remove_snapshot(off)

    def load_snapshot(
        self, log_start_offset: int, max_offset: int, at_most: int | None = None
    ) -> int:
        """Reset state from the latest valid snapshot at or below ``max_offset`` (and
        ``at_most``, when the log from there must be replayed anyway: recovered segments).

        Snapshots above ``max_offset`` or at/below the log start (except one equal to it) are
        deleted. Returns the offset the state is valid up to (``map_end_offset``): the caller
        replays the log from there.
        """
        self._producers.clear()
        self._unreplicated.clear()
        self._ongoing.clear()
        self._verifying.clear()
        for off in self.snapshot_offsets():
            if off > max_offset or off < log_start_offset:
                self.remove_snapshot(off)
        now = self._now_ms()
        for off in reversed(self.snapshot_offsets()):
            if at_most is not None and off > at_most:
                continue
            path = self.snapshot_path(off)
            try:
                entries = read_snapshot(path)
            except CorruptSnapshotError as e:
                log.warning("producer_snapshot_corrupt", path=str(path), error=str(e))
                self.remove_snapshot(off)
                continue
            for entry in entries:
                if not self._is_expired(entry, now):
                    self._producers[entry.producer_id] = entry
                    if entry.current_txn_first_offset is not None:
                        self._ongoing[entry.producer_id] = entry.current_txn_first_offset
            self.map_end_offset = self._last_snap_offset = off
            return off
        self.map_end_offset = self._last_snap_offset = log_start_offset
        return log_start_offset


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    items = list(entries)
    buf = bytearray(_ENTRIES_OFFSET + _SNAP_COUNT.size + len(items) * _SNAP_ENTRY.size)
    _SNAP_COUNT.pack_into(buf, _ENTRIES_OFFSET, len(items))
    pos = _ENTRIES_OFFSET + _SNAP_COUNT.size
    for e in sorted(items, key=lambda x: x.producer_id):
        _SNAP_ENTRY.pack_into(
            buf,
            pos,
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
        )
        pos += _SNAP_ENTRY.size
    _SNAP_HEAD.pack_into(buf, 0, SNAPSHOT_VERSION, crc32c.crc32c(memoryview(buf)[_ENTRIES_OFFSET:]))
    return bytes(buf)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < _ENTRIES_OFFSET + _SNAP_COUNT.size:
        raise CorruptSnapshotError("snapshot too short")
    version, crc = _SNAP_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if crc32c.crc32c(memoryview(data)[_ENTRIES_OFFSET:]) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    (count,) = _SNAP_COUNT.unpack_from(data, _ENTRIES_OFFSET)
    pos = _ENTRIES_OFFSET + _SNAP_COUNT.size
    if count < 0 or len(data) != pos + count * _SNAP_ENTRY.size:
        raise CorruptSnapshotError("snapshot size does not match its entry count")
    out: list[ProducerStateEntry] = []
    for (
        pid,
        epoch,
        last_seq,
        last_offset,
        delta,
        ts,
        coord_epoch,
        txn_first,
    ) in _SNAP_ENTRY.iter_unpack(data[pos:]):
        entry = ProducerStateEntry(
            pid,
            epoch,
            coordinator_epoch=coord_epoch,
            last_timestamp=ts,
            current_txn_first_offset=txn_first if txn_first >= 0 else None,
        )
        if last_offset >= 0:
            first_seq = _decrement_sequence(last_seq, delta) if last_seq >= 0 else NO_SEQUENCE
            entry.batches.append(
                BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, ts)
            )
        out.append(entry)
    return out


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], *, sync: bool = True) -> None:
    data = encode_snapshot(entries)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    return decode_snapshot(path.read_bytes())
