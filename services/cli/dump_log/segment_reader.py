"""Reading a segment's ``.log`` file batch by batch, as Kafka's FileLogInputStream does."""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from services.cli.dump_log.result import DumpError
from services.common.records.batch import (
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    parse_header,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_PREFIX_SIZE = _PREFIX.size  # 17: Kafka's HEADER_SIZE_UP_TO_MAGIC


def segment_base_offset(path: Path) -> int:
    """The base offset in a segment file name (``00000000000000000042.log`` -> 42)."""
    stem = path.name.split(".", 1)[0]
    if not stem.isdigit():
        raise DumpError(
            f"{path}: not a segment file name (expected <20-digit offset>{path.suffix})"
        )
    return int(stem)


class SegmentLog:
    """Walks the batches of a ``.log`` file, remembering where each starts and ends."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self._fh = fh
        self.size = size
        self.positions: list[int] = []
        self.last_offsets: list[int] = []
        self.valid_bytes = 0
        self.problem: str | None = None  # why the walk stopped before the end, if not torn

    def _read(self, pos: int, size: int) -> bytes:
        self._fh.seek(pos)
        return self._fh.read(size)

    def batches(self, with_body: bool) -> Iterator[tuple[BatchHeader, bytes]]:
        """Complete batches from the start; ``bytes`` is the whole batch when ``with_body``."""
        pos = 0
        while self.size - pos >= _PREFIX_SIZE:
            _, length, _, magic = _PREFIX.unpack(self._read(pos, _PREFIX_SIZE))
            if pos + LOG_OVERHEAD + length > self.size and length >= 0:
                break  # torn write: the batch is not complete
            if length < HEADER_SIZE - LOG_OVERHEAD:
                self.problem = f"batch at position {pos} has invalid length {length}"
                break
            if magic != CURRENT_MAGIC:
                self.problem = f"batch at position {pos} has magic {magic}; only magic 2 is read"
                break
            size = length + LOG_OVERHEAD
            wanted = size if with_body else HEADER_SIZE
            data = self._read(pos, wanted)
            if len(data) < wanted:  # the file shrank while we read it (truncated by recovery)
                break
            header = parse_header(data)
            self.positions.append(pos)
            self.last_offsets.append(header.last_offset)
            yield header, data
            pos += size
            self.valid_bytes = pos

    def batch_at(self, pos: int) -> tuple[BatchHeader, bytes]:
        _, length, _, _ = _PREFIX.unpack(self._read(pos, _PREFIX_SIZE))
        data = self._read(pos, length + LOG_OVERHEAD)
        return parse_header(data), data

    def index_of_position(self, position: int) -> int | None:
        i = bisect.bisect_left(self.positions, position)
        return i if i < len(self.positions) and self.positions[i] == position else None

    def first_batch_ending_at_or_after(self, offset: int) -> int | None:
        # Offsets grow along the log, so the last offsets are sorted.
        i = bisect.bisect_left(self.last_offsets, offset)
        return i if i < len(self.last_offsets) else None


def open_file(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as exc:
        raise DumpError(f"cannot read {path}: {exc.strerror or exc}") from exc


def file_size(fh: BinaryIO) -> int:
    fh.seek(0, 2)
    return fh.tell()


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DumpError(f"cannot read {path}: {exc.strerror or exc}") from exc
