"""``__consumer_offsets`` records in Kafka's binary schemas, and shard replay."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.errors import KafkaError
from services.common.internal_topics.consumer_offsets import (
    GroupKey,
    GroupMetadata,
    MemberMetadata,
    OffsetAndMetadata,
    OffsetKey,
    describe_record,
    group_metadata_key,
    group_metadata_value,
    group_value_version,
    offset_commit_key,
    offset_commit_records,
    offset_commit_value,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from services.common.internal_topics.schema import build_records_batch
from services.common.records.record import build_end_txn_marker
from services.common.records.varint import encode_unsigned_varint
from services.group_coordinator.replay import ShardReplay
from services.group_coordinator.settings import GroupCoordinatorSettings


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(text.encode())) + text.encode()


def compact(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    return encode_unsigned_varint(len(text.encode()) + 1) + text.encode()


MEMBER = MemberMetadata("m-1", "static-1", "client", "/127.0.0.1", 30000, 10000, b"sub", b"asg")
GROUP = GroupMetadata("consumer", 3, "range", "m-1", 1700000000000, (MEMBER,))


def test_key_layouts_are_kafkas() -> None:
    assert offset_commit_key("g", "t", 7) == b"\x00\x01" + s16("g") + s16("t") + b"\x00\x00\x00\x07"
    assert group_metadata_key("g") == b"\x00\x02" + s16("g")
    assert parse_key(offset_commit_key("g", "t", 7)) == OffsetKey("g", "t", 7)
    # version 0 keys (old Kafka) have the same layout
    assert parse_key(b"\x00\x00" + s16("g") + s16("t") + b"\x00\x00\x00\x01") == OffsetKey(
        "g", "t", 1
    )
    assert parse_key(group_metadata_key("g")) == GroupKey("g")


def test_offset_value_v3_and_v1_layouts() -> None:
    o = OffsetAndMetadata(42, 5, "meta", 1000)
    assert offset_commit_value(o) == (
        b"\x00\x03" + struct.pack(">q", 42) + struct.pack(">i", 5) + s16("meta")
        + struct.pack(">q", 1000)
    )  # fmt: skip
    expiring = OffsetAndMetadata(42, -1, "", 1000, 2000)
    assert offset_commit_value(expiring) == (
        b"\x00\x01" + struct.pack(">q", 42) + s16("") + struct.pack(">qq", 1000, 2000)
    )
    assert parse_offset_value(offset_commit_value(o)) == o
    assert parse_offset_value(offset_commit_value(expiring)) == expiring


def test_offset_value_old_and_flexible_versions_decode() -> None:
    v0 = b"\x00\x00" + struct.pack(">q", 9) + s16("x") + struct.pack(">q", 5)
    assert parse_offset_value(v0) == OffsetAndMetadata(9, -1, "x", 5)
    v2 = b"\x00\x02" + struct.pack(">q", 9) + s16("x") + struct.pack(">q", 5)
    assert parse_offset_value(v2) == OffsetAndMetadata(9, -1, "x", 5)
    # v4: compact string + tagged fields (one unknown tag skipped)
    v4 = (
        b"\x00\x04" + struct.pack(">q", 9) + struct.pack(">i", 2) + compact("x")
        + struct.pack(">q", 5) + b"\x01" + b"\x07\x02ab"
    )  # fmt: skip
    assert parse_offset_value(v4) == OffsetAndMetadata(9, 2, "x", 5)


def test_group_value_v3_layout_and_versions() -> None:
    member = (
        s16("m-1") + s16("static-1") + s16("client") + s16("/127.0.0.1")
        + struct.pack(">ii", 30000, 10000) + struct.pack(">i", 3) + b"sub"
        + struct.pack(">i", 3) + b"asg"
    )  # fmt: skip
    expected = (
        b"\x00\x03" + s16("consumer") + struct.pack(">i", 3) + s16("range") + s16("m-1")
        + struct.pack(">q", 1700000000000) + struct.pack(">i", 1) + member
    )  # fmt: skip
    assert group_metadata_value(GROUP) == expected
    assert parse_group_value(expected) == GROUP
    # v0: no rebalance timeout (= session timeout), no state timestamp, no instance id
    v0 = (
        b"\x00\x00" + s16("consumer") + struct.pack(">i", 1) + s16(None) + s16(None)
        + struct.pack(">i", 1) + s16("m") + s16("c") + s16("h") + struct.pack(">i", 6000)
        + struct.pack(">i", 0) + struct.pack(">i", -1)
    )  # fmt: skip
    g = parse_group_value(v0)
    assert g.protocol is None and g.leader is None and g.current_state_timestamp == -1
    (m,) = g.members
    assert (m.member_id, m.group_instance_id, m.session_timeout_ms, m.rebalance_timeout_ms) == (
        "m",
        None,
        6000,
        6000,
    )
    assert m.assignment == b""


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x00", b"\x00\x09" + s16("g"), b"\x00\x02" + s16("g") + b"junk", b"\x00\x01\x00\x05ab"],
)
def test_malformed_keys_raise_corrupt_message(raw: bytes) -> None:
    with pytest.raises(KafkaError):
        parse_key(raw)


def test_truncated_values_raise() -> None:
    full = group_metadata_value(GROUP)
    for cut in range(len(full)):
        with pytest.raises(KafkaError):
            parse_group_value(full[:cut])
    with pytest.raises(KafkaError):
        parse_offset_value(b"\x00\x07" + b"\x00" * 20)


@given(
    offset=st.integers(0, 2**63 - 1),
    epoch=st.integers(-1, 2**31 - 1),
    metadata=st.text(max_size=50),
    ts=st.integers(0, 2**62),
)
def test_offset_value_round_trip(offset: int, epoch: int, metadata: str, ts: int) -> None:
    o = OffsetAndMetadata(offset, epoch, metadata, ts)
    assert parse_offset_value(offset_commit_value(o)) == o


def _batch(records: list[tuple[bytes, bytes | None]], seq: int = 0) -> bytes:
    return build_records_batch(
        records, producer_id=7, producer_epoch=0, base_sequence=seq, timestamp_ms=1
    )


def _with_offset(batch: bytes, base_offset: int) -> bytes:
    return struct.pack(">q", base_offset) + batch[8:]


def test_replay_newest_wins_tombstones_remove_partial_batch_ignored() -> None:
    o1 = OffsetAndMetadata(1, -1, "", 1)
    o2 = OffsetAndMetadata(2, -1, "", 2)
    first = _with_offset(
        _batch(
            [
                (offset_commit_key("g", "t", 0), offset_commit_value(o1)),
                (offset_commit_key("g", "t", 1), offset_commit_value(o1)),
                (group_metadata_key("g"), group_metadata_value(GROUP)),
                (group_metadata_key("gone"), group_metadata_value(GROUP)),
            ]
        ),
        0,
    )
    second = _with_offset(
        _batch(
            [
                (offset_commit_key("g", "t", 0), offset_commit_value(o2)),
                (offset_commit_key("g", "t", 1), None),
                (group_metadata_key("gone"), None),
            ],
            seq=4,
        ),
        4,
    )
    third = _with_offset(_batch([(offset_commit_key("g", "t", 0), None)], seq=7), 7)
    replay = ShardReplay()
    # the third batch is cut short: not applied, and the offset stops before it
    assert replay.apply(memoryview(first + second + third[:-3])) == 7
    snap = replay.snapshot()
    assert snap.offsets == {"g": {("t", 0): o2}}
    assert snap.groups == {"g": GROUP}
    assert replay.apply(memoryview(third)) == 8
    assert replay.snapshot().offsets == {}


def test_replay_skips_control_batches_and_unreadable_records() -> None:
    marker = build_end_txn_marker(
        commit=True, producer_id=9, producer_epoch=0, coordinator_epoch=0, timestamp=1
    )
    good = _with_offset(
        _batch(
            [
                (b"\x00\x63junk", b"x"),  # unknown key version: skipped, not fatal
                (offset_commit_key("g", "t", 0), b"\x00\x01"),  # truncated value: skipped
                (offset_commit_key("g", "t", 1), offset_commit_value(OffsetAndMetadata(5))),
            ]
        ),
        1,
    )
    replay = ShardReplay()
    assert replay.apply(memoryview(_with_offset(marker, 0) + good)) == 4
    assert replay.snapshot().offsets == {"g": {("t", 1): OffsetAndMetadata(5)}}
    assert replay.skipped == 2


def test_replay_reads_compressed_batches() -> None:
    from services.common.records.record import Record, build_batch

    batch = build_batch(
        [
            Record(
                key=offset_commit_key("g", "t", 0), value=offset_commit_value(OffsetAndMetadata(3))
            )
        ],
        compression=1,
    )
    replay = ShardReplay()
    assert replay.apply(memoryview(batch)) == 1
    assert replay.snapshot().offsets["g"][("t", 0)].offset == 3


def test_describe_record_like_kafkas_offsets_decoder() -> None:
    k, v = describe_record(
        offset_commit_key("g", "t", 0), offset_commit_value(OffsetAndMetadata(5, 1, "m", 9))
    )
    assert k == "offset_commit::group=g,partition=t-0"
    assert v == "offset=5,metadata=m,commitTimestamp=9,leaderEpoch=1"
    k, v = describe_record(group_metadata_key("g"), None)
    assert (k, v) == ("group_metadata::group=g", "<DELETE>")
    k, v = describe_record(group_metadata_key("g"), group_metadata_value(GROUP))
    assert '"protocol":"range"' in v and '"generationId":3' in v
    k, v = describe_record(b"\x00", b"")
    assert k == "<unreadable key>"


@pytest.mark.parametrize(
    ("ibp", "version"),
    [("0.10.0", 0), ("0.10.1-IV2", 1), ("2.0", 1), ("2.2", 2), ("2.2-IV1", 2), ("2.3", 3)]
    + [("3.7", 3)],
)
def test_group_value_version_follows_inter_broker_protocol_version(ibp: str, version: int) -> None:
    assert group_value_version(ibp) == version
    raw = group_metadata_value(GROUP, version)
    assert struct.unpack(">h", raw[:2])[0] == version
    back = parse_group_value(raw)
    assert back.members[0].member_id == "m-1" and back.members[0].assignment == b"asg"
    assert back.members[0].group_instance_id == ("static-1" if version >= 3 else None)
    assert back.current_state_timestamp == (GROUP.current_state_timestamp if version >= 2 else -1)
    assert back.members[0].rebalance_timeout_ms == (30000 if version >= 1 else 10000)


def test_v2_group_value_layout_is_v3_without_instance_ids() -> None:
    v3 = group_metadata_value(GROUP)
    v2 = group_metadata_value(GROUP, 2)
    assert v2 == b"\x00\x02" + v3[2:].replace(s16("static-1"), b"", 1)


@pytest.mark.parametrize("bad", ["", "latest", "2", "2.x", "3.7-beta"])
def test_malformed_inter_broker_protocol_version(bad: str) -> None:
    with pytest.raises(ValueError):
        group_value_version(bad)
    with pytest.raises(Exception, match="inter.broker.protocol.version"):
        GroupCoordinatorSettings.model_validate({"inter.broker.protocol.version": bad})


def test_offset_commit_records_are_each_partitions_key_and_value() -> None:
    """A commit's records, built with each topic's key prefix once, are the records of
    ``offset_commit_key`` / ``offset_commit_value`` one partition at a time, in order."""
    offsets = {
        ("orders", 0): OffsetAndMetadata(10, 2, "m", 1000),
        ("payments-€", 4): OffsetAndMetadata(11, -1, "", 1000, 5000),
        ("orders", 3): OffsetAndMetadata(12, 7, "é" * 3, 1000),
        ("orders", 70000): OffsetAndMetadata(2**40, 9, "", 1000),  # no metadata, no expiry
    }
    records = offset_commit_records("group-ü", offsets)
    assert records == [
        (offset_commit_key("group-ü", t, p), offset_commit_value(o))
        for (t, p), o in offsets.items()
    ]
    assert [parse_key(k) for k, _ in records] == [OffsetKey("group-ü", t, p) for t, p in offsets]
    assert [parse_offset_value(v) for _, v in records if v is not None] == list(offsets.values())
