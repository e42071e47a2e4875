"""Records inside a v2 batch: decode (``iter_records``) and build (``build_batch``).

For tools, tests, the console clients and compaction; the produce/fetch path never calls
this. Record layout (after the 61-byte batch header, compressed as a whole if the batch is):

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value
    headerCount varint | [headerKeyLength varint | key utf-8 | headerValueLength varint | value]

Control batches (transaction markers) hold one record whose key is
``version int16 | type int16`` (0 abort, 1 commit) and whose value is
``version int16 | coordinatorEpoch int32``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

import crc32c

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_FLAG,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    iter_headers,
)
from services.common.records.compression import compress, decompress
from services.common.records.varint import (
    INT32_MAX,
    INT32_MIN,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]

NO_TIMESTAMP = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")
END_TXN_MARKER_VERSION = 0


@dataclass(slots=True)
class Record:
    """One record. ``offset`` and ``timestamp`` are absolute (base + delta)."""

    offset: int = 0
    timestamp: int = NO_TIMESTAMP
    key: bytes | None = None
    value: bytes | None = None
    headers: list[Header] = field(default_factory=list)
    attributes: int = 0  # per-record attributes byte: unused by Kafka, kept as read
    sequence: int = NO_SEQUENCE  # producer sequence (baseSequence + offsetDelta), filled on read


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True, slots=True)
class ControlRecord:
    version: int
    type: int  # a ControlRecordType value, or an unknown id

    @property
    def is_transaction_marker(self) -> bool:
        return self.type in (ControlRecordType.ABORT, ControlRecordType.COMMIT)


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    commit: bool
    coordinator_epoch: int
    version: int = END_TXN_MARKER_VERSION


# --------------------------------------------------------------------------- control records


def parse_control_key(key: bytes | None) -> ControlRecord:
    """Decode a control record key; a missing or short key raises CORRUPT_MESSAGE."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "control record key is shorter than 4 bytes")
    version, type_id = _CONTROL_KEY.unpack_from(key)
    return ControlRecord(version, type_id)


def is_control_record(header: BatchHeader, record: Record) -> bool:
    """True if ``record`` sits in a control batch and carries a well-formed control key."""
    return header.is_control and record.key is not None and len(record.key) >= _CONTROL_KEY.size


def parse_end_txn_marker(record: Record) -> EndTxnMarker:
    """Decode a transaction marker (COMMIT/ABORT control record); anything else raises."""
    control = parse_control_key(record.key)
    if not control.is_transaction_marker:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"control type {control.type} is no marker")
    value = record.value
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "transaction marker value is too short")
    version, epoch = _END_TXN_VALUE.unpack_from(value)
    return EndTxnMarker(control.type == ControlRecordType.COMMIT, epoch, version)


def end_txn_marker_record(commit: bool, coordinator_epoch: int, timestamp: int) -> Record:
    """The single record of a COMMIT/ABORT marker batch."""
    control_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return Record(
        timestamp=timestamp,
        key=_CONTROL_KEY.pack(0, control_type),
        value=_END_TXN_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch),
    )


