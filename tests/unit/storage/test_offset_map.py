"""The cleaner's offset map: what it stores per key and how it spends its budget."""

from __future__ import annotations

from services.common.records.record import RecordSpan
from services.storage.log.offset_map import (
    DIGEST_BYTES,
    ENTRY_OVERHEAD_BYTES,
    RAW_KEY_MAX,
    OffsetMap,
)


def span(offset: int, key: bytes | None) -> RecordSpan:
    return RecordSpan(offset, 0, key, True, 0, 0)


def test_the_last_offset_of_each_key_wins_and_a_repeated_key_costs_nothing() -> None:
    m = OffsetMap(budget_bytes=2 * (ENTRY_OVERHEAD_BYTES + 1), start=0)
    assert m.add([span(0, b"a"), span(1, b"b"), span(2, b"a"), span(3, b"b")]) is None
    assert (m.latest(b"a"), m.latest(b"b"), m.latest(b"c")) == (2, 3, -1)
    assert m.bytes_used == 2 * (ENTRY_OVERHEAD_BYTES + 1)
    assert m.add([span(4, b"a"), span(5, b"c"), span(6, b"a")]) == 5  # c does not fit
    assert (m.latest(b"a"), m.latest(b"c")) == (4, -1)


def test_records_before_start_and_keyless_records_are_not_mapped() -> None:
    m = OffsetMap(budget_bytes=1 << 20, start=10)
    assert m.add([span(9, b"early"), span(10, None), span(11, b"k")]) is None
    assert (len(m), m.latest(b"early"), m.latest(b"k")) == (1, -1, 11)


def test_the_first_key_is_taken_whatever_the_budget() -> None:
    m = OffsetMap(budget_bytes=0, start=0)
    assert m.add([span(0, b"k"), span(1, b"other")]) == 1
    assert len(m) == 1


def test_long_keys_are_told_apart_by_their_digest() -> None:
    shared = b"x" * RAW_KEY_MAX
    long_a, long_b = shared + b"a", shared + b"b"
    m = OffsetMap(budget_bytes=1 << 20, start=0)
    assert m.add([span(0, long_a), span(1, long_b), span(2, shared)]) is None
    assert (m.latest(long_a), m.latest(long_b), m.latest(shared)) == (0, 1, 2)
    assert m.latest(shared + b"c") == -1
    assert m.bytes_used == 2 * (ENTRY_OVERHEAD_BYTES + DIGEST_BYTES) + (
        ENTRY_OVERHEAD_BYTES + RAW_KEY_MAX
    )
