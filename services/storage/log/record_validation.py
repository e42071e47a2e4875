"""Kafka's per-record checks of a leader append (LogValidator.validateRecord, KIP-467).

For magic 2 batches Kafka checks three things per record: a compacted topic needs a key
(INVALID_RECORD), a CreateTime timestamp must lie within ``message.timestamp.difference.max.ms``
of the broker's clock, and a producer may not mark its batch LogAppendTime (both
INVALID_TIMESTAMP). Every failing record of a batch is reported with its index in the batch,
so the Produce response can carry them in ``record_errors`` and clients fail exactly those
records; the whole batch is refused (nothing of it is appended), as in Kafka.

The records are only read (keys and timestamps, never values or headers) when a check can
fail: a compacted topic, a finite timestamp difference, or a batch claiming LogAppendTime.
Appends to other topics do not look inside batches; a compacted topic without the other two
checks (``__consumer_offsets``: a record per committed partition) has only its keys located.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import BatchHeader
from services.common.records.record import keyless_records, records_payload, scan_records
from services.storage.log.config import LONG_MAX, LogConfig

RecordError = tuple[int, str]  # (batch_index, message), ProduceResponse's BatchIndexAndErrorMessage
_NO_TIMESTAMP = -1


class RecordValidationError(KafkaError):
    """Kafka's RecordValidationException: the batch is refused because of ``record_errors``."""

    def __init__(self, code: ErrorCode, message: str, record_errors: list[RecordError]) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


def validate_records(
    records: bytearray | memoryview,
    headers: Sequence[BatchHeader],
    config: LogConfig,
    now_ms: int,
    topic_partition: str,
) -> None:
    """Raise RecordValidationError for the first batch of ``headers`` with failing records."""
    compacted = config.compact_enabled
    create_time = not config.log_append_time
    max_diff = config.message_timestamp_difference_max_ms
    check_time = create_time and max_diff < LONG_MAX
    for h in headers:
        if h.is_control or not (compacted or check_time or h.log_append_time):
            continue
        if not (check_time or h.log_append_time):  # compacted: only the keys are checked
            keyless = keyless_records(records_payload(records, h), h)
            if keyless:
                raise _refusal([(i, _keyless_message(topic_partition)) for i in keyless], False)
            continue
        errors: list[RecordError] = []
        timestamp_error = False
        for index, rec in enumerate(scan_records(records_payload(records, h), h)):
            if compacted and rec.key is None:
                errors.append((index, _keyless_message(topic_partition)))
            elif create_time and rec.timestamp != _NO_TIMESTAMP:
                if check_time and abs(now_ms - rec.timestamp) > max_diff:
                    timestamp_error = True
                    errors.append(
                        (
                            index,
                            f"Timestamp {rec.timestamp} of message with offset {rec.offset} is "
                            f"out of range. The timestamp should be within "
                            f"[{now_ms - max_diff}, {now_ms + max_diff}]",
                        )
                    )
            elif h.log_append_time:
                timestamp_error = True
                errors.append(
                    (
                        index,
                        f"Invalid timestamp type in message with offset {rec.offset}. "
                        "Producer should not set timestamp type to LogAppendTime.",
                    )
                )
        if errors:
            raise _refusal(errors, timestamp_error)


def _keyless_message(topic_partition: str) -> str:
    return f"Compacted topic cannot accept message without key in topic partition {topic_partition}"


def _refusal(errors: list[RecordError], timestamp_error: bool) -> RecordValidationError:
    """The top-level error and message Kafka's processRecordErrors gives."""
    if timestamp_error:
        return RecordValidationError(
            ErrorCode.INVALID_TIMESTAMP,
            "One or more records have been rejected due to invalid timestamp",
            errors,
        )
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return RecordValidationError(
        ErrorCode.INVALID_RECORD,
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]",
        errors,
    )