def build_end_txn_marker(
    commit: bool,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A control batch holding one transaction marker, as the transaction coordinator writes it."""
    return build_batch(
        [end_txn_marker_record(commit, coordinator_epoch, timestamp)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


# --------------------------------------------------------------------------- decoding


def records_payload(buf: Buffer, header: BatchHeader) -> bytes | memoryview:
    """The records section of the batch described by ``header``, decompressed."""
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    if header.magic != CURRENT_MAGIC:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"record batch magic {header.magic}"
        )
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or end > len(buf):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record batch length does not match the data")
    view = memoryview(buf)[start:end]
    codec = header.attributes & COMPRESSION_MASK
    return view if codec == 0 else decompress(codec, view)


def iter_records(buf: Buffer, header: BatchHeader) -> Iterator[Record]:
    """Decode (and decompress) the records of the batch at ``header.position`` in ``buf``.

    The CRC is not checked here (see ``batch.crc_ok``). Any malformation - wrong lengths,
    truncation, trailing bytes, a record count that does not match - raises
    ``KafkaError(CORRUPT_MESSAGE)``. LogAppendTime batches report the batch's maxTimestamp
    as every record's timestamp, as Kafka does.
    """
    if header.record_count < 0:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"negative record count {header.record_count}")
    data = records_payload(buf, header)
    log_append = header.log_append_time
    base_seq = header.base_sequence
    pos = 0
    end = len(data)
    for _ in range(header.record_count):
        record, pos = _decode_record(data, pos, end, header.base_offset, header.base_timestamp)
        if log_append:
            record.timestamp = header.max_timestamp
        if base_seq >= 0:
            record.sequence = (base_seq + record.offset - header.base_offset) & 0x7FFFFFFF
        yield record
    if pos != end:
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE, f"{end - pos} bytes left after {header.record_count} records"
        )


def iter_batch_records(buf: Buffer, start: int = 0) -> Iterator[tuple[BatchHeader, Record]]:
    """Every record of every complete batch in ``buf``, with its batch header."""
    for header in iter_headers(buf, start):
        for record in iter_records(buf, header):
            yield header, record


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, message)


def _decode_record(
    data: Buffer, pos: int, end: int, base_offset: int, base_timestamp: int
) -> tuple[Record, int]:
    length, pos = decode_varint(data, pos)
    if length < 0 or pos + length > end:
        raise _corrupt(f"record length {length} does not fit in the batch")
    record_end = pos + length
    if length < 1:
        raise _corrupt("record is shorter than its attributes byte")
    attributes = data[pos]
    pos += 1
    ts_delta, pos = decode_varlong(data, pos)
    offset_delta, pos = decode_varint(data, pos)
    key, pos = _read_bytes(data, pos, record_end, "key")
    value, pos = _read_bytes(data, pos, record_end, "value")
    count, pos = decode_varint(data, pos)
    if count < 0:
        raise _corrupt(f"negative header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        raw_key, pos = _read_bytes(data, pos, record_end, "header key")
        if raw_key is None:
            raise _corrupt("null header key")
        header_value, pos = _read_bytes(data, pos, record_end, "header value")
        # Java decodes with replacement characters rather than failing; so do we.
        headers.append((raw_key.decode("utf-8", "replace"), header_value))
    if pos != record_end:
        used = pos - (record_end - length)
        raise _corrupt(f"record declared {length} bytes but its fields use {used}")
    record = Record(
        offset=base_offset + offset_delta,
        timestamp=base_timestamp + ts_delta,
        key=key,
        value=value,
        headers=headers,
        attributes=attributes,
    )
    return record, pos


def _read_bytes(data: Buffer, pos: int, limit: int, what: str) -> tuple[bytes | None, int]:
    size, pos = decode_varint(data, pos)
    if size < 0:
        if size != -1:
            raise _corrupt(f"invalid {what} length {size}")
        return None, pos
    if pos + size > limit:
        raise _corrupt(f"{what} length {size} runs past the end of the record")
    return bytes(data[pos : pos + size]), pos + size


# --------------------------------------------------------------------------- building


def encode_record(record: Record, offset_delta: int, timestamp_delta: int) -> bytes:
    """One record body with its length prefix."""
    parts = [
        bytes((record.attributes & 0xFF,)),
        encode_varlong(timestamp_delta),
        encode_varint(offset_delta),
    ]
    _append_bytes(parts, record.key)
    _append_bytes(parts, record.value)
    parts.append(encode_varint(len(record.headers)))
    for name, header_value in record.headers:
        _append_bytes(parts, name.encode("utf-8"))
        _append_bytes(parts, header_value)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def _append_bytes(parts: list[bytes], value: bytes | None) -> None:
    if value is None:
        parts.append(encode_varint(-1))
    else:
        parts.append(encode_varint(len(value)))
        parts.append(bytes(value))


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = CREATE_TIME,
    keep_offsets: bool = False,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode ``records`` as one magic-2 batch (CRC32C included).

    Offset deltas are 0..n-1, unless ``keep_offsets`` is set: then each record's own
    ``offset`` minus ``base_offset`` is used (strictly increasing, as after compaction) and
    ``last_offset_delta`` may extend the batch past its last record. baseTimestamp is the
    first record's timestamp and maxTimestamp the largest (both -1 for no records), as the
    Java producer writes them. ``timestamp_type`` 1 sets the LogAppendTime flag.
    """
    items: Sequence[Record] = records if isinstance(records, Sequence) else list(records)
    deltas = _offset_deltas(items, base_offset, keep_offsets)
    last_delta = deltas[-1] if deltas else 0
    if last_offset_delta is not None:
        if last_offset_delta < last_delta or last_offset_delta > INT32_MAX:
            raise ValueError(f"last_offset_delta {last_offset_delta} is before the last record")
        last_delta = last_offset_delta
    if items:
        base_ts = items[0].timestamp
        max_ts = max(r.timestamp for r in items)
    else:
        base_ts = max_ts = NO_TIMESTAMP
    body = b"".join(
        encode_record(r, d, r.timestamp - base_ts) for r, d in zip(items, deltas, strict=True)
    )
    attributes = compression & COMPRESSION_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_FLAG
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    return _pack_batch(
        body, len(items),
        base_offset, partition_leader_epoch, attributes, last_delta, base_ts, max_ts,
        producer_id, producer_epoch, base_sequence,
    )  # fmt: skip


# zig-zag varints of 0..8191 (record lengths, offset deltas, key and value lengths)
_ZIGZAG = [encode_varint(n) for n in range(8192)]
_NULL_BYTES = encode_varint(-1)
_ATTRIBUTES_AND_TIMESTAMP_DELTA = b"\x00\x00"  # attributes 0, timestampDelta 0
_NO_HEADERS = b"\x00"


def _zigzag(n: int) -> bytes:
    return _ZIGZAG[n] if n < 8192 else encode_varint(n)


def build_keyed_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    timestamp_ms: int,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
) -> bytes:
    """``build_batch`` of header-less records that all have ``timestamp_ms``, from their
    (key, value) pairs in one pass (no ``Record`` per record): the same bytes, for the
    coordinators' writes, whose batches hold a record per committed partition."""
    small, zigzag = _ZIGZAG, _zigzag
    parts: list[bytes] = []
    append = parts.append
    for delta, (key, value) in enumerate(records):
        head = _ATTRIBUTES_AND_TIMESTAMP_DELTA + (small[delta] if delta < 8192 else zigzag(delta))
        if key is None:
            k = _NULL_BYTES
        else:
            n = len(key)
            k = (small[n] if n < 8192 else zigzag(n)) + key
        if value is None:
            v = _NULL_BYTES
        else:
            n = len(value)
            v = (small[n] if n < 8192 else zigzag(n)) + value
        n = len(head) + len(k) + len(v) + 1
        append(small[n] if n < 8192 else zigzag(n))
        append(head)
        append(k)
        append(v)
        append(_NO_HEADERS)
    count = len(records)
    timestamp = timestamp_ms if count else NO_TIMESTAMP
    return _pack_batch(
        b"".join(parts), count,
        0, -1, TRANSACTIONAL_FLAG if is_transactional else 0, max(count - 1, 0),
        timestamp, timestamp, producer_id, producer_epoch, base_sequence,
    )  # fmt: skip


