"""`kafka-py dump-log`: print and check log segments, like Kafka's DumpLogSegments.

Output lines follow ``kafka-dump-log.sh`` (Kafka 3.x/4.x) so that people and scripts used to
it can read ours:

    Dumping /data/t-0/00000000000000000000.log
    Log starting offset: 0
    baseOffset: 0 lastOffset: 9 count: 10 baseSequence: 0 lastSequence: 9 producerId: 1000 ...
    | offset: 0 CreateTime: 1700000000000 keySize: 3 valueSize: 5 sequence: 0 headerKeys: [h1] ...
    Found 17 invalid bytes at the end of 00000000000000000000.log

Index checks follow Kafka's rules: an offset-index entry maps the *last* offset of a batch
(relative to the segment base) to the position where that batch starts; a time-index entry
holds the largest timestamp so far and the last offset of the batch that carries it. A
preallocated index that was never trimmed ends in zero entries: a zero relative offset after
the first entry ends the index. Problems go to ``err`` in Kafka's wording.

Deliberate differences from Kafka: the non-consecutive-offsets check starts from the segment's
base offset (Kafka starts from -1 and so flags every segment that does not start at 0), a batch
whose records cannot be decoded is reported instead of aborting the run, and an index entry that
points into the middle of a batch is reported as such.
"""

from __future__ import annotations

import argparse
import bisect
import struct
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from services.common.errors import KafkaError
from services.common.records.batch import (
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    crc_ok,
    parse_header,
)
from services.common.records.compression import codec_name
from services.common.records.record import (
    ControlRecordType,
    Record,
    iter_records,
    parse_control_key,
    parse_end_txn_marker,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_PREFIX_SIZE = _PREFIX.size  # 17: Kafka's HEADER_SIZE_UP_TO_MAGIC
_INDEX_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_INDEX_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_NO_TIMESTAMP = -1


class DumpError(Exception):
    """A file cannot be dumped at all (bad name, unreadable); the message is one line."""


@dataclass
class DumpResult:
    batches: int = 0
    records: int = 0
    invalid_batches: int = 0  # CRC mismatch or records that cannot be decoded
    index_errors: int = 0  # offset- and time-index problems, including failed sanity checks
    index_entries: int = 0
    time_index_entries: int = 0
    valid_bytes: int = 0
    trailing_bytes: int = 0  # torn or corrupt tail of the .log
    non_consecutive_offsets: int = 0

    @property
    def clean(self) -> bool:
        return not (self.invalid_batches or self.index_errors or self.trailing_bytes)

    def add(self, other: DumpResult) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


# --------------------------------------------------------------------------- the .log file


def segment_base_offset(path: Path) -> int:
    """The base offset in a segment file name (``00000000000000000042.log`` -> 42)."""
    stem = path.name.split(".", 1)[0]
    if not stem.isdigit():
        raise DumpError(
            f"{path}: not a segment file name (expected <20-digit offset>{path.suffix})"
        )
    return int(stem)


class _SegmentLog:
    """Walks the batches of a ``.log`` file the way Kafka's FileLogInputStream does."""

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


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as exc:
        raise DumpError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _timestamp_type(header: BatchHeader) -> str:
    return "LogAppendTime" if header.log_append_time else "CreateTime"


def format_batch(header: BatchHeader, position: int, valid: bool) -> str:
    """One batch line, as DumpLogSegments prints it for magic 2."""
    horizon = (
        f"OptionalLong[{header.base_timestamp}]"
        if header.attributes & DELETE_HORIZON_FLAG
        else "OptionalLong.empty"
    )
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.record_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} "
        f"isControl: {_bool(header.is_control)} deleteHorizonMs: {horizon} "
        f"position: {position} {_timestamp_type(header)}: {header.max_timestamp} "
        f"size: {header.size} magic: {header.magic} "
        f"compresscodec: {codec_name(header.compression)} crc: {header.crc} "
        f"isvalid: {_bool(valid)}"
    )


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")  # Kafka's StringDecoder


def _control_description(record: Record) -> str:
    try:
        control = parse_control_key(record.key)
        if control.is_transaction_marker:
            marker = parse_end_txn_marker(record)
            kind = "COMMIT" if marker.commit else "ABORT"
            return f" endTxnMarker: {kind} coordinatorEpoch: {marker.coordinator_epoch}"
        try:
            name = ControlRecordType(control.type).name
        except ValueError:
            name = "UNKNOWN"
        return f" controlType: {name}({control.type})"
    except KafkaError as exc:
        return f" controlType: invalid ({exc.message or exc.code.name})"


