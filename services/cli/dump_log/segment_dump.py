"""Dumping one ``.log`` segment: its batches, optionally its records, and the checks of its
offsets and (unless the caller dumps them itself) of its sibling indexes."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from services.cli.dump_log.decoders import RecordDecoder
from services.cli.dump_log.formatting import format_batch, format_record
from services.cli.dump_log.indexes import check_offset_index, check_time_index
from services.cli.dump_log.result import DumpResult
from services.cli.dump_log.segment_reader import (
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    SegmentLog,
    file_size,
    open_file,
    segment_base_offset,
)
from services.common.errors import KafkaError
from services.common.records.batch import crc_ok
from services.common.records.record import iter_records


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
    with open_file(path) as fh:
        base_offset = segment_base_offset(path)
        log = SegmentLog(fh, file_size(fh))
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
                result.add(check_offset_index(index_path, base_offset, log, False, False, out, err))
            time_index_path = path.with_suffix(TIME_INDEX_SUFFIX)
            if time_index_path.exists():
                result.add(
                    check_time_index(time_index_path, base_offset, log, False, False, out, err)
                )
    return result
