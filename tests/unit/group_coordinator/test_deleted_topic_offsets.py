"""Offsets of a deleted topic are removed from every group (Kafka's cleanupGroupMetadata)."""

from __future__ import annotations

import asyncio

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