RecordDecoder = Callable[[bytes | None, bytes | None], tuple[str, str]]


def format_record(
    header: BatchHeader,
    record: Record,
    *,
    print_data: bool,
    skip_metadata: bool = False,
    decoder: RecordDecoder | None = None,
) -> str | None:
    """One ``| offset: ...`` line; None when nothing is to be printed for it. ``decoder``
    turns key and value into text (``--offsets-decoder``); without one they print as UTF-8."""
    parts: list[str] = []
    if not skip_metadata:
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        header_keys = ",".join(name for name, _ in record.headers)
        parts.append(
            f"| offset: {record.offset} {_timestamp_type(header)}: {record.timestamp} "
            f"keySize: {key_size} valueSize: {value_size} sequence: {record.sequence} "
            f"headerKeys: [{header_keys}]"
        )
        if header.is_control:
            parts.append(_control_description(record))
    if print_data and not header.is_control:
        prefix = "| " if skip_metadata else " "
        if decoder is not None:
            key_text, value_text = decoder(record.key, record.value)
            parts.append(f"{prefix}key: {key_text} payload: {value_text}")
        elif record.key is not None:
            parts.append(f"{prefix}key: {_text(record.key)}")
            prefix = " "
        if record.value is not None and decoder is None:
            parts.append(f"{prefix}payload: {_text(record.value)}")
    return "".join(parts) if parts else None


def dump_segment(
    path: Path,
    *,
    print_records: bool,
    out: TextIO,
    err: TextIO | None = None,
    deep_iteration: bool = False,
    skip_record_metadata: bool = False,
    check_indexes: bool = True,
    decoder: RecordDecoder | None = None,
) -> DumpResult:
    """Print the batches (and with ``print_records`` the records) of one ``.log`` segment.

    ``deep_iteration`` prints record metadata without key/payload. With ``check_indexes`` the
    sibling ``.index`` and ``.timeindex`` (if present) are verified against the log; only
    problems are printed. Raises DumpError if the file cannot be read.
    """
    err = err or out
    path = Path(path)
    result = DumpResult()
    deep = deep_iteration or print_records
    with _open(path) as fh:
        base_offset = segment_base_offset(path)
        log = _SegmentLog(fh, _file_size(fh))
        out.write(f"Log starting offset: {base_offset}\n")
        previous_offset = base_offset - 1
        gaps: list[tuple[int, int]] = []
        for header, data in log.batches(with_body=True):
            valid = crc_ok(data, header)
            result.batches += 1
            out.write(format_batch(header, log.positions[-1], valid) + "\n")
            undecodable = False
            if deep:
                try:
                    for record in iter_records(data, header):
                        result.records += 1
                        if record.offset != previous_offset + 1:
                            gaps.append((previous_offset, record.offset))
                        previous_offset = record.offset
                        line = format_record(
                            header,
                            record,
                            print_data=print_records,
                            skip_metadata=skip_record_metadata,
                            decoder=decoder,
                        )
                        if line is not None:
                            out.write(line + "\n")
                except KafkaError as exc:
                    undecodable = True
                    err.write(
                        f"Cannot decode the records of the batch at position "
                        f"{log.positions[-1]}: {exc}\n"
                    )
            if not valid or undecodable:
                result.invalid_batches += 1
        result.valid_bytes = log.valid_bytes
        result.trailing_bytes = log.size - log.valid_bytes
        if log.problem:
            err.write(f"Stopped reading {path.name}: {log.problem}\n")
        if result.trailing_bytes:
            out.write(f"Found {result.trailing_bytes} invalid bytes at the end of {path.name}\n")
        if gaps:
            result.non_consecutive_offsets = len(gaps)
            err.write(f"Non-consecutive offsets in {path.absolute()}\n")
            for before, after in gaps:
                err.write(f"  {before} is followed by {after}\n")
        if check_indexes:
            index_path = path.with_suffix(INDEX_SUFFIX)
            if index_path.exists():
                result.add(_offset_index(index_path, base_offset, log, False, False, out, err))
            time_index_path = path.with_suffix(TIME_INDEX_SUFFIX)
            if time_index_path.exists():
                result.add(_time_index(time_index_path, base_offset, log, False, False, out, err))
    return result


def _file_size(fh: BinaryIO) -> int:
    fh.seek(0, 2)
    return fh.tell()


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DumpError(f"cannot read {path}: {exc.strerror or exc}") from exc


# --------------------------------------------------------------------------- indexes


