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
(OffsetCommit v1-v4's ``retention_time``), and GroupMetadataValue v3; so does kafka-py. The
GroupMetadataValue version follows ``inter.broker.protocol.version`` as in Kafka
(``group_value_version``): older readers need an older one (Burrow 1.2.1 reads v0-v1).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.common.errors import KafkaError
from services.common.internal_topics.schema import SchemaReader, SchemaWriter

NO_EXPIRE_TIMESTAMP = -1
NO_LEADER_EPOCH = -1


@dataclass(slots=True)
class OffsetAndMetadata:
    """A committed offset (the next offset to consume) of one group and partition. Never
    changed once built; not ``frozen``: a commit builds one per partition, and a frozen
    dataclass takes 2-4 times as long to build."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int = NO_EXPIRE_TIMESTAMP  # only OffsetCommitValue v1 carries one


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member as GroupMetadataValue stores it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the metadata of the selected protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """A group's persisted state (written after each completed rebalance and when it empties)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = field(default_factory=tuple)


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
_TWO_I64 = struct.Struct(">qq")
_VALUE_V3_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch
_VALUE_V1_HEAD = struct.Struct(">hq")  # version, offset
# v3 with empty metadata: version, offset, leader epoch, metadata length 0, commit timestamp
_VALUE_V3_NO_METADATA = struct.Struct(">hqihq")
_NULL_STRING = _I16.pack(-1)
_OFFSET_KEY_VERSION = _I16.pack(OFFSET_KEY_VERSION)
# "2.2", "2.2-IV1", "0.10.1", "0.10.1-IV2": the release part decides the record versions.
_IBP = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:-IV\d+)?$")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


# ---- writing -----------------------------------------------------------------------------


def _string(v: str | None) -> bytes:
    """A non-flexible string: int16 length (-1 = null), UTF-8 bytes."""
    if v is None:
        return _NULL_STRING
    data = v.encode()
    return _I16.pack(len(data)) + data


def _offset_key_prefix(group_id: str, topic: str) -> bytes:
    return _OFFSET_KEY_VERSION + _string(group_id) + _string(topic)


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return _offset_key_prefix(group_id, topic) + _I32.pack(partition)


def group_metadata_key(group_id: str) -> bytes:
    w = SchemaWriter(GROUP_KEY_VERSION)
    w.string(group_id)
    return w.done()


def offset_commit_value(o: OffsetAndMetadata) -> bytes:
    """OffsetCommitValue v3, or v1 when the commit carries an expire timestamp."""
    if o.expire_timestamp != NO_EXPIRE_TIMESTAMP:
        head = _VALUE_V1_HEAD.pack(OFFSET_VALUE_VERSION_WITH_EXPIRY, o.offset)
        tail = _TWO_I64.pack(o.commit_timestamp, o.expire_timestamp)
    else:
        head = _VALUE_V3_HEAD.pack(OFFSET_VALUE_VERSION, o.offset, o.leader_epoch)
        tail = _I64.pack(o.commit_timestamp)
    return head + _string(o.metadata) + tail


def offset_commit_records(
    group_id: str, offsets: Mapping[tuple[str, int], OffsetAndMetadata]
) -> list[tuple[bytes, bytes | None]]:
    """The (key, value) records of a commit of ``offsets`` by ``group_id``, in their order
    (a key's group and topic encoded once per topic)."""
    prefixes: dict[str, bytes] = {}
    records: list[tuple[bytes, bytes | None]] = []
    append = records.append
    pack_partition = _I32.pack
    pack_plain = _VALUE_V3_NO_METADATA.pack
    for (topic, partition), o in offsets.items():
        prefix = prefixes.get(topic)
        if prefix is None:
            prefix = prefixes[topic] = _offset_key_prefix(group_id, topic)
        if o.metadata == "" and o.expire_timestamp == NO_EXPIRE_TIMESTAMP:  # most commits
            value = pack_plain(
                OFFSET_VALUE_VERSION, o.offset, o.leader_epoch, 0, o.commit_timestamp
            )
        else:
            value = offset_commit_value(o)
        append((prefix + pack_partition(partition), value))
    return records


def group_value_version(inter_broker_protocol_version: str) -> int:
    """The GroupMetadataValue version Kafka writes for an ``inter.broker.protocol.version``:
    0 before 0.10.1, 1 before 2.1, 2 before 2.3, else 3."""
    m = _IBP.match(inter_broker_protocol_version)
    if m is None:
        raise ValueError(f"bad inter.broker.protocol.version {inter_broker_protocol_version!r}")
    ibp = tuple(int(x or 0) for x in m.groups())
    if ibp < (0, 10, 1):
        return 0
    if ibp < (2, 1, 0):
        return 1
    if ibp < (2, 3, 0):
        return 2
    return GROUP_VALUE_VERSION


def group_metadata_value(g: GroupMetadata, version: int = GROUP_VALUE_VERSION) -> bytes:
    """GroupMetadataValue ``version`` (0-3); versions before 3 carry no group instance ids,
    before 2 no state timestamp, before 1 no rebalance timeout (as Kafka's schemas)."""
    if not 0 <= version <= GROUP_VALUE_VERSION:
        raise ValueError(f"GroupMetadataValue v{version} is not written")
    w = SchemaWriter(version)
    w.string(g.protocol_type)
    w.i32(g.generation)
    w.string(g.protocol)
    w.string(g.leader)
    if version >= 2:
        w.i64(g.current_state_timestamp)
    w.i32(len(g.members))
    for m in g.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.i32(m.rebalance_timeout_ms)
        w.i32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.done()


# ---- reading -----------------------------------------------------------------------------


def parse_key(key: bytes | memoryview) -> OffsetKey | GroupKey:
    """Raises KafkaError(CORRUPT_MESSAGE) for malformed keys and unknown versions."""
    r = SchemaReader(key, "__consumer_offsets key")
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
    r = SchemaReader(value, "OffsetCommitValue")
    version = r.version(_FLEXIBLE_OFFSET_VALUE)
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
    r = SchemaReader(value, "GroupMetadataValue")
    version = r.version(_FLEXIBLE_GROUP_VALUE)
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
