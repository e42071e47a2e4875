"""Building batches and iterating their records back."""

import struct

import crc32c
import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    crc_ok,
    iter_headers,
    parse_header,
    set_log_append_time,
    validate_batches,
)
from services.common.records.compression import Codec, compress
from services.common.records.record import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    ControlRecordType,
    Record,
    build_batch,
    build_end_txn_marker,
    build_keyed_batch,
    encode_record,
    is_control_record,
    iter_batch_records,
    iter_records,
    keyless_records,
    parse_control_key,
    parse_end_txn_marker,
    rebuild_batch,
    records_payload,
    scan_records,
)
from services.common.records.varint import encode_varint

T0 = 1_700_000_000_000


def sample_records(n: int = 6) -> list[Record]:
    out = []
    for i in range(n):
        out.append(
            Record(
                timestamp=T0 + (i * 37) % 11 - 5,  # not monotonic: negative deltas too
                key=None if i % 3 == 0 else f"key-{i}".encode(),
                value=None if i % 4 == 1 else (b"value-%d " % i) * (i * 40),
                headers=[("trace", b"\x00\x01"), ("empty", b""), ("null", None)][: i % 4],
            )
        )
    return out


def decode_one(batch: bytes) -> tuple[BatchHeader, list[Record]]:
    [header] = validate_batches(batch)
    return header, list(iter_records(batch, header))


@pytest.mark.parametrize("codec", list(Codec))
def test_round_trip_every_codec(codec: int) -> None:
    records = sample_records()
    batch = build_batch(
        records,
        base_offset=1234,
        compression=codec,
        producer_id=1000,
        producer_epoch=3,
        base_sequence=40,
        partition_leader_epoch=7,
    )
    header, decoded = decode_one(batch)
    assert header.compression == codec
    assert header.base_offset == 1234
    assert header.last_offset_delta == 5 and header.record_count == 6
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1000, 3, 40)
    assert header.partition_leader_epoch == 7
    assert not header.is_transactional and not header.is_control and not header.log_append_time
    assert [r.offset for r in decoded] == list(range(1234, 1240))
    assert [r.sequence for r in decoded] == list(range(40, 46))
    for original, got in zip(records, decoded, strict=True):
        assert (got.timestamp, got.key, got.value, got.headers) == (
            original.timestamp,
            original.key,
            original.value,
            original.headers,
        )


def test_compressed_batch_is_smaller() -> None:
    records = [Record(timestamp=T0, value=b"repetitive " * 200) for _ in range(20)]
    plain = build_batch(records)
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD):
        assert len(build_batch(records, compression=codec)) < len(plain) // 5


def test_header_layout_and_crc() -> None:
    batch = build_batch([Record(timestamp=T0, key=b"k", value=b"v")], base_offset=5)
    assert struct.unpack_from(">qiib", batch) == (5, len(batch) - 12, -1, 2)
    header = parse_header(batch)
    assert crc_ok(batch, header)
    corrupted = bytearray(batch)
    corrupted[-1] ^= 0xFF
    assert not crc_ok(corrupted, header)
    # one record: length, attrs, ts delta 0, offset delta 0, key, value, no headers
    assert batch[HEADER_SIZE:] == b"\x10\x00\x00\x00\x02k\x02v\x00"


def test_flags() -> None:
    batch = build_batch(
        [Record(timestamp=T0, value=b"x")],
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
        timestamp_type=1,
    )
    header = parse_header(batch)
    assert header.is_transactional and header.log_append_time and not header.is_control
    assert header.attributes == 0x18
    assert crc_ok(batch, header)


def test_log_append_time_reports_the_batch_timestamp() -> None:
    batch = bytearray(build_batch([Record(timestamp=T0 + i, value=b"x") for i in range(3)]))
    set_log_append_time(batch, 0, len(batch), T0 + 999)
    header, records = decode_one(bytes(batch))
    assert [r.timestamp for r in records] == [T0 + 999] * 3


