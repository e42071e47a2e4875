"""The records of ``__transaction_state`` in Kafka's binary schemas (TransactionLogKey /
TransactionLogValue), so ``dump-log --transaction-log-decoder`` and Kafka's tools read what
kafka-py writes, and kafka-py reads what Kafka wrote.

- ``TransactionLogKey`` v0: transactional id.
- ``TransactionLogValue`` v0: producer id, producer epoch, transaction timeout, status (int8,
  Kafka's TransactionState ids), partitions (nullable array of topic + partition ids), last
  update timestamp, start timestamp; v1 is v0, flexible, with tagged fields 0 PreviousProducerId,
  1 NextProducerId (int64, default -1) and 2 ClientTransactionVersion (int16, default 0).
- A tombstone (null value) removes an expired transactional id.

kafka-py writes key v0 and value v0 (what Kafka writes for clients before transaction version 2),
with null partitions in the Empty state as Kafka does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

from services.common.errors import KafkaError
from services.common.internal_topics.schema import SchemaReader, SchemaWriter

KEY_VERSION = 0
VALUE_VERSION = 0
_FLEXIBLE_VALUE = 1
NO_PRODUCER_ID = -1


class TxnState(IntEnum):
    """Kafka's TransactionState ids (the value's TransactionStatus)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """As DescribeTransactions / ListTransactions and kafka-transactions.sh name it."""
        return "".join(w.capitalize() for w in self.name.split("_"))


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """One TransactionLogValue: the persisted state of a transactional id."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID  # v1 tagged field 0
    next_producer_id: int = NO_PRODUCER_ID  # v1 tagged field 1
    client_transaction_version: int = 0  # v1 tagged field 2


def transaction_key(transactional_id: str) -> bytes:
    w = SchemaWriter(KEY_VERSION)
    w.string(transactional_id)
    return w.done()


def transaction_value(r: TxnRecord) -> bytes:
    w = SchemaWriter(VALUE_VERSION)
    w.i64(r.producer_id)
    w.i16(r.producer_epoch)
    w.i32(r.timeout_ms)
    w.i8(int(r.state))
    if r.state == TxnState.EMPTY and not r.partitions:
        w.array_len(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(r.partitions):
            by_topic.setdefault(topic, []).append(partition)
        w.array_len(len(by_topic))
        for topic, ids in by_topic.items():
            w.string(topic)
            w.array_len(len(ids))
            for p in ids:
                w.i32(p)
    w.i64(r.last_update_ms)
    w.i64(r.start_ms)
    return w.done()


def parse_key(key: bytes | memoryview) -> str:
    """The transactional id; KafkaError(CORRUPT_MESSAGE) for malformed keys."""
    r = SchemaReader(key, "__transaction_state key")
    version = r.i16()
    if version != KEY_VERSION:
        raise r.corrupt(f"unknown key version {version}")
    out = r.string()
    r.end()
    return out


def parse_value(value: bytes | memoryview) -> TxnRecord:
    r = SchemaReader(value, "TransactionLogValue")
    version = r.version(_FLEXIBLE_VALUE)
    r.flexible = version >= _FLEXIBLE_VALUE
    producer_id = r.i64()
    producer_epoch = r.i16()
    timeout_ms = r.i32()
    status = r.i8()
    try:
        state = TxnState(status)
    except ValueError:
        raise r.corrupt(f"unknown transaction status {status}") from None
    partitions: set[tuple[str, int]] = set()
    for _ in range(r.array_len()):
        topic = r.string()
        for _ in range(r.array_len()):
            partitions.add((topic, r.i32()))
        r.tagged_fields()
    last_update = r.i64()
    start = r.i64()
    tags = r.tagged_fields()
    r.end()
    return TxnRecord(
        producer_id,
        producer_epoch,
        timeout_ms,
        state,
        frozenset(partitions),
        last_update,
        start,
        _tag_int(tags, 0, ">q", NO_PRODUCER_ID, r),
        _tag_int(tags, 1, ">q", NO_PRODUCER_ID, r),
        _tag_int(tags, 2, ">h", 0, r),
    )


def _tag_int(tags: dict[int, bytes], tag: int, fmt: str, default: int, r: SchemaReader) -> int:
    raw = tags.get(tag)
    if raw is None:
        return default
    if len(raw) != struct.calcsize(fmt):
        raise r.corrupt(f"tagged field {tag} of {len(raw)} bytes")
    return int(struct.unpack(fmt, raw)[0])


def describe_record(key: bytes | None, value: bytes | None) -> tuple[str, str]:
    """Key and value as Kafka's transaction log decoder prints them
    (``transaction_metadata::transactionalId=...``); unreadable input is described, never
    raised."""
    if key is None:
        return "NULL", "<no key: not a __transaction_state record>"
    try:
        txn_id = parse_key(key)
    except KafkaError as exc:
        return "<unreadable key>", str(exc)
    key_text = f"transaction_metadata::transactionalId={txn_id}"
    if value is None:
        return key_text, "<DELETE>"
    try:
        t = parse_value(value)
    except KafkaError as exc:
        return key_text, str(exc)
    partitions = ",".join(f"{tp}-{p}" for tp, p in sorted(t.partitions))
    return key_text, (
        f"producerId:{t.producer_id},producerEpoch:{t.producer_epoch},"
        f"state={t.state.kafka_name},partitions=[{partitions}],"
        f"txnLastUpdateTimestamp={t.last_update_ms},txnTimeoutMs={t.timeout_ms}"
    )
