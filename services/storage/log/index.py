"""Kafka's sparse segment indexes: ``.index`` (offset -> position) and ``.timeindex``.

File layout is Kafka's, big-endian, no header:

* ``.index``     8-byte entries: int32 offset relative to the segment base, int32 file position
* ``.timeindex`` 12-byte entries: int64 timestamp, int32 relative offset

The active segment's index files are preallocated (sparse, ``ftruncate``) to
``segment.index.bytes`` rounded down to a whole entry, and trimmed to their real
size when the segment rolls or the log closes; a reader therefore takes the
number of entries from the file length. Entries are also kept in memory (two
``array`` columns, loaded lazily) for binary search; writes are plain ``pwrite``.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from pathlib import Path

NO_TIMESTAMP = -1
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_INT32_MAX = 2**31 - 1


class IndexInvariantError(Exception):
    """An index invariant was violated (Kafka's InvalidOffsetException / IllegalStateException)."""


class _Index:
    ENTRY_SIZE = 0
    KEY_TYPE = "i"

    def __init__(
        self, path: Path, base_offset: int, max_index_size: int, *, writable: bool
    ) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size - max_index_size % self.ENTRY_SIZE
        self._fd: int | None = None
        self._keys: array[int] | None = None
        self._vals: array[int] | None = None
        try:
            length = path.stat().st_size
        except FileNotFoundError:
            length = 0
        self._entries = length // self.ENTRY_SIZE
        self._last = self._read_entry(self._entries - 1) if self._entries else None
        if writable:
            self.make_writable()

    # ------------------------------------------------------------------ state
    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self.max_index_size // self.ENTRY_SIZE

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    @property
    def writable(self) -> bool:
        return self._fd is not None

    @property
    def size_bytes(self) -> int:
        return self._entries * self.ENTRY_SIZE

    def make_writable(self) -> None:
        """Open for appends and preallocate the file to its maximum size (Kafka's resize)."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(self._fd, max(self.max_index_size, self.size_bytes))

    def trim(self) -> None:
        """Cut the file to its entries (Kafka's trimToValidSize)."""
        if self._fd is not None:
            os.ftruncate(self._fd, self.size_bytes)
        elif self.path.exists() and self.path.stat().st_size != self.size_bytes:
            os.truncate(self.path, self.size_bytes)

    def make_readonly(self) -> None:
        self.trim()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def handle(self) -> int | None:
        """The descriptor open for appends (None when read-only)."""
        return self._fd

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        self.make_readonly()

    def close_handle(self) -> None:
        """Close without trimming (used before the files are renamed away or deleted)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close_handle()
        self.path.unlink(missing_ok=True)

    # -------------------------------------------------------------- entries io
    def _read_entry(self, n: int) -> tuple[int, int]:
        if self._keys is not None and self._vals is not None:
            return self._keys[n], self._vals[n]
        fd = os.open(self.path, os.O_RDONLY)
        try:
            raw = os.pread(fd, self.ENTRY_SIZE, n * self.ENTRY_SIZE)
        finally:
            os.close(fd)
        return self._unpack(raw)

    def _unpack(self, raw: bytes) -> tuple[int, int]:
        raise NotImplementedError

    def _pack(self, key: int, val: int) -> bytes:
        raise NotImplementedError

    def _parse_all(self, raw: bytes) -> tuple[array[int], array[int]]:
        raise NotImplementedError

    def _load(self) -> tuple[array[int], array[int]]:
        if self._keys is None or self._vals is None:
            if self._entries:
                fd = self._fd if self._fd is not None else os.open(self.path, os.O_RDONLY)
                try:
                    raw = os.pread(fd, self.size_bytes, 0)
                finally:
                    if fd != self._fd:
                        os.close(fd)
                if len(raw) < self.size_bytes:  # file shorter than expected: keep what is there
                    self._entries = len(raw) // self.ENTRY_SIZE
                    raw = raw[: self.size_bytes]
                self._keys, self._vals = self._parse_all(raw)
            else:
                self._keys, self._vals = array(self.KEY_TYPE), array("i")
        return self._keys, self._vals

    def _append(self, key: int, val: int) -> None:
        if self._fd is None:
            raise IndexInvariantError(f"index {self.path} is not writable")
        if self.is_full:
            raise IndexInvariantError(
                f"attempt to append to a full index {self.path} ({self._entries} entries)"
            )
        keys, vals = self._load()
        os.pwrite(self._fd, self._pack(key, val), self.size_bytes)
        keys.append(key)
        vals.append(val)
        self._entries += 1
        self._last = (key, val)

    def truncate_to_entries(self, n: int) -> None:
        """Keep the first ``n`` entries (the rest of the file is zeroed or cut)."""
        n = max(0, min(n, self._entries))
        if self._keys is None or self._vals is None:  # not loaded: no need to (e.g. recovery)
            self._last = self._read_entry(n - 1) if n else None
        else:
            del self._keys[n:]
            del self._vals[n:]
            self._last = (self._keys[-1], self._vals[-1]) if n else None
        self._entries = n
        if self._fd is not None:
            # zero the dropped entries so the preallocated tail stays clean
            os.ftruncate(self._fd, self.size_bytes)
            os.ftruncate(self._fd, max(self.max_index_size, self.size_bytes))
        else:
            os.truncate(self.path, self.size_bytes)

    def reset(self) -> None:
        self.truncate_to_entries(0)

    def iter_file_entries(self) -> Iterator[tuple[int, int]]:
        """Raw entries read from the file in growing chunks, first to last, without loading
        the whole file (a crashed active segment's index is preallocated: mostly zeros)."""
        fd = self._fd if self._fd is not None else os.open(self.path, os.O_RDONLY)
        chunk = 256
        try:
            done = 0
            while done < self._entries:
                count = min(chunk, self._entries - done)
                chunk = min(chunk * 4, 65536)
                raw = os.pread(fd, count * self.ENTRY_SIZE, done * self.ENTRY_SIZE)
                whole = len(raw) - len(raw) % self.ENTRY_SIZE
                if not whole:
                    return
                keys, vals = self._parse_all(raw[:whole])
                yield from zip(keys, vals, strict=True)
                done += whole // self.ENTRY_SIZE
        finally:
            if fd != self._fd:
                os.close(fd)

    def raw_entries(self) -> list[tuple[int, int]]:
        keys, vals = self._load()
        return list(zip(keys, vals, strict=True))


class OffsetIndex(_Index):
    """``.index``: maps the LAST offset of an appended record set to the position where it starts."""

    ENTRY_SIZE = 8
    KEY_TYPE = "i"

    def _unpack(self, raw: bytes) -> tuple[int, int]:
        rel, pos = _OFFSET_ENTRY.unpack(raw)
        return rel, pos

    def _pack(self, key: int, val: int) -> bytes:
        return _OFFSET_ENTRY.pack(key, val)

    def _parse_all(self, raw: bytes) -> tuple[array[int], array[int]]:
        both = array("i")
        both.frombytes(raw)
        if sys.byteorder == "little":
            both.byteswap()
        return both[0::2], both[1::2]

    @property
    def last_offset(self) -> int:
        """Largest indexed offset, or the base offset when empty."""
        return self.base_offset + self._last[0] if self._last else self.base_offset

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(absolute offset, position) of the last entry, None when empty."""
        return (self.base_offset + self._last[0], self._last[1]) if self._last else None

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _INT32_MAX

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if not 0 <= rel <= _INT32_MAX:
            raise IndexInvariantError(
                f"offset {offset} does not fit in the index of segment {self.base_offset}"
            )
        if self._last is not None and rel <= self._last[0]:
            raise IndexInvariantError(
                f"attempt to append offset {offset} to {self.path}, not larger than the last "
                f"offset {self.last_offset}"
            )
        self._append(rel, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= ``offset``; (base, 0) if none."""
        keys, vals = self._load()
        slot = bisect_right(keys, offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + keys[slot], vals[slot]

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        keys, _ = self._load()
        self.truncate_to_entries(bisect_left(keys, offset - self.base_offset))

    def entries_list(self) -> list[tuple[int, int]]:
        """All entries as (absolute offset, position)."""
        return [(self.base_offset + k, v) for k, v in self.raw_entries()]

    def is_sane(self, log_size: int) -> bool:
        """Cheap check for an untrimmed or garbage file (Kafka rebuilds such indexes)."""
        if not self.path.exists() or self.path.stat().st_size % self.ENTRY_SIZE:
            return False
        if not self._entries:
            return True
        (k0, v0), (k1, v1) = self._read_entry(0), self._read_entry(self._entries - 1)
        if k0 < 0 or v0 <= 0 or v1 >= log_size:
            return False
        return self._entries == 1 or (k1 > k0 and v1 > v0)


class TimeIndex(_Index):
    """``.timeindex``: (max timestamp so far, offset of the record batch that carries it)."""

    ENTRY_SIZE = 12
    KEY_TYPE = "q"

    def _unpack(self, raw: bytes) -> tuple[int, int]:
        ts, rel = _TIME_ENTRY.unpack(raw)
        return ts, rel

    def _pack(self, key: int, val: int) -> bytes:
        return _TIME_ENTRY.pack(key, val)

    def _parse_all(self, raw: bytes) -> tuple[array[int], array[int]]:
        # columns gathered with extended slices (C speed), not entry by entry
        n = len(raw) // self.ENTRY_SIZE
        ts_raw, rel_raw = bytearray(8 * n), bytearray(4 * n)
        for j in range(8):
            ts_raw[j::8] = raw[j :: self.ENTRY_SIZE]
        for j in range(4):
            rel_raw[j::4] = raw[8 + j :: self.ENTRY_SIZE]
        ts, rel = array("q"), array("i")
        ts.frombytes(ts_raw)
        rel.frombytes(rel_raw)
        if sys.byteorder == "little":
            ts.byteswap()
            rel.byteswap()
        return ts, rel

    @property
    def is_full(self) -> bool:
        # Kafka keeps the last slot free for the entry written when the segment rolls
        return self._entries >= self.max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry; (-1, base offset) when empty."""
        if self._last is None:
            return NO_TIMESTAMP, self.base_offset
        return self._last[0], self.base_offset + self._last[1]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Append when ``timestamp`` is larger than the last entry's (Kafka's TimeIndex.maybeAppend)."""
        if not skip_full_check and self.is_full:
            raise IndexInvariantError(f"attempt to append to a full time index {self.path}")
        last_ts, last_off = self.last_entry
        if self._entries and offset < last_off:
            raise IndexInvariantError(
                f"attempt to append offset {offset} below the last offset {last_off}"
            )
        if self._entries and timestamp < last_ts:
            raise IndexInvariantError(
                f"attempt to append timestamp {timestamp} below the last {last_ts}"
            )
        if timestamp > last_ts:
            if self._fd is None:
                raise IndexInvariantError(f"time index {self.path} is not writable")
            if self._entries >= self.max_entries:
                raise IndexInvariantError(f"time index {self.path} has no room left")
            keys, vals = self._load()
            os.pwrite(self._fd, self._pack(timestamp, offset - self.base_offset), self.size_bytes)
            keys.append(timestamp)
            vals.append(offset - self.base_offset)
            self._entries += 1
            self._last = (timestamp, offset - self.base_offset)

    def lookup_before(self, timestamp: int) -> tuple[int, int]:
        """Last entry whose timestamp is strictly below ``timestamp``; (-1, base) if none.

        Every record before that entry's offset has a timestamp < ``timestamp``, so a
        forward scan from there finds the first record with timestamp >= target.
        """
        keys, vals = self._load()
        slot = bisect_left(keys, timestamp) - 1
        if slot < 0:
            return NO_TIMESTAMP, self.base_offset
        return keys[slot], self.base_offset + vals[slot]

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        _, vals = self._load()
        self.truncate_to_entries(bisect_left(vals, offset - self.base_offset))

    def entries_list(self) -> list[tuple[int, int]]:
        """All entries as (timestamp, absolute offset)."""
        return [(k, self.base_offset + v) for k, v in self.raw_entries()]

    def is_sane(self) -> bool:
        if not self.path.exists() or self.path.stat().st_size % self.ENTRY_SIZE:
            return False
        if not self._entries:
            return True
        (k0, v0), (k1, v1) = self._read_entry(0), self._read_entry(self._entries - 1)
        if k0 < 0 or v0 < 0:
            return False
        return self._entries == 1 or (k1 > k0 and v1 >= v0)
