"""Record batch v2 (magic 2) headers: parse, validate, rewrite in place.

The hot path never decodes individual records: batches travel as bytes and
only the 61-byte header is read. Layout (big-endian):

    0  baseOffset int64          8  batchLength int32      12 partitionLeaderEpoch int32
    16 magic int8                17 crc uint32 (CRC32C of bytes 21..end)
    21 attributes int16          23 lastOffsetDelta int32  27 baseTimestamp int64
    35 maxTimestamp int64        43 producerId int64       51 producerEpoch int16
    53 baseSequence int32        57 recordCount int32      61 records...
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from services.common.errors import ErrorCode, KafkaError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
CURRENT_MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_OFFSET_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_PRODUCER = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    position: int = 0  # where the batch starts in the buffer it was read from

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    def placed(self, base_offset: int, partition_leader_epoch: int) -> BatchHeader:
        """This header with the offset and leader epoch the log gave it (``dataclasses.replace``
        does the same several times slower; this is on every append)."""
        return BatchHeader(
            base_offset,
            self.batch_length,
            partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
            self.position,
        )

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_FLAG)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Read the header of the batch at ``pos`` (the caller checks there are 61 bytes)."""
    return BatchHeader(*_HEADER.unpack_from(buf, pos), position=pos)  # type: ignore[misc]


def producer_fields(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """(producer id, producer epoch, base sequence) of the batch at ``pos``: header bytes only."""
    return _PRODUCER.unpack_from(buf, pos + PRODUCER_ID_OFFSET)  # type: ignore[return-value]


def batch_size_at(buf: bytes | bytearray | memoryview, pos: int) -> int | None:
    """Total size of the batch at ``pos``, or None if fewer than 12 bytes remain."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    return _INT32.unpack_from(buf, pos + 8)[0] + LOG_OVERHEAD


def iter_headers(buf: bytes | bytearray | memoryview, start: int = 0) -> Iterator[BatchHeader]:
    """Headers of the complete batches in ``buf``; stops quietly at a partial tail."""
    end = len(buf)
    pos = start
    while end - pos >= HEADER_SIZE:
        length = _INT32.unpack_from(buf, pos + 8)[0]
        if length < HEADER_SIZE - LOG_OVERHEAD or pos + length + LOG_OVERHEAD > end:
            return
        yield parse_header(buf, pos)
        pos += length + LOG_OVERHEAD


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    view = memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]
    return crc32c.crc32c(view)


def crc_ok(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    return compute_crc(buf, header.position, header.size) == header.crc


def validate_batches(
    buf: bytes | bytearray | memoryview, check_crc: bool = True
) -> list[BatchHeader]:
    """Validate client-sent batches; returns their headers or raises KafkaError.

    Checks framing (no trailing bytes), magic 2, lengths, record count and
    offset-delta agreement, and the CRC32C.
    """
    headers: list[BatchHeader] = []
    end = len(buf)
    pos = 0
    if end == 0:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "empty record set")
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "truncated record batch header")
        magic = buf[pos + MAGIC_OFFSET]
        if magic != CURRENT_MAGIC:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                f"record batch magic {magic} is not supported (only magic 2)",
            )
        h = parse_header(buf, pos)
        if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > end:
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE, "record batch length does not match the data"
            )
        if h.record_count < 0 or h.last_offset_delta < 0:
            raise KafkaError(ErrorCode.INVALID_RECORD, "negative record count or offset delta")
        if h.record_count and h.last_offset_delta != h.record_count - 1:
            raise KafkaError(
                ErrorCode.INVALID_RECORD, "lastOffsetDelta does not match the record count"
            )
        if check_crc and not crc_ok(buf, h):
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record batch CRC mismatch")
        headers.append(h)
        pos += h.size
    return headers


def set_base_offset(
    buf: bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int
) -> None:
    """Assign offsets by rewriting baseOffset and partitionLeaderEpoch in place.

    Neither field is covered by the CRC, so nothing is recomputed.
    """
    _INT64.pack_into(buf, pos, base_offset)
    _INT32.pack_into(buf, pos + 12, leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, size: int, timestamp: int) -> None:
    """Switch a batch to LogAppendTime: set the flag and maxTimestamp, then refresh the CRC."""
    attrs = _INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0] | TIMESTAMP_TYPE_FLAG
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))
