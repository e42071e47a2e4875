"""The records of ``__consumer_offsets`` in Kafka's own binary schemas, so Kafka's tools
(``kafka-console-consumer --formatter ...OffsetsMessageFormatter``, ``kafka-dump-log
--offsets-decoder``) read what kafka-py writes, and kafka-py reads what Kafka wrote.

Keys and values start with an int16 version:
- ``OffsetCommitKey`` v0/v1: group, topic, partition (v1 is what Kafka writes);
- ``GroupMetadataKey`` v2: group;
- ``OffsetCommitValue`` v0 (offset, metadata, commit ts), v1 (+ expire ts), v2 (as v0),
  v3 (offset, leader epoch, metadata, commit ts), v4 (v3, flexible);
- ``GroupMetadataValue`` v0..v4: protocol type, generation, protocol, leader, (v2+) current
  state timestamp, members (member id, (v3+) group instance id, client id, client host, (v1+)
  rebalance timeout, session timeout, subscription, assignment); v4 is v3, flexible.

Kafka writes OffsetCommitValue v3, or v1 when a commit carries an explicit expire timestamp
(OffsetCommit v1-v4's ``retention_time``), and GroupMetadataValue v3; so does kafka-py.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.records.batch import iter_headers
from services.common.records.record import Record, build_batch, iter_records
from services.common.records.varint import decode_unsigned_varint
from services.group_coordinator.model import (
    NO_EXPIRE_TIMESTAMP,
    NO_LEADER_EPOCH,
    GroupMetadata,
    MemberMetadata,
    OffsetAndMetadata,
    ShardSnapshot,
)

log = get_logger("group_coordinator.offsets_topic")

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3
_FLEXIBLE_OFFSET_VALUE = 4
_FLEXIBLE_GROUP_VALUE = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


# ---- writing -----------------------------------------------------------------------------


class _Writer:
    __slots__ = ("parts",)

    def __init__(self, version: int) -> None:
        self.parts: list[bytes] = [_I16.pack(version)]

    def i32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def i64(self, v: int) -> None:
        self.parts.append(_I64.pack(v))

    def string(self, v: str | None) -> None:
        if v is None:
            self.parts.append(_I16.pack(-1))
            return
        data = v.encode()
        self.parts.append(_I16.pack(len(data)))
        self.parts.append(data)

    def bytes_(self, v: bytes) -> None:
        self.parts.append(_I32.pack(len(v)))
        self.parts.append(bytes(v))

    def done(self) -> bytes:
        return b"".join(self.parts)


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    w = _Writer(OFFSET_KEY_VERSION)
    w.string(group_id)
    w.string(topic)
    w.i32(partition)
    return w.done()


def group_metadata_key(group_id: str) -> bytes:
    w = _Writer(GROUP_KEY_VERSION)
    w.string(group_id)
    return w.done()


def offset_commit_value(o: OffsetAndMetadata) -> bytes:
    if o.expire_timestamp != NO_EXPIRE_TIMESTAMP:
        w = _Writer(OFFSET_VALUE_VERSION_WITH_EXPIRY)
        w.i64(o.offset)
        w.string(o.metadata)
        w.i64(o.commit_timestamp)
        w.i64(o.expire_timestamp)
        return w.done()
    w = _Writer(OFFSET_VALUE_VERSION)
    w.i64(o.offset)
    w.i32(o.leader_epoch)
    w.string(o.metadata)
    w.i64(o.commit_timestamp)
    return w.done()


def group_metadata_value(g: GroupMetadata) -> bytes:
    w = _Writer(GROUP_VALUE_VERSION)
    w.string(g.protocol_type)
    w.i32(g.generation)
    w.string(g.protocol)
    w.string(g.leader)
    w.i64(g.current_state_timestamp)
    w.i32(len(g.members))
    for m in g.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.i32(m.rebalance_timeout_ms)
        w.i32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.done()


# ---- reading -----------------------------------------------------------------------------


class _Reader:
    """Reads one key or value; ``flexible`` switches to compact strings/arrays + tagged fields."""

    __slots__ = ("data", "pos", "flexible", "what")

    def __init__(self, data: bytes | memoryview, what: str) -> None:
        self.data = bytes(data)
        self.pos = 0
        self.flexible = False
        self.what = what

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.corrupt(f"needs {n} bytes at {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def corrupt(self, why: str) -> KafkaError:
        return KafkaError(ErrorCode.CORRUPT_MESSAGE, f"malformed {self.what}: {why}")

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def _uvarint(self) -> int:
        try:
            value, self.pos = decode_unsigned_varint(self.data, self.pos)
        except (IndexError, ValueError) as exc:
            raise self.corrupt(f"bad varint at {self.pos}") from exc
        return value

    def nullable_string(self) -> str | None:
        n = self._uvarint() - 1 if self.flexible else self.i16()
        if n < 0:
            return None
        return self._take(n).decode("utf-8", "replace")

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise self.corrupt("null where a string is required")
        return s

    def bytes_(self) -> bytes:
        n = self._uvarint() - 1 if self.flexible else self.i32()
        return b"" if n < 0 else self._take(n)

    def array_len(self) -> int:
        n = self._uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            return 0
        if n > len(self.data) - self.pos:  # every element takes at least one byte
            raise self.corrupt(f"array of {n} elements in {len(self.data) - self.pos} bytes")
        return n

    def tagged_fields(self) -> None:
        """Skip the tagged fields of a flexible struct (none are known to kafka-py)."""
        if not self.flexible:
            return
        for _ in range(self._uvarint()):
            self._uvarint()  # tag
            self._take(self._uvarint())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.corrupt(f"{len(self.data) - self.pos} bytes left over")


def parse_key(key: bytes | memoryview) -> OffsetKey | GroupKey:
    """Raises KafkaError(CORRUPT_MESSAGE) for malformed keys and unknown versions."""
    r = _Reader(key, "__consumer_offsets key")
    version = r.i16()
    if version in (0, 1):
        out: OffsetKey | GroupKey = OffsetKey(r.string(), r.string(), r.i32())
    elif version == GROUP_KEY_VERSION:
        out = GroupKey(r.string())
    else:
        raise r.corrupt(f"unknown key version {version}")
    r.end()
    return out


def parse_offset_value(value: bytes | memoryview) -> OffsetAndMetadata:
    r = _Reader(value, "OffsetCommitValue")
    version = r.i16()
    if not 0 <= version <= _FLEXIBLE_OFFSET_VALUE:
        raise r.corrupt(f"unknown version {version}")
    r.flexible = version >= _FLEXIBLE_OFFSET_VALUE
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else NO_LEADER_EPOCH
    metadata = r.string()
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else NO_EXPIRE_TIMESTAMP
    r.tagged_fields()
    r.end()
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ts, expire_ts)


def parse_group_value(value: bytes | memoryview) -> GroupMetadata:
    r = _Reader(value, "GroupMetadataValue")
    version = r.i16()
    if not 0 <= version <= _FLEXIBLE_GROUP_VALUE:
        raise r.corrupt(f"unknown version {version}")
    r.flexible = version >= _FLEXIBLE_GROUP_VALUE
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if version == 0:
            rebalance_timeout = session_timeout  # Kafka's reading of v0
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        members.append(
            MemberMetadata(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.tagged_fields()
    r.end()
    return GroupMetadata(protocol_type, generation, protocol, leader, state_ts, tuple(members))


# ---- batches -----------------------------------------------------------------------------


def build_records_batch(
    records: Sequence[tuple[bytes, bytes | None]],
    *,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    timestamp_ms: int,
) -> bytes:
    """One uncompressed, idempotent (non-transactional) batch; a None value is a tombstone."""
    return build_batch(
        [Record(timestamp=timestamp_ms, key=k, value=v) for k, v in records],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


class ShardReplay:
    """Rebuilds a shard's state from its partition, batch by batch (newest record per key
    wins; tombstones remove). Control batches (transaction markers) carry no group data."""

    def __init__(self) -> None:
        self._snapshot = ShardSnapshot()
        self.skipped = 0  # records that could not be read (logged)

    def apply(self, records: memoryview) -> int:
        """Apply every whole batch of ``records`` (a trailing partial batch is ignored);
        returns the offset after the last batch applied (-1 when none was whole)."""
        next_offset = -1
        for header in iter_headers(records):
            next_offset = header.next_offset
            if header.is_control:
                continue
            for record in iter_records(records, header):
                self._apply_record(record.key, record.value, record.offset)
        return next_offset

    def _apply_record(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        if key is None:
            self._skip(offset, "record without a key")
            return
        try:
            parsed = parse_key(key)
        except KafkaError as exc:
            self._skip(offset, str(exc))
            return
        snap = self._snapshot
        if isinstance(parsed, GroupKey):
            if value is None:
                snap.groups.pop(parsed.group, None)
                return
            try:
                snap.groups[parsed.group] = parse_group_value(value)
            except KafkaError as exc:
                self._skip(offset, str(exc))
            return
        tp = (parsed.topic, parsed.partition)
        if value is None:
            offsets = snap.offsets.get(parsed.group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del snap.offsets[parsed.group]
            return
        try:
            snap.offsets.setdefault(parsed.group, {})[tp] = parse_offset_value(value)
        except KafkaError as exc:
            self._skip(offset, str(exc))

    def _skip(self, offset: int, why: str) -> None:
        self.skipped += 1
        log.warning("offsets_record_skipped", offset=offset, reason=why)

    def snapshot(self) -> ShardSnapshot:
        return self._snapshot


# ---- text, for dump-log --offsets-decoder --------------------------------------------------


def describe_record(key: bytes | None, value: bytes | None) -> tuple[str, str]:
    """Key and value as Kafka's offsets decoder prints them (``offset_commit::...`` /
    ``group_metadata::...``); unreadable input is described, never raised."""
    if key is None:
        return "NULL", "<no key: not a __consumer_offsets record>"
    try:
        parsed = parse_key(key)
    except KafkaError as exc:
        return "<unreadable key>", str(exc)
    if isinstance(parsed, OffsetKey):
        key_text = (
            f"offset_commit::group={parsed.group},partition={parsed.topic}-{parsed.partition}"
        )
        if value is None:
            return key_text, "<DELETE>"
        try:
            o = parse_offset_value(value)
        except KafkaError as exc:
            return key_text, str(exc)
        return key_text, (
            f"offset={o.offset},metadata={o.metadata},commitTimestamp={o.commit_timestamp}"
            + (f",expireTimestamp={o.expire_timestamp}" if o.expire_timestamp >= 0 else "")
            + (f",leaderEpoch={o.leader_epoch}" if o.leader_epoch >= 0 else "")
        )
    key_text = f"group_metadata::group={parsed.group}"
    if value is None:
        return key_text, "<DELETE>"
    try:
        g = parse_group_value(value)
    except KafkaError as exc:
        return key_text, str(exc)
    return key_text, json.dumps(
        {
            "protocolType": g.protocol_type,
            "protocol": g.protocol,
            "generationId": g.generation,
            "leader": g.leader,
            "currentStateTimestamp": g.current_state_timestamp,
            "members": [
                {
                    "memberId": m.member_id,
                    "groupInstanceId": m.group_instance_id,
                    "clientId": m.client_id,
                    "clientHost": m.client_host,
                    "rebalanceTimeoutMs": m.rebalance_timeout_ms,
                    "sessionTimeoutMs": m.session_timeout_ms,
                    "subscriptionBytes": len(m.subscription),
                    "assignmentBytes": len(m.assignment),
                }
                for m in g.members
            ],
        },
        separators=(",", ":"),
    )
