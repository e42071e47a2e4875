"""The lines DumpLogSegments prints for a batch and for a record (``| offset: ...``).

Control batches (transaction markers and other control records) print their decoded key in
``control_description``; data records print key and payload through a ``RecordDecoder``
(``decoders.py``) or as UTF-8.
"""

from __future__ import annotations

from services.cli.dump_log.decoders import RecordDecoder, utf8
from services.common.errors import KafkaError
from services.common.records.batch import DELETE_HORIZON_FLAG, BatchHeader
from services.common.records.compression import codec_name
from services.common.records.record import (
    ControlRecordType,
    Record,
    parse_control_key,
    parse_end_txn_marker,
)


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


def control_description(record: Record) -> str:
    """What a control record is (`` endTxnMarker: COMMIT coordinatorEpoch: 3``), as Kafka
    appends it to the record line of a control batch."""
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
            parts.append(control_description(record))
    if print_data and not header.is_control:
        prefix = "| " if skip_metadata else " "
        if decoder is not None:
            key_text, value_text = decoder(record.key, record.value)
            parts.append(f"{prefix}key: {key_text} payload: {value_text}")
        elif record.key is not None:
            parts.append(f"{prefix}key: {utf8(record.key)}")
            prefix = " "
        if record.value is not None and decoder is None:
            parts.append(f"{prefix}payload: {utf8(record.value)}")
    return "".join(parts) if parts else None