def dump_offset_index(
    path: Path,
    *,
    out: TextIO,
    err: TextIO | None = None,
    verify_only: bool = False,
    sanity_only: bool = False,
) -> DumpResult:
    """Print (unless ``verify_only``) and verify a ``.index`` against its ``.log``."""
    return _dump_index(path, _offset_index, out, err, verify_only, sanity_only)


def dump_time_index(
    path: Path,
    *,
    out: TextIO,
    err: TextIO | None = None,
    verify_only: bool = False,
    sanity_only: bool = False,
) -> DumpResult:
    """Print (unless ``verify_only``) and verify a ``.timeindex`` against its ``.log``."""
    return _dump_index(path, _time_index, out, err, verify_only, sanity_only)


_IndexCheck = Callable[[Path, int, "_SegmentLog | None", bool, bool, TextIO, TextIO], DumpResult]


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
    _open(path).close()  # a missing index is reported as such, before its name or its log
    base_offset = segment_base_offset(path)
    log_path = path.with_suffix(LOG_SUFFIX)
    if sanity_only:  # the broker's start-up check needs the index alone
        return check(path, base_offset, None, True, True, out, err)
    with _open(log_path) as fh:
        log = _SegmentLog(fh, _file_size(fh))
        for _ in log.batches(with_body=False):
            pass
        return check(path, base_offset, log, not verify_only, False, out, err)


def _offset_index(
    path: Path,
    base_offset: int,
    log: _SegmentLog | None,
    list_entries: bool,
    sanity_only: bool,
    out: TextIO,
    err: TextIO,
) -> DumpResult:
    result = DumpResult()
    data = _read_bytes(path)
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


def _time_index(
    path: Path,
    base_offset: int,
    log: _SegmentLog | None,
    list_entries: bool,
    sanity_only: bool,
    out: TextIO,
    err: TextIO,
) -> DumpResult:
    result = DumpResult()
    data = _read_bytes(path)
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


def _max_record_timestamp(log: _SegmentLog, position: int) -> int:
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


# --------------------------------------------------------------------------- command line


def build_parser(prog: str = "kafka-py dump-log") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Parse log segments and their indexes and dump their contents, useful for "
            "debugging a seemingly corrupt log segment (like kafka-dump-log.sh)."
        ),
    )
    parser.add_argument(
        "--files",
        nargs="+",
        required=True,
        metavar="FILE",
        help=".log, .index and .timeindex files (space- or comma-separated)",
    )
    parser.add_argument(
        "--print-data-log", action="store_true", help="print record keys and payloads"
    )
    parser.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode records as __consumer_offsets keys and values (implies --print-data-log)",
    )
    parser.add_argument(
        "--deep-iteration", action="store_true", help="print record metadata (no payloads)"
    )
    parser.add_argument(
        "--skip-record-metadata", action="store_true", help="print payloads without metadata"
    )
    parser.add_argument(
        "--verify-index-only", action="store_true", help="check index files without listing them"
    )
    parser.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="only run the broker's start-up sanity check on index files",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool; 0 when every file could be read (even if it holds corruption), else 1."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed by argparse
        return exc.code if isinstance(exc.code, int) else 1
    files = [Path(name) for item in args.files for name in item.split(",") if name]
    explicit = {f.resolve() for f in files}
    decoder: RecordDecoder | None = None
    if args.offsets_decoder:
        from services.common.internal_topics.consumer_offsets import describe_record

        decoder = describe_record
    status = 0
    for path in files:
        print(f"Dumping {path}", flush=True)
        try:
            if path.suffix == LOG_SUFFIX:
                # Index files named on the command line get their own, listed, dump.
                siblings = {
                    path.with_suffix(s).resolve() for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                }
                dump_segment(
                    path,
                    print_records=args.print_data_log or decoder is not None,
                    out=sys.stdout,
                    err=sys.stderr,
                    deep_iteration=args.deep_iteration,
                    skip_record_metadata=args.skip_record_metadata,
                    check_indexes=not (siblings & explicit),
                    decoder=decoder,
                )
            elif path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                dump = dump_offset_index if path.suffix == INDEX_SUFFIX else dump_time_index
                result = dump(
                    path,
                    out=sys.stdout,
                    err=sys.stderr,
                    verify_only=args.verify_index_only,
                    sanity_only=args.index_sanity_check,
                )
                if args.index_sanity_check and result.index_errors:
                    status = 1
            else:
                print(f"Ignoring unknown file {path}", file=sys.stderr)
        except DumpError as exc:
            print(f"dump-log: error: {exc}", file=sys.stderr)
            status = 1
        sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
