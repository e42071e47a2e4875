"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex`` (Kafka's LogSegment)."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from services.common.logging import get_logger
from services.common.records.batch import (
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    compute_crc,
)
from services.storage.log import files, reserve
from services.storage.log.config import LogConfig
from services.storage.log.index import NO_TIMESTAMP, OffsetIndex, TimeIndex
from services.storage.log.txn_index import TxnIndex

log = get_logger(__name__)

# Same layout as services.common.records.batch (record batch v2 header), used to build
# headers whose ``position`` is the absolute file position without an extra copy.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_INT32_MAX = 2**31 - 1
SCAN_CHUNK = 64 * 1024
RECOVERY_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SegmentRecovery:
    """What :meth:`LogSegment.recover` did."""

    bytes_truncated: int
    batches: int  # batches validated (CRC checked)
    start_position: int  # where validation began: 0, or the end of the trusted flushed prefix
    bytes_scanned: int  # bytes from there to the end of the file (validated or cut)


@dataclass(slots=True)
class _TrustedPrefix:
    """State of a segment at the end of its fsynced prefix (where validation resumes)."""

    next_offset: int
    position: int = 0
    last_index_position: int = 0
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    first_timestamp: int | None = None

    def __post_init__(self) -> None:
        if self.offset_of_max_timestamp < 0:
            self.offset_of_max_timestamp = self.next_offset


