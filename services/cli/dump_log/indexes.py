"""Checks of a segment's ``.index`` and ``.timeindex`` against its ``.log``, in Kafka's wording.

An offset-index entry maps the *last* offset of a batch (relative to the segment base) to the
position where that batch starts; a time-index entry holds the largest timestamp so far and the
last offset of the batch that carries it. A preallocated index that was never trimmed ends in
zero entries: a zero relative offset after the first entry ends the index.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from services.cli.dump_log.result import DumpResult
from services.cli.dump_log.segment_reader import (
    LOG_SUFFIX,
    SegmentLog,
    file_size,
    open_file,
    read_bytes,
    segment_base_offset,
)
from services.common.errors import KafkaError
from services.common.records.record import iter_records

_INDEX_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_INDEX_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_NO_TIMESTAMP = -1


def dump_offset_index(
    path: Path,
    *,
    out: TextIO,
    err: TextIO | None = None,
    verify_only: bool = False,
    sanity_only: bool = False,
) -> DumpResult:
    """Print (unless ``verify_only``) and verify a ``.index`` against its ``.log``."""
    return _dump_index(path, check_offset_index, out, err, verify_only, sanity_only)


def dump_time_index(
    path: Path,
    *,
    out: TextIO,
    err: TextIO | None = None,
    verify_only: bool = False,
    sanity_only: bool = False,
) -> DumpResult:
    """Print (unless ``verify_only``) and verify a ``.timeindex`` against its ``.log``."""
    return _dump_index(path, check_time_index, out, err, verify_only, sanity_only)


_IndexCheck = Callable[[Path, int, SegmentLog | None, bool, bool, TextIO, TextIO], DumpResult]


def _dump_index(
    path: Path,
    check: _IndexCheck,
    out: TextIO,
    err: TextIO | None,
    verify_only: bool,
    sanity_only: bool,
) -> DumpResult:
    err = err or out
    path = Path(path)
    open_file(path).close()  # a missing index is reported as such, before its name or its log
    base_offset = segment_base_offset(path)
    log_path = path.with_suffix(LOG_SUFFIX)
    if sanity_only:  # the broker's start-up check needs the index alone
        return check(path, base_offset, None, True, True, out, err)
    with open_file(log_path) as fh:
        log = SegmentLog(fh, file_size(fh))
        for _ in log.batches(with_body=False):
            pass
        return check(path, base_offset, log, not verify_only, False, out, err)


def check_offset_index(
    path: Path,
    base_offset: int,
    log: SegmentLog | None,
    list_entries: bool,
    sanity_only: bool,
    out: TextIO,
    err: TextIO,
) -> DumpResult:
    result = DumpResult()
    data = read_bytes(path)
    count = len(data) // _INDEX_ENTRY.size
    if sanity_only:
        problem = None
        if count:
            last = base_offset + _INDEX_ENTRY.unpack_from(data, (count - 1) * 8)[0]
            if last < base_offset:
                problem = (
                    f"Corrupt index found, index file ({path.absolute()}) has non-zero size but "
                    f"the last offset is {last} which is less than the base offset {base_offset}."
                )
        if problem is None and len(data) % _INDEX_ENTRY.size:
            problem = (
                f"Index file {path.absolute()} is corrupt, found {len(data)} bytes which is "
                f"neither positive nor a multiple of {_INDEX_ENTRY.size}"
            )
        return _sanity_outcome(path, problem, out, err)
    assert log is not None
    if count == 0 and list_entries:
        out.write(f"{path} is empty.\n")
    if len(data) % _INDEX_ENTRY.size:
        result.index_errors += 1
        err.write(
            f"Index file {path.absolute()} is corrupt, found {len(data)} bytes which is "
            f"neither positive nor a multiple of {_INDEX_ENTRY.size}\n"
        )
    mismatches: dict[int, int] = {}
    previous: tuple[int, int] | None = None
    for i in range(count):
        relative, position = _INDEX_ENTRY.unpack_from(data, i * _INDEX_ENTRY.size)
        if i > 0 and relative == 0:
            break  # preallocated, never-trimmed tail
        offset = base_offset + relative
        result.index_entries += 1
        if list_entries:
            out.write(f"offset: {offset} position: {position}\n")
        if previous is not None and (offset <= previous[0] or position <= previous[1]):
            result.index_errors += 1
            err.write(
                f"Index entry {i} (offset {offset}, position {position}) does not follow the "
                f"previous entry (offset {previous[0]}, position {previous[1]}) in {path.name}\n"
            )
        previous = (offset, position)
        slot = log.index_of_position(position)
        if slot is None:
            result.index_errors += 1
            where = (
                "past the last complete batch"
                if position >= log.valid_bytes
                else "not at the start of a batch"
            )
            err.write(
                f"Index offset {offset} in {path.name} points to position {position}, "
                f"which is {where}\n"
            )
        elif log.last_offsets[slot] != offset:
            mismatches[offset] = log.last_offsets[slot]
    if mismatches:
        result.index_errors += len(mismatches)
        err.write(f"Mismatches in :{path.absolute()}\n")
        for index_offset in sorted(mismatches, reverse=True):
            err.write(f"  Index offset: {index_offset}, log offset: {mismatches[index_offset]}\n")
    return result


def check_time_index(
    path: Path,
    base_offset: int,
    log: SegmentLog | None,
    list_entries: bool,
    sanity_only: bool,
    out: TextIO,
    err: TextIO,
) -> DumpResult:
    result = DumpResult()
    data = read_bytes(path)
    size = _TIME_INDEX_ENTRY.size
    count = len(data) // size
    not_multiple = (
        f"Time index file {path.absolute()} is corrupt, found {len(data)} bytes which is "
        f"neither positive nor a multiple of {size}."
    )
    if sanity_only:
        problem = None
        if count:
            first_ts = _TIME_INDEX_ENTRY.unpack_from(data, 0)[0]
            last_ts, last_rel = _TIME_INDEX_ENTRY.unpack_from(data, (count - 1) * size)
            if last_ts < first_ts:
                problem = (
                    f"Corrupt time index found, time index file ({path.absolute()}) has non-zero "
                    f"size but the last timestamp is {last_ts} which is less than the first "
                    f"timestamp {first_ts}"
                )
            elif base_offset + last_rel < base_offset:
                problem = (
                    f"Corrupt time index found, time index file ({path.absolute()}) has non-zero "
                    f"size but the last offset is {base_offset + last_rel} which is less than "
                    f"the first offset {base_offset}"
                )
        if problem is None and len(data) % size:
            problem = not_multiple
        return _sanity_outcome(path, problem, out, err)
    assert log is not None
    if len(data) % size:
        result.index_errors += 1
        err.write(not_multiple + "\n")
    mismatched: list[tuple[int, int]] = []
    out_of_order: list[tuple[int, int]] = []
    not_found: list[tuple[int, int]] = []
    previous_ts = _NO_TIMESTAMP
    for i in range(count):
        timestamp, relative = _TIME_INDEX_ENTRY.unpack_from(data, i * size)
        if i > 0 and relative == 0:
            break  # preallocated, never-trimmed tail
        offset = base_offset + relative
        result.time_index_entries += 1
        slot = log.first_batch_ending_at_or_after(offset)
        if slot is None:
            not_found.append((offset, -1))
        elif log.last_offsets[slot] != offset:
            not_found.append((offset, log.last_offsets[slot]))
        else:
            batch_max = _max_record_timestamp(log, log.positions[slot])
            if batch_max != timestamp:
                mismatched.append((timestamp, batch_max))
            if previous_ts >= timestamp:
                out_of_order.append((timestamp, previous_ts))
        if list_entries:
            out.write(f"timestamp: {timestamp} offset: {offset}\n")
        previous_ts = timestamp
    if mismatched:
        err.write(f"Found timestamp mismatch in :{path.absolute()}\n")
        for index_ts, log_ts in mismatched:
            err.write(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}\n")
    if out_of_order:
        err.write(f"Found out of order timestamp in :{path.absolute()}\n")
        for index_ts, previous in out_of_order:
            err.write(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous}\n")
    if not_found:
        err.write("The following indexed offsets are not found in the log.\n")
        for index_offset, log_offset in not_found:
            err.write(f"Indexed offset: {index_offset}, found log offset: {log_offset}\n")
    result.index_errors += len(mismatched) + len(out_of_order) + len(not_found)
    return result


def _max_record_timestamp(log: SegmentLog, position: int) -> int:
    header, data = log.batch_at(position)
    try:
        return max((r.timestamp for r in iter_records(data, header)), default=_NO_TIMESTAMP)
    except KafkaError:
        return header.max_timestamp


def _sanity_outcome(path: Path, problem: str | None, out: TextIO, err: TextIO) -> DumpResult:
    if problem is None:
        out.write(f"{path} passed sanity check.\n")
        return DumpResult()
    err.write(problem + "\n")
    return DumpResult(index_errors=1)
