from __future__ import annotations

import struct

import crc32c
import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.records import batch


def make_batch(
    count: int = 3,
    *,
    magic: int = 2,
    base_ts: int = 1_700_000_000_000,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
) -> bytearray:
    """A minimal valid v2 batch whose records are opaque bytes (headers only matter here)."""
    records = b"".join(bytes([8, 0, 0, i * 2, 1, 1, 0]) for i in range(count))  # not parsed here
    body = (
        struct.pack(">hiqqqhii", 0, count - 1, base_ts, base_ts + count, pid, epoch, seq, count)
        + records
    )
    crc = crc32c.crc32c(body)
    head = struct.pack(">qiibI", 0, len(body) + 9, -1, magic, crc)
    return bytearray(head + body)


def test_parse_and_validate() -> None:
    buf = make_batch(5) + make_batch(2)
    headers = batch.validate_batches(buf)
    assert [h.record_count for h in headers] == [5, 2]
    assert headers[1].position == headers[0].size
    assert headers[0].last_offset_delta == 4
    assert list(batch.iter_headers(buf)) == headers


def test_offset_rewrite_keeps_crc_valid() -> None:
    buf = make_batch(4)
    batch.set_base_offset(buf, 0, 1000, 7)
    h = batch.parse_header(buf)
    assert (h.base_offset, h.partition_leader_epoch, h.last_offset) == (1000, 7, 1003)
    assert batch.crc_ok(buf, h)


def test_log_append_time_rewrite_refreshes_crc() -> None:
    buf = make_batch(2)
    batch.set_log_append_time(buf, 0, len(buf), 42)
    h = batch.parse_header(buf)
    assert h.log_append_time and h.max_timestamp == 42 and batch.crc_ok(buf, h)


def test_iter_headers_stops_at_torn_tail() -> None:
    buf = make_batch(3) + make_batch(3)[:40]
    assert len(list(batch.iter_headers(buf))) == 1


@pytest.mark.parametrize(
    "mutate, code",
    [
        (lambda b: b[:-1], ErrorCode.CORRUPT_MESSAGE),
        (lambda b: b[:30], ErrorCode.CORRUPT_MESSAGE),
        (lambda b: b[:40] + bytes([b[40] ^ 0xFF]) + b[41:], ErrorCode.CORRUPT_MESSAGE),
        (lambda b: b[:16] + b"\x01" + b[17:], ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
        (lambda b: b"", ErrorCode.CORRUPT_MESSAGE),
    ],
)
def test_invalid_batches(mutate, code) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KafkaError) as exc:
        batch.validate_batches(bytes(mutate(bytes(make_batch(3)))))
    assert exc.value.code == code
