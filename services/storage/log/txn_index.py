"""``.txnindex``: the aborted transactions whose ABORT marker lies in a segment (Kafka's
``TransactionIndex``), byte for byte. Each entry is 34 bytes, big-endian::

    int16 version = 0
    int64 producer_id
    int64 first_offset        first offset of the transaction's data
    int64 last_offset         offset of its ABORT marker
    int64 last_stable_offset  the LSO right after the abort (read_committed fetch stops
                              collecting once an entry's LSO reaches its upper bound)

Entries are in marker order. The file is created on the first entry; a segment without
aborted transactions has none. Not thread-safe: the owning log serializes access.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from services.common.errors import ErrorCode, KafkaError

VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """The whole entries of a ``.txnindex`` file's content (a torn tail is ignored)."""
    out: list[AbortedTxn] = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != VERSION:
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE, f"unknown transaction index entry version {version}"
            )
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TxnIndex:
    """One segment's ``.txnindex``; entries are read from disk on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            self._entries = decode_entries(data)
            if len(data) % ENTRY_SIZE:  # a torn write: keep the whole entries
                self._rewrite()
        return self._entries

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; markers only move forward (an out-of-order one is a bug: raises)."""
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"aborted transaction ending at {txn.last_offset} after one ending at "
                f"{entries[-1].last_offset} in {self.path.name}"
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, txn.encode())
        finally:
            os.close(fd)
        entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose marker is at or after ``offset``."""
        entries = self.entries
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) != len(entries):
            self._entries = keep
            self._rewrite()

    def reset(self) -> None:
        """Remove every entry (and the file)."""
        self._entries = []
        self.path.unlink(missing_ok=True)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's ``collectAbortedTxns``: the aborted transactions overlapping
        [fetch_offset, upper_bound), and whether the search is complete (an entry's LSO
        reached ``upper_bound``: no later segment can hold one that overlaps)."""
        out: list[AbortedTxn] = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return out, True
        return out, False

    def flush_target(self) -> Path | None:
        """The file to fsync with its segment (None when there is none)."""
        return self.path if self._entries or self.path.exists() else None

    def _rewrite(self) -> None:
        entries = self._entries or []
        if not entries:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(b"".join(e.encode() for e in entries))
        os.replace(tmp, self.path)