class LogSegment:
    """A segment of a partition log. Not thread-safe: the owning Log serializes mutations."""

    def __init__(
        self,
        dir: Path,
        base_offset: int,
        config: LogConfig,
        *,
        active: bool,
        created_ms: int,
        new: bool,
        suffix: str = "",
    ) -> None:
        self.dir = dir
        self.base_offset = base_offset
        self.suffix = suffix  # "" for a live segment, ".cleaned" / ".swap" while compacting
        self.log_path = files.suffixed(files.log_file(dir, base_offset), suffix)
        self.created_ms = created_ms
        self.roll_jitter_ms = config.random_segment_jitter()
        self._index_interval_bytes = config.index_interval_bytes
        self._preallocate = config.preallocate and new
        self._fd: int | None = None
        # File position up to which disk blocks are reserved (reserve.py); reserving stops for
        # good on a filesystem that refuses it.
        self._reserved_to = 0
        self._reserving = reserve.supported()
        if new:
            fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            if self._preallocate:
                os.ftruncate(fd, config.segment_bytes)
            self._fd = fd
            self.size = 0
            for p in (
                files.index_file(dir, base_offset),
                files.time_index_file(dir, base_offset),
                files.txn_index_file(dir, base_offset),
            ):
                files.suffixed(p, suffix).unlink(missing_ok=True)
        else:
            self.size = self.log_path.stat().st_size
        self.offset_index = OffsetIndex(
            files.suffixed(files.index_file(dir, base_offset), suffix),
            base_offset,
            config.segment_index_bytes,
            writable=active,
        )
        self.time_index = TimeIndex(
            files.suffixed(files.time_index_file(dir, base_offset), suffix),
            base_offset,
            config.segment_index_bytes,
            writable=active,
        )
        self.txn_index = TxnIndex(files.suffixed(files.txn_index_file(dir, base_offset), suffix))
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        self._rolling_based_timestamp: int | None = None
        last_entry = self.offset_index.last_entry
        self.bytes_since_last_index_entry = max(0, self.size - (last_entry[1] if last_entry else 0))

    # ----------------------------------------------------------------- basics
    @classmethod
    def create(
        cls, dir: Path, base_offset: int, config: LogConfig, now_ms: int, *, suffix: str = ""
    ) -> LogSegment:
        return cls(
            dir, base_offset, config, active=True, created_ms=now_ms, new=True, suffix=suffix
        )

    @classmethod
    def load(
        cls, dir: Path, base_offset: int, config: LogConfig, *, active: bool, suffix: str = ""
    ) -> LogSegment:
        path = files.suffixed(files.log_file(dir, base_offset), suffix)
        return cls(
            dir,
            base_offset,
            config,
            active=active,
            created_ms=int(path.stat().st_mtime * 1000),
            new=False,
            suffix=suffix,
        )

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self.size}, "
            f"max_timestamp={self.max_timestamp})"
        )

    @property
    def index_path(self) -> Path:
        return self.offset_index.path

    @property
    def time_index_path(self) -> Path:
        return self.time_index.path

    def fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_RDWR)
        return self._fd

    def read_bytes(self, position: int, size: int) -> bytes:
        return os.pread(self.fd(), size, position)

    def last_modified_ms(self) -> int:
        return int(self.log_path.stat().st_mtime * 1000)

    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime when no batch had one (Kafka)."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms()

    # ---------------------------------------------------------------- append
    def can_convert_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _INT32_MAX

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        data: bytes | bytearray | memoryview,
    ) -> None:
        """Append whole batches; adds index entries like Kafka's LogSegment.append.

        The offset index maps ``largest_offset`` (last offset of the appended set) to the
        position where the set starts, once more than ``index.interval.bytes`` were written
        since the previous entry.
        """
        n = len(data)
        if n == 0:
            return
        if not self.can_convert_offset(largest_offset):
            raise ValueError(f"offset {largest_offset} overflows segment {self.base_offset}")
        position = self.size
        if position == 0:
            self._rolling_based_timestamp = largest_timestamp
        if self._reserving and position + n > self._reserved_to:
            self._reserve(position, n)
        _pwrite_all(self.fd(), data, position)
        self.size = position + n
        if largest_timestamp > self.max_timestamp:
            self.max_timestamp = largest_timestamp
            self.offset_of_max_timestamp = offset_of_max_timestamp
        if self.bytes_since_last_index_entry > self._index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += n

    def _reserve(self, position: int, appending: int) -> None:
        length = reserve.ahead_bytes(position, appending)
        if reserve.reserve(self.fd(), position, length):
            self._reserved_to = position + length
        else:
            self._reserving = False
            log.info("segment_reserve_off", segment=str(self.log_path))

    # ------------------------------------------------------------------ scans
    def iter_headers(
        self, start: int = 0, end: int | None = None, chunk: int = SCAN_CHUNK
    ) -> Iterator[BatchHeader]:
        """Headers of the batches from file position ``start`` (trusted, already recovered data)."""
        end = self.size if end is None else min(end, self.size)
        fd = self.fd()
        pos = start
        while end - pos >= HEADER_SIZE:
            buf = os.pread(fd, min(max(chunk, HEADER_SIZE), end - pos), pos)
            n = len(buf)
            off = 0
            while n - off >= HEADER_SIZE:
                h = _header_at(buf, off, pos + off)
                if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + off + h.size > end:
                    return
                yield h
                off += h.size
            if off == 0:
                return
            pos += off

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchHeader | None:
        """Header of the first batch whose last offset is >= ``offset`` (None past the end)."""
        position = max(self.offset_index.lookup(offset)[1], start_position)
        for h in self.iter_headers(position):
            if h.base_offset + h.last_offset_delta >= offset:
                return h
        return None

    def set_index_interval_bytes(self, value: int) -> None:
        self._index_interval_bytes = value

    def read_next_offset(self) -> int:
        """Offset after the last batch (base offset when empty); scans from the last index entry."""
        return self.scan_tail()[0]

    def scan_tail(self) -> tuple[int, int]:
        """(next offset, end position of the last whole batch), scanning from the last index entry.

        An end position below ``size`` means trailing bytes that are not a batch (e.g. the
        zeros of a preallocated file that was never trimmed).
        """
        last_entry = self.offset_index.last_entry
        position = last_entry[1] if last_entry else 0
        next_offset, end = self.base_offset, position
        for h in self.iter_headers(position):
            next_offset, end = h.next_offset, h.position + h.size
        return next_offset, end

    def first_batch_timestamp(self) -> int:
        if self._rolling_based_timestamp is None:
            h = next(self.iter_headers(0, chunk=HEADER_SIZE), None)
            if h is None:
                return NO_TIMESTAMP
            self._rolling_based_timestamp = h.max_timestamp
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka: new batch timestamp - first batch timestamp, or wall time since creation."""
        ts = self.first_batch_timestamp()
        if ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def should_roll(
        self,
        *,
        max_segment_bytes: int,
        max_segment_ms: int,
        messages_size: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        now_ms: int,
    ) -> bool:
        reached_roll_ms = (
            self.time_waited_for_roll(now_ms, max_timestamp_in_messages)
            > max_segment_ms - self.roll_jitter_ms
        )
        return (
            self.size > max_segment_bytes - messages_size
            or (self.size > 0 and reached_roll_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or not self.can_convert_offset(max_offset_in_messages)
        )

    def find_by_timestamp(self, timestamp: int, starting_offset: int) -> BatchHeader | None:
        """First batch holding a record with timestamp >= ``timestamp`` at offset >= ``starting_offset``."""
        _, ts_offset = self.time_index.lookup_before(timestamp)
        position = self.offset_index.lookup(max(ts_offset, starting_offset))[1]
        for h in self.iter_headers(position):
            if (
                h.max_timestamp >= timestamp
                and h.base_offset + h.last_offset_delta >= starting_offset
            ):
                return h
        return None

    # --------------------------------------------------------------- recovery
    def recover(
        self,
        on_batch: Callable[[BatchHeader], None] | None = None,
        *,
        flushed_offset: int | None = None,
    ) -> SegmentRecovery:
        """Re-validate the batches (framing, magic, CRC32C over each batch, offsets), rebuild
        both indexes from the batch positions, cut the invalid tail.

        With ``flushed_offset`` (the log's recovery point, inside this segment) the bytes below
        it were fsynced and are trusted: their index entries are kept (the valid prefix of the
        files), the batch holding ``flushed_offset`` is found from the last kept entry by
        reading batch headers only, and validation starts there. ``on_batch`` sees every
        validated header (it rebuilds the leader-epoch cache).
        """
        self.offset_index.make_writable()
        self.time_index.make_writable()
        fd = self.fd()
        file_size = os.fstat(fd).st_size
        self.size = file_size
        start = _TrustedPrefix(self.base_offset)
        if flushed_offset is not None and flushed_offset > self.base_offset:
            start = self._trusted_prefix(flushed_offset, file_size)
        else:
            self.offset_index.reset()
            self.time_index.reset()
        valid = start.position
        last_index_entry = start.last_index_position
        batches = 0
        max_ts, max_ts_offset = start.max_timestamp, start.offset_of_max_timestamp
        expected_min = start.next_offset
        first_ts = start.first_timestamp
        reason = ""
        buf = b""
        buf_start = 0
        while True:
            if file_size - valid < LOG_OVERHEAD:
                reason = "partial batch header" if file_size > valid else ""
                break
            rel = valid - buf_start
            if rel < 0 or len(buf) - rel < LOG_OVERHEAD:
                buf, buf_start, rel = os.pread(fd, RECOVERY_CHUNK, valid), valid, 0
            base, length = _PREFIX.unpack_from(buf, rel)
            size = length + LOG_OVERHEAD
            if length < HEADER_SIZE - LOG_OVERHEAD:
                reason = f"invalid batch length {length}"
                break
            if valid + size > file_size:
                reason = "partial batch"
                break
            if len(buf) - rel < size:
                if size > RECOVERY_CHUNK:
                    buf, buf_start, rel = os.pread(fd, size, valid), valid, 0
                else:
                    buf, buf_start, rel = os.pread(fd, RECOVERY_CHUNK, valid), valid, 0
            if buf[rel + MAGIC_OFFSET] != CURRENT_MAGIC:
                reason = f"unsupported magic {buf[rel + MAGIC_OFFSET]}"
                break
            h = _header_at(buf, rel, valid)
            if compute_crc(buf, rel, size) != h.crc:
                reason = "CRC mismatch"
                break
            if (
                h.record_count < 0
                or h.last_offset_delta < 0
                or (h.record_count and h.last_offset_delta != h.record_count - 1)
            ):
                reason = "invalid record count"
                break
            if base < expected_min or not self.can_convert_offset(h.last_offset):
                reason = f"offset {base} out of order or outside the segment"
                break
            if valid == 0:
                first_ts = h.max_timestamp
            if h.max_timestamp > max_ts:
                max_ts, max_ts_offset = h.max_timestamp, h.last_offset
            if valid - last_index_entry > self._index_interval_bytes:
                self.offset_index.append(h.last_offset, valid)
                self.time_index.maybe_append(max_ts, max_ts_offset)
                last_index_entry = valid
            valid += size
            batches += 1
            expected_min = h.next_offset
            if on_batch is not None:
                on_batch(h)
        truncated = file_size - valid
        if truncated:
            log.warning(
                "segment_truncated",
                segment=str(self.log_path),
                position=valid,
                bytes_truncated=truncated,
                reason=reason or "trailing bytes",
            )
        reserve.release(fd, valid)  # also blocks reserved before an unclean shutdown
        self.size = valid
        self._reserved_to = valid
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_ts_offset
        self.time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
        self.bytes_since_last_index_entry = valid - last_index_entry
        self._rolling_based_timestamp = first_ts
        return SegmentRecovery(truncated, batches, start.position, file_size - start.position)

    def _trusted_prefix(self, flushed_offset: int, file_size: int) -> _TrustedPrefix:
        """Where validation resumes for a segment fsynced up to ``flushed_offset``.

        Index entries written after the last fsync may be missing or zero (the files are
        preallocated): only the leading entries that increase and lie below ``flushed_offset``
        (and inside the file) are kept. From the last one, batch headers (no CRC: the bytes
        were fsynced) lead to the first batch holding an offset >= ``flushed_offset``.
        """
        oi, ti = self.offset_index, self.time_index
        keep = 0
        prev_rel, prev_pos = -1, 0
        for rel, pos in oi.iter_file_entries():
            if rel <= prev_rel or pos <= prev_pos or pos >= file_size:
                break
            if self.base_offset + rel >= flushed_offset:
                break
            keep += 1
            prev_rel, prev_pos = rel, pos
        oi.truncate_to_entries(keep)
        keep = 0
        prev_ts, prev_off = -1, -1
        for ts, rel in ti.iter_file_entries():
            # ts <= 0 also stops at a zeroed (preallocated, never written) first entry
            if ts <= max(prev_ts, 0) or rel < prev_off or self.base_offset + rel >= flushed_offset:
                break
            keep += 1
            prev_ts, prev_off = ts, rel
        ti.truncate_to_entries(keep)
        last = oi.last_entry
        position = last[1] if last else 0
        out = _TrustedPrefix(self.base_offset, position, position)
        out.max_timestamp, out.offset_of_max_timestamp = ti.last_entry
        for h in self.iter_headers(position, file_size):
            if h.last_offset >= flushed_offset or h.base_offset < out.next_offset:
                break
            if out.first_timestamp is None and h.position == 0:
                out.first_timestamp = h.max_timestamp
            if h.max_timestamp > out.max_timestamp:
                out.max_timestamp, out.offset_of_max_timestamp = h.max_timestamp, h.last_offset
            out.position = h.position + h.size
            out.next_offset = h.next_offset
        return out

    # ------------------------------------------------------------- truncation
    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Remove batches whose last offset >= ``offset``; returns bytes removed. Segment becomes active."""
        mapping = self.translate_offset(offset)
        self.offset_index.make_writable()
        self.time_index.make_writable()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = 0
        if mapping is not None:
            removed = self.size - mapping.position
            os.ftruncate(self.fd(), mapping.position)  # reserved blocks go too
            self.size = mapping.position
            self._reserved_to = self.size
        if self.size == 0:
            self.created_ms = now_ms
            self._rolling_based_timestamp = None
        last_entry = self.offset_index.last_entry
        self.bytes_since_last_index_entry = self.size - (last_entry[1] if last_entry else 0)
        self._reload_max_timestamp()
        return removed

    def _reload_max_timestamp(self) -> None:
        ts, off = self.time_index.last_entry
        position = self.offset_index.lookup(off)[1]
        for h in self.iter_headers(position):
            if h.max_timestamp > ts:
                ts, off = h.max_timestamp, h.last_offset
        self.max_timestamp, self.offset_of_max_timestamp = ts, off

    # -------------------------------------------------------------- lifecycle
    def make_active(self) -> None:
        self.offset_index.make_writable()
        self.time_index.make_writable()

    def on_become_inactive(self) -> None:
        """On roll: final time-index entry, trim indexes, give back the log file's reserved
        blocks (and cut a preallocated file to its records)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.make_readonly()
        self.time_index.make_readonly()
        if self._fd is not None:
            reserve.release(self._fd, self.size)
            self._reserved_to = self.size

    def flush(self) -> None:
        fsync_targets(self.flush_targets())

    def flush_targets(self) -> list[int | Path]:
        """What to fsync for this segment, usable outside the log's lock: duplicates of the
        open descriptors (a concurrent close or rename cannot redirect them; the caller closes
        them, ``fsync_targets`` does), the paths of the files not open (written by an earlier
        process, or an index closed at its roll), opened one at a time when synced."""
        out: list[int | Path] = []
        for fd, path in (
            (self._fd, self.log_path),
            (self.offset_index.handle, self.offset_index.path),
            (self.time_index.handle, self.time_index.path),
        ):
            out.append(os.dup(fd) if fd is not None else path)
        txn = self.txn_index.flush_target()
        if txn is not None:
            out.append(txn)
        return out

    def close(self) -> None:
        self.on_become_inactive()
        self.close_handles()

    def close_handles(self) -> None:
        self.offset_index.close_handle()
        self.time_index.close_handle()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename_with_suffix(self, suffix: str) -> list[Path]:
        """Close and rename every file of the segment to ``<name><suffix>`` (e.g. ``.deleted``)."""
        self.close_handles()
        renamed: list[Path] = []
        old = self.log_path
        if old.exists():
            new = old.with_name(old.name + suffix)
            os.replace(old, new)
            self.log_path = new
            renamed.append(new)
        for idx in (self.offset_index, self.time_index):
            if idx.path.exists():
                idx.rename(idx.path.with_name(idx.path.name + suffix))
                renamed.append(idx.path)
        txn = self.txn_index.path
        new = txn.with_name(txn.name + suffix)
        self.txn_index.path = new
        if txn.exists():
            os.replace(txn, new)
            renamed.append(new)
        return renamed

    def change_suffix(self, suffix: str) -> None:
        """Close and rename the log and index files from the current suffix to ``suffix``
        (compaction: ``.cleaned`` -> ``.swap`` -> live)."""
        self.close_handles()
        new_log = files.suffixed(files.log_file(self.dir, self.base_offset), suffix)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        for idx, plain in (
            (self.offset_index, files.index_file(self.dir, self.base_offset)),
            (self.time_index, files.time_index_file(self.dir, self.base_offset)),
        ):
            if idx.path.exists():
                idx.rename(files.suffixed(plain, suffix))
            else:
                idx.path = files.suffixed(plain, suffix)
        txn = files.suffixed(files.txn_index_file(self.dir, self.base_offset), suffix)
        if self.txn_index.path.exists():
            os.replace(self.txn_index.path, txn)
        self.txn_index.path = txn
        self.suffix = suffix

    def delete_files(self) -> None:
        self.close_handles()
        for p in (
            self.log_path,
            self.offset_index.path,
            self.time_index.path,
            self.txn_index.path,
        ):
            p.unlink(missing_ok=True)


def fsync_targets(targets: list[int | Path]) -> None:
    """fsync each descriptor (then close it) or file (opened for it; a file gone meanwhile, e.g.
    a deleted segment, needs none). Every descriptor is closed even when an fsync fails."""
    error: OSError | None = None
    for target in targets:
        try:
            if isinstance(target, int):
                try:
                    os.fsync(target)
                finally:
                    os.close(target)
            else:
                try:
                    fd = os.open(target, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            error = error or exc
    if error is not None:
        raise error


def _header_at(buf: bytes, offset: int, position: int) -> BatchHeader:
    """Header at ``offset`` in ``buf``, tagged with its absolute file ``position``."""
    return BatchHeader(*_HEADER.unpack_from(buf, offset), position=position)  # type: ignore[misc]


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n