def test_sequence_wraps_like_kafka() -> None:
    batch = build_batch(
        [Record(timestamp=T0) for _ in range(3)],
        producer_id=1,
        producer_epoch=0,
        base_sequence=2**31 - 2,
    )
    header, records = decode_one(batch)
    assert [r.sequence for r in records] == [2**31 - 2, 2**31 - 1, 0]
    assert header.last_sequence == 0


def test_no_producer_means_no_sequence() -> None:
    _, records = decode_one(build_batch([Record(timestamp=T0)]))
    assert records[0].sequence == -1


def test_keep_offsets_after_compaction() -> None:
    kept = [Record(offset=100, timestamp=T0), Record(offset=104, timestamp=T0 + 1)]
    batch = build_batch(kept, base_offset=100, keep_offsets=True, last_offset_delta=9)
    header = parse_header(batch)
    assert (header.record_count, header.last_offset_delta, header.last_offset) == (2, 9, 109)
    assert [r.offset for r in iter_records(batch, header)] == [100, 104]
    with pytest.raises(ValueError):
        build_batch(list(reversed(kept)), base_offset=100, keep_offsets=True)
    with pytest.raises(ValueError):
        build_batch(kept, base_offset=100, keep_offsets=True, last_offset_delta=3)


def test_empty_batch() -> None:
    batch = build_batch([], base_offset=50, producer_id=3, producer_epoch=1, base_sequence=7)
    header = parse_header(batch)
    assert header.record_count == 0 and header.base_timestamp == -1
    assert crc_ok(batch, header)
    assert list(iter_records(batch, header)) == []


def test_transaction_markers() -> None:
    for commit in (True, False):
        batch = build_end_txn_marker(
            commit, producer_id=77, producer_epoch=2, coordinator_epoch=5, timestamp=T0
        )
        header, [record] = decode_one(batch)
        assert header.is_control and header.is_transactional
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, -1)
        assert is_control_record(header, record)
        control = parse_control_key(record.key)
        assert control.type == (ControlRecordType.COMMIT if commit else ControlRecordType.ABORT)
        assert record.key == struct.pack(">hh", 0, control.type)
        marker = parse_end_txn_marker(record)
        assert (marker.commit, marker.coordinator_epoch, marker.version) == (commit, 5, 0)
        assert record.value == struct.pack(">hi", 0, 5)


def test_control_helpers_reject_bad_records() -> None:
    with pytest.raises(KafkaError):
        parse_control_key(b"\x00")
    with pytest.raises(KafkaError):
        parse_end_txn_marker(Record(key=struct.pack(">hh", 0, 2), value=b"\x00" * 6))
    with pytest.raises(KafkaError):
        parse_end_txn_marker(Record(key=struct.pack(">hh", 0, 1), value=b"\x00"))
    data_batch = build_batch([Record(timestamp=T0, key=b"abcd")])
    header, [record] = decode_one(data_batch)
    assert not is_control_record(header, record)


def test_iter_batch_records_walks_many_batches() -> None:
    first = build_batch(sample_records(3), base_offset=0)
    second = build_batch(sample_records(2), base_offset=3, compression=Codec.ZSTD)
    pairs = list(iter_batch_records(first + second + b"\x00\x00"))  # partial tail ignored
    assert [r.offset for _, r in pairs] == [0, 1, 2, 3, 4]
    assert [h.position for h, _ in pairs] == [0, 0, 0, len(first), len(first)]


def _raw_batch(body: bytes, count: int, codec: int = 0) -> bytes:
    """A batch whose record section is ``body`` verbatim (CRC kept valid)."""
    template = bytearray(build_batch([Record(timestamp=T0)] * max(count, 1), compression=codec))
    struct.pack_into(">i", template, 57, count)
    out = template[:HEADER_SIZE] + compress(codec, body)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def _record_body(key: bytes | None) -> bytes:
    return encode_record(Record(key=key), 0, 0)


