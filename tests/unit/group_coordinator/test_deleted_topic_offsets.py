"""Offsets of a deleted topic are removed from every group (Kafka's cleanupGroupMetadata)."""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.errors import ErrorCode, KafkaError
from services.common.internal_topics.consumer_offsets import group_metadata_key, offset_commit_key
from tests.unit.group_coordinator.test_groups import Env, offsets_of, stable_group


async def test_offsets_of_a_deleted_topic_are_tombstoned_in_every_group() -> None:
    env = Env()
    (a,) = await stable_group(env, "g", 1, topics=("gone", "kept"))
    await env.commit("g", {("gone", 0): 5, ("gone", 1): 6, ("kept", 0): 7}, a, 1)
    await env.commit("simple", {("gone", 2): 8})  # a standalone group with only that topic
    before = len(env.store.appends)

    assert await env.shard.offsets.remove_topics({"gone"}) == 3

    assert set(offsets_of(await env.fetch("g", None))) == {("kept", 0)}
    assert offsets_of(await env.fetch("simple", None)) == {}
    assert env.state("g") == "Stable"
    assert "simple" not in env.shard.groups  # Empty without offsets: Dead
    written = [r for batch in env.store.appends[before:] for r in batch]
    assert sorted(written) == sorted(
        [
            (offset_commit_key("g", "gone", 0), None),
            (offset_commit_key("g", "gone", 1), None),
            (offset_commit_key("simple", "gone", 2), None),
        ]
    )
    assert await env.shard.offsets.remove_topics({"gone"}) == 0  # nothing left: no write
    assert len(env.store.appends) == before + 1


async def test_a_group_with_a_generation_leaves_a_metadata_tombstone() -> None:
    env = Env()
    (a,) = await stable_group(env, "g", 1, topics=("gone",))
    await env.commit("g", {("gone", 0): 5}, a, 1)
    await env.call(13, 3, group_id="g", members=[{"member_id": a, "group_instance_id": None}])
    assert env.state("g") == "Empty"
    assert await env.shard.offsets.remove_topics(["gone"]) == 1
    await asyncio.sleep(0)  # the group tombstone is its own write
    assert "g" not in env.shard.groups
    assert (group_metadata_key("g"), True) in env.store.keys()


async def test_a_commit_in_flight_for_the_deleted_topic_is_tombstoned_too() -> None:
    env = Env()
    env.store.gate = asyncio.Event()
    pending = asyncio.ensure_future(env.commit("s", {("gone", 0): 3}))
    await asyncio.sleep(0.01)
    removal = asyncio.ensure_future(env.shard.offsets.remove_topics({"gone"}))
    await asyncio.sleep(0.01)
    env.store.gate.set()
    assert await pending == {("gone", 0): 0}
    assert await removal == 0  # nothing was committed yet, but the write is covered
    assert env.store.appends[-1] == [(offset_commit_key("s", "gone", 0), None)]
    assert offsets_of(await env.fetch("s", {"gone": [0]}))[("gone", 0)][0] == -1


async def test_failed_tombstones_still_forget_the_offsets() -> None:
    env = Env()
    await env.commit("s", {("gone", 0): 3, ("kept", 0): 1})
    env.store.fail = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert await env.shard.offsets.remove_topics({"gone"}) == 1
    assert set(offsets_of(await env.fetch("s", None))) == {("kept", 0)}


# ---- offsets committed in a transaction (TxnOffsetCommit) --------------------------------------


async def _txn_commit(
    env: Env, group: str, offsets: dict[tuple[str, int], int], **extra: Any
) -> dict[tuple[str, int], int]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off})
    r = await env.call(
        28, 3, transactional_id="tx", group_id=group, producer_id=77, producer_epoch=2,
        topics=[{"name": t, "partitions": ps} for t, ps in topics.items()], **extra,
    )  # fmt: skip
    return {
        (t["name"], p["partition_index"]): p["error_code"]
        for t in r["topics"]
        for p in t["partitions"]
    }


async def test_transactional_offsets_count_only_after_a_commit_marker() -> None:
    env = Env()
    await env.commit("g", {("t", 0): 1})
    assert await _txn_commit(env, "g", {("t", 0): 5, ("t", 1): 6}) == {("t", 0): 0, ("t", 1): 0}
    (pid, epoch, records) = env.store.txn_appends[0]
    assert (pid, epoch) == (77, 2)
    assert [k for k, _ in records] == [
        offset_commit_key("g", "t", 0),
        offset_commit_key("g", "t", 1),
    ]
    # not visible yet; a stable fetch is told the partition is unstable
    assert offsets_of(await env.fetch("g", {"t": [0]}))[("t", 0)][0] == 1
    stable = await env.call(
        9, 7, group_id="g", topics=[{"name": "t", "partition_indexes": [0]}], require_stable=True
    )
    assert stable["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert await env.lookup.write_txn_marker(0, 77, 2, 1, True) == ErrorCode.NONE
    assert offsets_of(await env.fetch("g", {"t": [0, 1]})) == {
        ("t", 0): (5, "", 0),
        ("t", 1): (6, "", 0),
    }
    # an aborted transaction's offsets are dropped
    await _txn_commit(env, "g", {("t", 0): 9})
    assert await env.lookup.write_txn_marker(0, 77, 2, 1, False) == ErrorCode.NONE
    assert offsets_of(await env.fetch("g", {"t": [0]}))[("t", 0)][0] == 5


async def test_transactional_commit_fencing_kip447() -> None:
    env = Env()
    (member,) = await stable_group(env, "g", 1)
    stale = await _txn_commit(env, "g", {("t", 0): 5}, member_id=member, generation_id=0)
    assert stale == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    ghost = await _txn_commit(env, "g", {("t", 0): 5}, member_id="ghost", generation_id=1)
    assert ghost == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    ok = await _txn_commit(env, "g", {("t", 0): 5}, member_id=member, generation_id=1)
    assert ok == {("t", 0): 0}
    env.store.fail = KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, "old epoch")
    assert await _txn_commit(env, "g", {("t", 1): 5}) == {
        ("t", 1): ErrorCode.INVALID_PRODUCER_EPOCH
    }


def test_replay_holds_transactional_offsets_until_their_marker() -> None:
    from services.common.internal_topics.consumer_offsets import (
        OffsetAndMetadata,
        offset_commit_value,
    )
    from services.common.records.record import Record, build_batch, build_end_txn_marker
    from services.group_coordinator.replay import ShardReplay

    def txn(pid: int, offset: int, base: int) -> bytes:
        return build_batch(
            [Record(key=offset_commit_key("g", "t", 0), value=offset_commit_value(OffsetAndMetadata(offset)))],
            base_offset=base, producer_id=pid, producer_epoch=0, base_sequence=0,
            is_transactional=True,
        )  # fmt: skip

    log = (
        txn(1, 10, 0)
        + txn(2, 20, 1)
        + build_end_txn_marker(True, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=0, base_offset=2)
        + txn(3, 30, 3)
        + build_end_txn_marker(False, producer_id=3, producer_epoch=0, coordinator_epoch=0, timestamp=0, base_offset=4)
    )  # fmt: skip
    replay = ShardReplay()
    assert replay.apply(memoryview(log)) == 5
    snap = replay.snapshot()
    assert snap.offsets == {"g": {("t", 0): OffsetAndMetadata(10)}}  # 1 committed, 3 aborted
    assert snap.pending_txn == {2: {"g": {("t", 0): OffsetAndMetadata(20)}}}  # still open
