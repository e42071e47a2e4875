"""Checks and offset placement of the batches a log appends (Kafka's ``LogValidator`` and
``UnifiedLog.analyzeAndValidateRecords``): size limits, record validation, recompression to
the topic's codec, leader offset assignment, and the follower's offset-order checks.

``Log`` calls these around its lock: the leader checks run before it, placement under it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import (
    TIMESTAMP_TYPE_FLAG,
    BatchHeader,
    set_base_offset,
    set_log_append_time,
)
from services.storage.log.config import LogConfig
from services.storage.log.recompression import needs_recompression, to_codec
from services.storage.log.record_validation import validate_records
from services.storage.producer_state import AppendOrigin


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    duplicate: bool = False
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1
    size_bytes: int = 0


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append whose offsets are below the log end offset or not increasing."""

    def __init__(self, message: str, first_offset: int, log_end_offset: int) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


def check_leader_batches(
    records: bytearray,
    headers: Sequence[BatchHeader],
    cfg: LogConfig,
    origin: AppendOrigin,
    now: int,
    partition: str,
) -> tuple[bytearray, Sequence[BatchHeader]]:
    """Validate a leader append and rewrite it to the topic's codec when needed; returns the
    batches to append. Raises KafkaError (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
    INVALID_RECORD, CORRUPT_MESSAGE) and RecordValidationError."""
    if not headers:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "no record batches to append")
    for h in headers:
        if h.size > cfg.max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record batch of {h.size} bytes exceeds max.message.bytes {cfg.max_message_bytes}",
            )
        if h.is_control and origin is AppendOrigin.CLIENT:
            raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    validate_records(records, headers, cfg, now, partition)
    codec = cfg.target_codec
    if codec is not None and needs_recompression(headers, codec):
        records, headers = to_codec(records, headers, codec)
        for h in headers:  # Kafka checks the rewritten batches again
            if h.size > cfg.max_message_bytes:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"record batch of {h.size} bytes in {cfg.compression_type} exceeds "
                    f"max.message.bytes {cfg.max_message_bytes}",
                )
    size = span(headers)[1] - span(headers)[0]
    if size > cfg.segment_bytes:
        raise KafkaError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"{size} bytes of batches exceed segment.bytes {cfg.segment_bytes}",
        )
    return records, headers


def span(headers: Sequence[BatchHeader]) -> tuple[int, int]:
    """(start, end) position of the batches in their buffer."""
    return headers[0].position, headers[-1].position + headers[-1].size


def plan_offsets(
    headers: Sequence[BatchHeader], first: int
) -> tuple[list[tuple[BatchHeader, int]], int]:
    """Each batch with the base offset it gets when the log continues at ``first``, and the
    last offset."""
    placed: list[tuple[BatchHeader, int]] = []
    next_offset = first
    for h in headers:
        placed.append((h, next_offset))
        next_offset += h.last_offset_delta + 1
    return placed, next_offset - 1


def place_batches(
    records: bytearray,
    placed: Sequence[tuple[BatchHeader, int]],
    leader_epoch: int,
    append_time: bool,
    now: int,
    first: int,
) -> tuple[list[tuple[BatchHeader, int]], int, int]:
    """Write base offsets and the leader epoch (and LogAppendTime) into the batches in place;
    returns the placed headers, the max timestamp and the offset holding it."""
    max_ts, offset_of_max = -1, first
    final: list[tuple[BatchHeader, int]] = []
    for h, base in placed:
        set_base_offset(records, h.position, base, leader_epoch)
        if append_time:
            set_log_append_time(records, h.position, h.size, now)
            h = replace(h, max_timestamp=now, attributes=h.attributes | TIMESTAMP_TYPE_FLAG)
        h = h.placed(base, leader_epoch)
        if h.max_timestamp > max_ts:
            max_ts, offset_of_max = h.max_timestamp, h.last_offset
        final.append((h, base))
    return final, max_ts, offset_of_max


def check_follower_batches(
    headers: Sequence[BatchHeader], log_end_offset: int, segment_bytes: int
) -> tuple[int, int]:
    """Check that replicated batches start at or after the log end offset, do not go
    backwards and fit a segment; returns the max timestamp and the offset holding it."""
    first = headers[0].base_offset
    if first < log_end_offset:
        raise UnexpectedAppendOffsetError(
            f"first offset {first} is below the log end offset {log_end_offset}",
            first,
            log_end_offset,
        )
    expected = first
    max_ts, offset_of_max = -1, first
    for h in headers:
        if h.base_offset < expected:
            raise UnexpectedAppendOffsetError(
                f"offsets out of order: batch at {h.base_offset} after offset {expected - 1}",
                first,
                log_end_offset,
            )
        expected = h.next_offset
        if h.max_timestamp > max_ts:
            max_ts, offset_of_max = h.max_timestamp, h.last_offset
    start_pos, end_pos = span(headers)
    if end_pos - start_pos > segment_bytes:
        raise KafkaError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"{end_pos - start_pos} bytes of batches exceed segment.bytes",
        )
    return max_ts, offset_of_max