@pytest.mark.parametrize(
    ("body", "count"),
    [
        (_record_body(key=b"k") + b"\x00", 1),  # trailing byte after the last record
        (_record_body(key=b"k"), 2),  # fewer records than declared
        (_record_body(key=b"k")[:-1], 1),  # truncated
        (encode_varint(3) + b"\x00\x00\x00", 1),  # record ends before its key length
        (b"\x0c\x00\x00\x00\x05k\x00\x00", 1),  # key length -3
        (b"\x0e\x00\x00\x00\x02k\x02v\x02", 1),  # record longer than its declared length
        (b"\x0e\x00\x00\x00\x02k\x02v\x01", 1),  # negative header count
        (b"\x10\x00\x00\x00\x00\x00\x02\x01\x00", 1),  # null header key
    ],
)
def test_malformed_records_are_corrupt(body: bytes, count: int) -> None:
    for codec in (0, Codec.GZIP):
        batch = _raw_batch(body, count, codec)
        header = parse_header(batch)
        with pytest.raises(KafkaError) as info:
            list(iter_records(batch, header))
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_wrong_magic_and_bad_codec() -> None:
    batch = bytearray(build_batch([Record(timestamp=T0)]))
    batch[16] = 1
    with pytest.raises(KafkaError) as info:
        list(iter_records(batch, parse_header(batch)))
    assert info.value.code == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    batch = bytearray(build_batch([Record(timestamp=T0)]))
    batch[22] |= 0x07
    with pytest.raises(KafkaError) as info:
        list(iter_records(batch, parse_header(batch)))
    assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_header_keys_with_invalid_utf8_are_replaced() -> None:
    body = b"\x10\x00\x00\x00\x01\x01\x02\x02\xff\x00"  # header key 0xff, empty value
    body = encode_varint(len(body) - 1) + body[1:]
    batch = _raw_batch(body, 1)
    [record] = iter_records(batch, parse_header(batch))
    assert record.headers == [("\ufffd", b"")]


def test_headers_iterable_helper_matches_batch_module() -> None:
    buf = b"".join(build_batch(sample_records(2), base_offset=i * 2) for i in range(3))
    assert [h.base_offset for h in iter_headers(buf)] == [0, 2, 4]


# ---- compaction's view of records: scan_records / rebuild_batch ----------------------------


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("timestamp_type", [CREATE_TIME, LOG_APPEND_TIME])
def test_scan_records_sees_what_iter_records_decodes(codec: int, timestamp_type: int) -> None:
    batch = build_batch(
        sample_records(9), base_offset=500, compression=codec, timestamp_type=timestamp_type
    )
    header = parse_header(batch)
    spans = list(scan_records(records_payload(batch, header), header))
    records = list(iter_records(batch, header))
    assert [(s.offset, s.timestamp, s.key, s.has_value) for s in spans] == [
        (r.offset, r.timestamp, r.key, r.value is not None) for r in records
    ]


@pytest.mark.parametrize("codec", list(Codec))
def test_rebuild_batch_keeps_the_chosen_records_and_the_batch_fields(codec: int) -> None:
    batch = build_batch(
        sample_records(9),
        base_offset=500,
        compression=codec,
        producer_id=77,
        producer_epoch=3,
        base_sequence=40,
        partition_leader_epoch=12,
    )
    header = parse_header(batch)
    payload = records_payload(batch, header)
    spans = list(scan_records(payload, header))
    kept = [spans[2], spans[5], spans[6]]
    rebuilt = rebuild_batch(header, payload, kept)
    [new] = iter_headers(rebuilt)
    assert crc_ok(rebuilt, new) and new.size == len(rebuilt)
    originals = list(iter_records(batch, header))
    assert list(iter_records(rebuilt, new)) == [originals[2], originals[5], originals[6]]
    assert (new.base_offset, new.last_offset, new.record_count) == (500, 508, 3)
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (77, 3, 40)
    assert (new.partition_leader_epoch, new.compression) == (12, codec)
    assert new.max_timestamp == max(originals[i].timestamp for i in (2, 5, 6))


