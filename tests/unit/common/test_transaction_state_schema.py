"""``__transaction_state`` records in Kafka's binary schemas (TransactionLogKey/Value)."""

from __future__ import annotations

import struct

import pytest

from services.common.errors import KafkaError
from services.common.internal_topics.transaction_state import (
    TxnRecord,
    TxnState,
    describe_record,
    parse_key,
    parse_value,
    transaction_key,
    transaction_value,
)
from services.common.records.varint import encode_unsigned_varint


def test_key_and_v0_value_bytes_and_round_trip() -> None:
    assert transaction_key("tx") == b"\x00\x00\x00\x02tx"
    rec = TxnRecord(7, 2, 60000, TxnState.ONGOING, frozenset({("b", 1), ("a", 3), ("a", 0)}), 5, 4)
    value = transaction_value(rec)
    expected = (
        struct.pack(">hqhib", 0, 7, 2, 60000, 1)
        + struct.pack(">i", 2)  # two topics, sorted
        + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 3)
        + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 1)
        + struct.pack(">qq", 5, 4)
    )  # fmt: skip
    assert value == expected
    assert parse_value(value) == rec
    assert parse_key(transaction_key("tx")) == "tx"
    empty = TxnRecord(7, 0, 1000, TxnState.EMPTY, frozenset(), 1, -1)
    assert transaction_value(empty)[17:21] == b"\xff\xff\xff\xff"  # null partitions, as Kafka
    assert parse_value(transaction_value(empty)) == empty


def test_v1_flexible_value_with_tagged_fields() -> None:
    def compact(text: str) -> bytes:
        return encode_unsigned_varint(len(text) + 1) + text.encode()

    value = (
        struct.pack(">hqhib", 1, 9, 3, 1000, 2)
        + b"\x02" + compact("t") + b"\x02" + struct.pack(">i", 4) + b"\x00"  # [t: [4]]
        + struct.pack(">qq", 11, 10)
        + b"\x03"  # three tagged fields
        + b"\x00\x08" + struct.pack(">q", 8)  # PreviousProducerId
        + b"\x01\x08" + struct.pack(">q", 12)  # NextProducerId
        + b"\x02\x02" + struct.pack(">h", 2)  # ClientTransactionVersion
    )  # fmt: skip
    rec = parse_value(value)
    assert rec == TxnRecord(
        9, 3, 1000, TxnState.PREPARE_COMMIT, frozenset({("t", 4)}), 11, 10, 8, 12, 2
    )
    key, text = describe_record(transaction_key("x"), value)
    assert key == "transaction_metadata::transactionalId=x"
    assert text.startswith("producerId:9,producerEpoch:3,state=PrepareCommit,partitions=[t-4]")


@pytest.mark.parametrize(
    "value",
    [
        b"",
        struct.pack(">h", 2) + b"\x00" * 30,  # unknown version
        struct.pack(">hqhib", 0, 1, 1, 1, 9) + struct.pack(">i", -1) + b"\x00" * 16,  # status 9
        transaction_value(TxnRecord(1, 1, 1, TxnState.EMPTY)) + b"\x00",  # trailing byte
    ],
)
def test_malformed_values_are_corrupt_message(value: bytes) -> None:
    with pytest.raises(KafkaError):
        parse_value(value)
    assert describe_record(transaction_key("x"), value)[1].startswith("malformed")