def _pack_batch(
    body: bytes,
    record_count: int,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> bytes:
    """Header + ``body`` (uncompressed records; compressed here by ``attributes``' codec)."""
    codec = attributes & COMPRESSION_MASK
    if codec:
        body = compress(codec, body)
    out = bytearray(HEADER_SIZE + len(body))
    _HEADER.pack_into(
        out, 0,
        base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, CURRENT_MAGIC, 0,
        attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
        producer_epoch, base_sequence, record_count,
    )  # fmt: skip
    out[HEADER_SIZE:] = body
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


class RecordSpan(NamedTuple):
    """Where one record sits in its batch's (decompressed) records section, and what
    compaction needs of it. Its timestamp is absolute (LogAppendTime: the batch's)."""

    offset: int
    timestamp: int
    key: bytes | None
    has_value: bool
    start: int
    end: int


def scan_records(payload: Buffer, header: BatchHeader) -> Iterator[RecordSpan]:
    """Every record of the records section ``payload`` (see ``records_payload``) without
    decoding its value or headers; ``iter_records`` raises on the same malformations."""
    pos = 0
    end = len(payload)
    base_offset, base_ts = header.base_offset, header.base_timestamp
    append_ts = header.max_timestamp if header.log_append_time else None
    for _ in range(header.record_count):
        length, body = decode_varint(payload, pos)
        record_end = body + length
        if length < 1 or record_end > end:
            raise _corrupt(f"record length {length} does not fit in the batch")
        ts_delta, p = decode_varlong(payload, body + 1)
        offset_delta, p = decode_varint(payload, p)
        key, p = _read_bytes(payload, p, record_end, "key")
        value_len, p = decode_varint(payload, p)
        if p > record_end or value_len < -1 or p + max(value_len, 0) > record_end:
            raise _corrupt(f"invalid value length {value_len}")
        yield RecordSpan(
            base_offset + offset_delta,
            append_ts if append_ts is not None else base_ts + ts_delta,
            key,
            value_len >= 0,
            pos,
            record_end,
        )
        pos = record_end
    if pos != end:
        raise _corrupt(f"{end - pos} bytes left after {header.record_count} records")


def keyless_records(payload: Buffer, header: BatchHeader) -> list[int]:
    """Indexes (in the batch) of the records of ``payload`` whose key is null: what a
    compacted topic's append checks. Reads only the varints that locate each record and its
    key (no ``RecordSpan``, no key copy); raises where ``scan_records`` raises."""
    keyless: list[int] = []
    pos = 0
    end = len(payload)
    for index in range(header.record_count):
        length, body = decode_varint(payload, pos)
        record_end = body + length
        if length < 1 or record_end > end:
            raise _corrupt(f"record length {length} does not fit in the batch")
        _, p = decode_varlong(payload, body + 1)
        _, p = decode_varint(payload, p)
        key_len, p = decode_varint(payload, p)
        if key_len < 0:
            if key_len != -1:
                raise _corrupt(f"invalid key length {key_len}")
            keyless.append(index)
        elif p + key_len > record_end:
            raise _corrupt(f"key length {key_len} runs past the end of the record")
        else:
            p += key_len
        value_len, p = decode_varint(payload, p)
        if p > record_end or value_len < -1 or p + max(value_len, 0) > record_end:
            raise _corrupt(f"invalid value length {value_len}")
        pos = record_end
    if pos != end:
        raise _corrupt(f"{end - pos} bytes left after {header.record_count} records")
    return keyless


def rebuild_batch(header: BatchHeader, payload: Buffer, kept: Sequence[RecordSpan]) -> bytes:
    """``header``'s batch holding only the records ``kept`` (spans of ``payload``), their bytes
    copied as they are: same base offset and last offset delta, base timestamp (the records'
    deltas stay valid), codec, producer fields and leader epoch; maxTimestamp from ``kept``.
    With nothing kept it is Kafka's empty batch: uncompressed, both timestamps the original
    maxTimestamp (it keeps a producer's last sequence once its records are gone)."""
    view = memoryview(payload)
    body = b"".join(view[s.start : s.end] for s in kept)
    attributes = header.attributes
    base_ts = header.base_timestamp
    if kept:
        max_ts = header.max_timestamp if header.log_append_time else max(s.timestamp for s in kept)
    else:
        attributes &= ~COMPRESSION_MASK
        base_ts = max_ts = header.max_timestamp
    return _pack_batch(
        body, len(kept),
        header.base_offset, header.partition_leader_epoch, attributes, header.last_offset_delta,
        base_ts, max_ts, header.producer_id, header.producer_epoch, header.base_sequence,
    )  # fmt: skip


def with_delete_horizon(buf: Buffer, header: BatchHeader, horizon_ms: int) -> bytes:
    """``header``'s batch carrying the KIP-534 delete horizon: the DELETE_HORIZON flag set and
    the horizon as base timestamp, the records' timestamp deltas re-encoded against it (their
    timestamps do not change), uncompressed. The cleaner stamps batches it may drop later."""
    records = list(iter_records(buf, header))
    body = b"".join(
        encode_record(r, r.offset - header.base_offset, r.timestamp - horizon_ms) for r in records
    )
    attributes = (header.attributes | DELETE_HORIZON_FLAG) & ~COMPRESSION_MASK
    return _pack_batch(
        body, len(records),
        header.base_offset, header.partition_leader_epoch, attributes, header.last_offset_delta,
        horizon_ms, header.max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence,
    )  # fmt: skip


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The KIP-534 delete horizon of a batch (its base timestamp when flagged), else None."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG else None


def recompress_batch(buf: Buffer, header: BatchHeader, codec: int) -> bytes:
    """``header``'s batch with its records section re-encoded with ``codec`` (Kafka's
    LogValidator when a topic's compression.type differs from the batch's codec).

    The records' bytes are kept as they are (keys, values, headers, timestamp and offset
    deltas), and so are the header's producer id, epoch, base sequence, transactional flag,
    timestamp type, base/max timestamps, base offset and leader epoch; the CRC is recomputed.
    As Kafka requires of a batch it rewrites, inner offset deltas must run 0..n-1
    (INVALID_RECORD otherwise); a malformed record raises CORRUPT_MESSAGE.
    """
    payload = records_payload(buf, header)
    for i, span in enumerate(scan_records(payload, header)):
        if span.offset - header.base_offset != i:
            raise KafkaError(
                ErrorCode.INVALID_RECORD,
                f"inner record {i} of the batch has offset delta "
                f"{span.offset - header.base_offset}: offsets must be incremental",
            )
    attributes = (header.attributes & ~COMPRESSION_MASK) | (codec & COMPRESSION_MASK)
    return _pack_batch(
        bytes(payload), header.record_count,
        header.base_offset, header.partition_leader_epoch, attributes, header.last_offset_delta,
        header.base_timestamp, header.max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence,
    )  # fmt: skip


def _offset_deltas(items: Sequence[Record], base_offset: int, keep_offsets: bool) -> list[int]:
    if not keep_offsets:
        if len(items) - 1 > INT32_MAX:
            raise ValueError("too many records for one batch")
        return list(range(len(items)))
    deltas = [r.offset - base_offset for r in items]
    previous = -1
    for delta in deltas:
        if delta <= previous or delta > INT32_MAX or delta < INT32_MIN:
            raise ValueError(f"record offsets must increase from base_offset {base_offset}")
        previous = delta
    return deltas