def test_rebuild_batch_with_nothing_kept_is_an_empty_uncompressed_batch() -> None:
    batch = build_batch(sample_records(4), base_offset=10, compression=Codec.ZSTD, producer_id=5)
    header = parse_header(batch)
    empty = rebuild_batch(header, records_payload(batch, header), [])
    [new] = iter_headers(empty)
    assert crc_ok(empty, new)
    assert (new.base_offset, new.last_offset, new.record_count, new.compression) == (10, 13, 0, 0)
    assert new.base_timestamp == new.max_timestamp == header.max_timestamp
    assert new.producer_id == 5 and len(empty) == HEADER_SIZE


@pytest.mark.parametrize(
    ("body", "count"),
    [
        (_record_body(key=b"k") + b"\x00", 1),  # trailing byte after the last record
        (_record_body(key=b"k"), 2),  # fewer records than declared
        (_record_body(key=b"k")[:-1], 1),  # truncated
        (encode_varint(3) + b"\x00\x00\x00", 1),  # record ends before its key length
        (b"\x0c\x00\x00\x00\x05k\x00\x00", 1),  # key length -3
    ],
)
def test_scan_records_refuses_malformed_records(body: bytes, count: int) -> None:
    batch = _raw_batch(body, count)
    header = parse_header(batch)
    with pytest.raises(KafkaError) as info:
        list(scan_records(records_payload(batch, header), header))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as info:
        keyless_records(records_payload(batch, header), header)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", [0, Codec.LZ4])
def test_keyless_records_are_the_scanned_records_without_a_key(codec: int) -> None:
    """Keys of 0, 1, 63, 64 and 300 bytes or none, values or none, offset deltas past 64."""
    keys = [None, b"", b"k", b"x" * 63, b"y" * 64, b"z" * 300]
    records = [
        Record(timestamp=T0 + i, key=keys[i % len(keys)], value=None if i % 4 == 1 else b"v" * i)
        for i in range(150)
    ]
    batch = build_batch(records, compression=codec)
    header = parse_header(batch)
    payload = records_payload(batch, header)
    expected = [i for i, span in enumerate(scan_records(payload, header)) if span.key is None]
    assert expected == list(range(0, 150, len(keys)))
    assert keyless_records(payload, header) == expected


@pytest.mark.parametrize("count", [0, 1, 3, 64, 200])
@pytest.mark.parametrize("transactional", [False, True])
def test_build_keyed_batch_is_build_batch_byte_for_byte(count: int, transactional: bool) -> None:
    """The coordinators' one-pass builder writes the bytes ``build_batch`` writes for the same
    records: null keys and values, lengths whose varints take 1, 2 and 3 bytes (> 8191 is past
    its table), offset deltas past one varint byte (64 and over)."""
    sizes = [0, 1, 63, 64, 8191, 8192, 20000]
    pairs = [
        (
            None if i % 7 == 3 else bytes([i % 256]) * sizes[i % len(sizes)],
            None if i % 5 == 2 else b"v" * sizes[(i + 3) % len(sizes)],
        )
        for i in range(count)
    ]
    expected = build_batch(
        [Record(timestamp=T0, key=k, value=v) for k, v in pairs],
        producer_id=77,
        producer_epoch=3,
        base_sequence=41,
        is_transactional=transactional,
    )
    built = build_keyed_batch(
        pairs,
        timestamp_ms=T0,
        producer_id=77,
        producer_epoch=3,
        base_sequence=41,
        is_transactional=transactional,
    )
    assert built == expected
    header, records = decode_one(built)
    assert [(r.key, r.value) for r in records] == pairs
    assert header.is_transactional is transactional
