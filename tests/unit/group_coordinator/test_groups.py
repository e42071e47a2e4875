"""The group state machine and the coordinator's request handlers, driven through
``api.handle`` with codec dicts as the gateway forwards them, over an in-memory store."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from collections.abc import Sequence
from typing import Any

import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.internal_topics.consumer_offsets import (
    GroupMetadata,
    MemberMetadata,
    OffsetAndMetadata,
    group_metadata_key,
    offset_commit_key,
)
from services.common.protocol import default_dict, message_spec
from services.group_coordinator import api
from services.group_coordinator.config import GroupConfig
from services.group_coordinator.groups import GroupShard
from services.group_coordinator.replay import ShardSnapshot

E = ErrorCode
CONFIG = GroupConfig(
    group_min_session_timeout_ms=10,
    group_max_session_timeout_ms=60000,
    group_initial_rebalance_delay_ms=0,
    group_max_size=100,
    offsets_retention_ms=60000,
    offsets_retention_check_interval_ms=3600000,
    offset_metadata_max_bytes=10,
)


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1) + struct.pack(">i", 0)  # user data, owned partitions


class FakeStore:
    """Records appends; ``fail`` makes them raise, ``gate`` holds them."""

    def __init__(self) -> None:
        self.appends: list[list[tuple[bytes, bytes | None]]] = []
        self.txn_appends: list[tuple[int, int, list[tuple[bytes, bytes | None]]]] = []
        self.fail: KafkaError | None = None
        self.gate: asyncio.Event | None = None

    async def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.appends.append(list(records))

    async def append_transactional(
        self, records: Sequence[tuple[bytes, bytes | None]], producer_id: int, epoch: int
    ) -> None:
        if self.fail is not None:
            raise self.fail
        self.txn_appends.append((producer_id, epoch, list(records)))

    def keys(self) -> list[tuple[bytes, bool]]:
        return [(k, v is None) for batch in self.appends for k, v in batch]


class Lookup:
    def __init__(self, shard: GroupShard | ErrorCode) -> None:
        self._shard = shard

    def partition_of(self, group_id: str) -> int | None:
        return 0

    def shard(self, partition: int | None) -> GroupShard | ErrorCode:
        return self._shard

    def loaded_shards(self) -> list[GroupShard]:
        return [self._shard] if isinstance(self._shard, GroupShard) else []

    async def write_txn_marker(
        self, partition: int, producer_id: int, epoch: int, coordinator_epoch: int, commit: bool
    ) -> ErrorCode:
        """The marker is taken as written: the shard applies or drops the offsets."""
        if isinstance(self._shard, ErrorCode):
            return self._shard
        self._shard.complete_txn(producer_id, commit)
        return ErrorCode.NONE


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Env:
    def __init__(self, config: GroupConfig = CONFIG) -> None:
        self.store = FakeStore()
        self.clock = Clock()
        self.shard = GroupShard(7, self.store, config, coordinator_id=1, clock=self.clock)
        self.shard.load(ShardSnapshot())
        self.lookup = Lookup(self.shard)

    async def call(self, api_key: int, version: int, **fields: Any) -> dict[str, Any]:
        body = default_dict(message_spec(api_key, version, "request"))
        assert set(fields) <= set(body), set(fields) - set(body)
        body.update(fields)
        return await api.handle(
            self.lookup, api_key, version, body, client_id="cli", client_host="/127.0.0.1"
        )

    async def join(
        self,
        group: str,
        member_id: str = "",
        *,
        version: int = 5,
        session: int = 1000,
        rebalance: int = 300,
        instance: str | None = None,
        topics: tuple[str, ...] = ("t",),
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "group_id": group,
            "member_id": member_id,
            "session_timeout": session,
            "protocol_type": protocol_type,
            "protocols": [
                {"name": n, "metadata": m}
                for n, m in (protocols or [("range", subscription(*topics))])
            ],
        }
        if version >= 1:
            fields["rebalance_timeout"] = rebalance
        if version >= 5:
            fields["group_instance_id"] = instance
        return await self.call(11, version, **fields)

    async def join_new(self, group: str, **kw: Any) -> dict[str, Any]:
        """Join with the KIP-394 round trip."""
        first = await self.join(group, **kw)
        assert first["error_code"] == E.MEMBER_ID_REQUIRED
        return await self.join(group, first["member_id"], **kw)

    async def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        version: int = 3,
        instance: str | None = None,
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "assignments": [
                {"member_id": m, "assignment": a} for m, a in (assignments or {}).items()
            ],
        }
        if version >= 3:
            fields["group_instance_id"] = instance
        if version >= 5:
            fields["protocol_type"] = "consumer"
            fields["protocol_name"] = "range"
        return await self.call(14, version, **fields)

    async def heartbeat(
        self, group: str, member_id: str, generation: int, instance: str | None = None
    ) -> int:
        r = await self.call(
            12,
            4,
            group_id=group,
            member_id=member_id,
            generation_id=generation,
            group_instance_id=instance,
        )
        return int(r["error_code"])

    async def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        member_id: str = "",
        generation: int = -1,
        *,
        version: int = 8,
        metadata: str | None = None,
        **extra: Any,
    ) -> dict[tuple[str, int], int]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, p), off in offsets.items():
            part: dict[str, Any] = {
                "partition_index": p,
                "committed_offset": off,
                "committed_metadata": metadata,
            }
            if version >= 6:
                part["committed_leader_epoch"] = 3
            topics.setdefault(t, []).append(part)
        r = await self.call(
            8,
            version,
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            topics=[{"name": t, "partitions": ps} for t, ps in topics.items()],
            **extra,
        )
        return {
            (t["name"], p["partition_index"]): p["error_code"]
            for t in r["topics"]
            for p in t["partitions"]
        }

    async def fetch(
        self, group: str, partitions: dict[str, list[int]] | None, version: int = 7
    ) -> dict[str, Any]:
        topics = (
            None
            if partitions is None
            else [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]
        )
        return await self.call(9, version, group_id=group, topics=topics)

    def state(self, group: str) -> str:
        return self.shard.groups[group].state.value


def offsets_of(response: dict[str, Any]) -> dict[tuple[str, int], tuple[int, str | None, int]]:
    return {
        (t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"], p["error_code"])
        for t in response["topics"]
        for p in t["partitions"]
    }


async def stable_group(env: Env, group: str, n: int, **kw: Any) -> list[str]:
    """n members joined and synced (range assignment of partition i to member i)."""
    joins = await asyncio.gather(*(env.join_new(group, **kw) for _ in range(n)))
    assert {j["error_code"] for j in joins} == {0}
    leader = joins[0]["leader"]
    gen = joins[0]["generation_id"]
    ids = [j["member_id"] for j in joins]
    assignments = {m: f"a{i}".encode() for i, m in enumerate(ids)}
    syncs = await asyncio.gather(
        *(env.sync(group, m, gen, assignments if m == leader else None) for m in ids)
    )
    assert [s["assignment"] for s in syncs] == [assignments[m] for m in ids]
    assert env.state(group) == "Stable"
    return ids


# ---- join / sync / heartbeat -----------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3])
async def test_full_cycle(n: int) -> None:
    env = Env()
    joins = await asyncio.gather(*(env.join_new("g") for _ in range(n)))
    assert {j["error_code"] for j in joins} == {0}
    assert {j["generation_id"] for j in joins} == {1}
    assert {j["protocol_name"] for j in joins} == {"range"}
    leader = joins[0]["leader"]
    assert {j["leader"] for j in joins} == {leader}
    ids = [j["member_id"] for j in joins]
    assert all(m.startswith("cli-") for m in ids) and len(set(ids)) == n
    for j in joins:  # only the leader gets the members and their metadata
        if j["member_id"] == leader:
            assert sorted(m["member_id"] for m in j["members"]) == sorted(ids)
            assert {m["metadata"] for m in j["members"]} == {subscription("t")}
        else:
            assert j["members"] == []
    assert env.state("g") == "CompletingRebalance"
    followers = [m for m in ids if m != leader]
    waiting = [asyncio.ensure_future(env.sync("g", m, 1)) for m in followers]
    await asyncio.sleep(0.01)
    assert not any(w.done() for w in waiting)  # followers wait for the leader's assignment
    assignments = {m: m.encode() for m in ids}
    lead = await env.sync("g", leader, 1, assignments)
    assert lead["error_code"] == 0 and lead["assignment"] == leader.encode()
    for m, w in zip(followers, waiting, strict=True):
        r = await w
        assert r["error_code"] == 0 and r["assignment"] == m.encode()
    assert env.state("g") == "Stable"
    assert env.store.keys() == [(group_metadata_key("g"), False)]
    for m in ids:
        assert await env.heartbeat("g", m, 1) == 0
    assert await env.heartbeat("g", ids[0], 0) == E.ILLEGAL_GENERATION
    assert await env.heartbeat("g", "nope", 1) == E.UNKNOWN_MEMBER_ID
    assert await env.heartbeat("other", ids[0], 1) == E.UNKNOWN_MEMBER_ID
    assert await env.heartbeat("", ids[0], 1) == E.INVALID_GROUP_ID
    # in Stable, SyncGroup answers the current assignment
    again = await env.sync("g", ids[-1], 1, version=5)
    assert (again["error_code"], again["assignment"]) == (0, ids[-1].encode())
    assert (again["protocol_type"], again["protocol_name"]) == ("consumer", "range")
    assert (await env.sync("g", ids[0], 0))["error_code"] == E.ILLEGAL_GENERATION
    assert (await env.sync("g", "x", 1))["error_code"] == E.UNKNOWN_MEMBER_ID


async def test_join_v0_to_v3_join_directly_and_v7_carries_protocol_type() -> None:
    env = Env()
    r = await env.join("g", version=3)
    assert r["error_code"] == 0 and r["member_id"].startswith("cli-")
    assert r["generation_id"] == 1 and r["leader"] == r["member_id"]
    # a rejoin with unchanged metadata while awaiting sync answers the same generation again
    v7 = await env.join("g", r["member_id"], version=7)
    assert v7["protocol_type"] == "consumer" and v7["protocol_name"] == "range"
    assert v7["generation_id"] == 1 and v7["members"][0]["member_id"] == r["member_id"]


async def test_member_id_required_then_pending_member_expires() -> None:
    env = Env()
    first = await env.join("g", session=50)
    assert first["error_code"] == E.MEMBER_ID_REQUIRED
    assert first["member_id"].startswith("cli-") and first["generation_id"] == -1
    assert env.shard.groups["g"].is_pending(first["member_id"])
    await asyncio.sleep(0.12)
    assert not env.shard.groups["g"].is_pending(first["member_id"])
    late = await env.join("g", first["member_id"], session=50)
    assert late["error_code"] == E.UNKNOWN_MEMBER_ID


async def test_join_validation() -> None:
    env = Env()
    assert (await env.join(""))["error_code"] == E.INVALID_GROUP_ID
    assert (await env.join("g", session=5))["error_code"] == E.INVALID_SESSION_TIMEOUT
    assert (await env.join("g", session=60001))["error_code"] == E.INVALID_SESSION_TIMEOUT
    assert (await env.join("g", "who"))["error_code"] == E.UNKNOWN_MEMBER_ID
    assert (await env.join("g", protocol_type=""))["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    await stable_group(env, "g", 1)
    other_type = await env.join("g", protocol_type="connect")
    assert other_type["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    no_common = await env.join("g", protocols=[("roundrobin", b"x")])
    assert no_common["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    assert env.state("g") == "Stable"


async def test_group_max_size() -> None:
    env = Env(dataclasses.replace(CONFIG, group_max_size=1))
    await stable_group(env, "g", 1)
    r = await env.join("g")  # checked before a member id is handed out
    assert r["error_code"] == E.GROUP_MAX_SIZE_REACHED and r["member_id"] == ""
    assert env.shard.groups["g"].size == 1 and env.state("g") == "Stable"


async def test_protocol_selection_most_votes_among_common() -> None:
    env = Env()
    prefs = [
        [("sticky", b"1"), ("range", b"1")],
        [("range", b"2"), ("sticky", b"2"), ("rr", b"2")],
        [("range", b"3"), ("sticky", b"3")],
    ]
    joins = await asyncio.gather(*(env.join_new("g", protocols=p) for p in prefs))
    assert {j["protocol_name"] for j in joins} == {"range"}
    leader = next(j for j in joins if j["members"])
    assert sorted(m["metadata"] for m in leader["members"]) == [b"1", b"2", b"3"]


async def test_new_member_rebalances_stable_group_and_others_learn_by_heartbeat() -> None:
    env = Env()
    a, b = await stable_group(env, "g", 2)
    joining = asyncio.ensure_future(env.join_new("g"))
    await asyncio.sleep(0.01)
    assert env.state("g") == "PreparingRebalance"
    assert await env.heartbeat("g", a, 1) == E.REBALANCE_IN_PROGRESS
    assert await env.heartbeat("g", b, 1) == E.REBALANCE_IN_PROGRESS
    # commits are still accepted while preparing (the heartbeat carries the news)
    assert await env.commit("g", {("t", 0): 5}, a, 1) == {("t", 0): 0}
    assert (await env.sync("g", a, 1))["error_code"] == E.REBALANCE_IN_PROGRESS
    assert not joining.done()  # waits for the known members to rejoin
    ra, rb = await asyncio.gather(env.join("g", a), env.join("g", b))
    rc = await joining
    assert {r["generation_id"] for r in (ra, rb, rc)} == {2}
    assert ra["leader"] == a and len(ra["members"]) == 3 and rc["members"] == []
    assert env.state("g") == "CompletingRebalance"
    assert await env.commit("g", {("t", 0): 6}, a, 2) == {("t", 0): E.REBALANCE_IN_PROGRESS}


async def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    env = Env()
    a, b = await stable_group(env, "g", 2, rebalance=100)
    r = await env.join("g", a, rebalance=100)  # the leader rejoins: rebalance; b never does
    assert r["error_code"] == 0 and r["generation_id"] == 2
    assert list(env.shard.groups["g"].members) == [a]
    assert (await env.sync("g", b, 1))["error_code"] == E.UNKNOWN_MEMBER_ID


async def test_session_expiry_removes_member_and_rebalances() -> None:
    # sessions are real loop timers: a heartbeats at a third of its session (a busy machine
    # running tests on every core can hold the loop for tens of milliseconds)
    env = Env()
    a, b = await stable_group(env, "g", 2, session=300)
    for _ in range(4):  # a keeps heartbeating, b does not
        await asyncio.sleep(0.1)
        assert await env.heartbeat("g", a, 1) in (0, E.REBALANCE_IN_PROGRESS)
    group = env.shard.groups["g"]
    assert b not in group.members
    assert env.state("g") == "PreparingRebalance"
    r = await env.join("g", a, session=300)
    assert r["generation_id"] == 2 and [m["member_id"] for m in r["members"]] == [a]


async def test_member_waiting_in_join_does_not_expire() -> None:
    env = Env()
    a, b = await stable_group(env, "g", 2, session=300, rebalance=1500)
    parked = asyncio.ensure_future(env.join("g", a, session=300, rebalance=1500))
    for _ in range(4):  # twice a's session; b heartbeats at a third of its own
        await asyncio.sleep(0.15)
        await env.heartbeat("g", b, 1)
    assert a in env.shard.groups["g"].members and not parked.done()
    await env.join("g", b, session=300, rebalance=1500)
    assert (await parked)["generation_id"] == 2


async def test_leave_group_versions_and_last_member_empties_group() -> None:
    env = Env()
    a, b = await stable_group(env, "g", 2)
    r = await env.call(13, 0, group_id="g", member_id=a)
    assert r["error_code"] == 0
    assert env.state("g") == "PreparingRebalance"
    r = await env.call(13, 0, group_id="g", member_id="ghost")
    assert r["error_code"] == E.UNKNOWN_MEMBER_ID
    r = await env.call(
        13,
        5,
        group_id="g",
        members=[
            {"member_id": b, "group_instance_id": None, "reason": "bye"},
            {"member_id": "ghost", "group_instance_id": None, "reason": None},
        ],
    )
    assert r["error_code"] == 0
    assert [(m["member_id"], m["error_code"]) for m in r["members"]] == [
        (b, 0),
        ("ghost", E.UNKNOWN_MEMBER_ID),
    ]
    group = env.shard.groups["g"]
    assert group.state.value == "Empty" and group.generation_id == 2
    await asyncio.sleep(0.01)
    assert env.store.keys()[-1] == (group_metadata_key("g"), False)  # the empty group persisted
    assert (await env.call(13, 1, group_id="", member_id="x"))["error_code"] == (E.INVALID_GROUP_ID)


async def test_static_member_rejoin_without_rebalance() -> None:
    env = Env()
    a, b = await stable_group(env, "g", 2, instance=None)
    joined = await asyncio.gather(
        env.join("g", instance="inst-1"), env.join("g", a), env.join("g", b)
    )
    sid = joined[0]["member_id"]
    assert sid.startswith("inst-1-") and joined[0]["generation_id"] == 2
    await asyncio.gather(
        env.sync("g", a, 2, {a: b"x", b: b"y", sid: b"z"}),
        env.sync("g", b, 2),
        env.sync("g", sid, 2, instance="inst-1"),
    )
    assert env.state("g") == "Stable"
    appends = len(env.store.appends)
    again = await env.join("g", instance="inst-1")  # restarted: unknown member id
    new_id = again["member_id"]
    assert again["error_code"] == 0 and new_id != sid and again["generation_id"] == 2
    assert again["leader"] == a and again["members"] == []
    assert env.state("g") == "Stable" and len(env.store.appends) == appends + 1
    assert await env.heartbeat("g", sid, 2, "inst-1") == E.FENCED_INSTANCE_ID
    assert await env.heartbeat("g", new_id, 2, "inst-1") == 0
    sync = await env.sync("g", new_id, 2, instance="inst-1")
    assert sync["assignment"] == b"z"
    assert await env.commit("g", {("t", 1): 1}, sid, 2, group_instance_id="inst-1") == {
        ("t", 1): E.FENCED_INSTANCE_ID
    }


async def test_static_rejoin_store_failure_reverts() -> None:
    env = Env()
    s = await env.join("g", instance="i")
    sid = s["member_id"]
    await env.sync("g", sid, 1, {sid: b"z"}, instance="i")
    env.store.fail = KafkaError(E.NOT_LEADER_OR_FOLLOWER)
    again = await env.join("g", instance="i")
    assert again["error_code"] == E.NOT_COORDINATOR and again["member_id"] == ""
    assert list(env.shard.groups["g"].members) == [sid]
    assert await env.heartbeat("g", sid, 1, "i") == 0


# ---- sync failures ---------------------------------------------------------------------------
async def test_failed_assignment_store_answers_error_and_rebalances() -> None:
    env = Env()
    joins = await asyncio.gather(env.join_new("g"), env.join_new("g"))
    leader = joins[0]["leader"]
    follower = next(j["member_id"] for j in joins if j["member_id"] != leader)
    env.store.fail = KafkaError(E.NOT_ENOUGH_REPLICAS)
    f = asyncio.ensure_future(env.sync("g", follower, 1))
    lead = await env.sync("g", leader, 1, {leader: b"1", follower: b"2"})
    assert lead["error_code"] == E.COORDINATOR_NOT_AVAILABLE
    assert (await f)["error_code"] == E.COORDINATOR_NOT_AVAILABLE
    assert env.state("g") == "PreparingRebalance"


async def test_sync_v5_protocol_checks() -> None:
    env = Env()
    m = (await env.join_new("g"))["member_id"]
    r = await env.call(14, 5, group_id="g", generation_id=1, member_id=m, protocol_type="consumer")
    assert r["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL  # protocol name missing
    r = await env.call(
        14,
        5,
        group_id="g",
        generation_id=1,
        member_id=m,
        protocol_type="consumer",
        protocol_name="sticky",
    )
    assert r["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL


# ---- offsets ---------------------------------------------------------------------------------
async def test_simple_commit_and_fetch() -> None:
    env = Env()
    r = await env.commit("s", {("t", 0): 10, ("t", 1): 11, ("u", 0): 5}, metadata="m")
    assert set(r.values()) == {0}
    assert len(env.store.appends) == 1 and len(env.store.appends[0]) == 3
    assert env.store.appends[0][0][0] == offset_commit_key("s", "t", 0)
    got = offsets_of(await env.fetch("s", {"t": [0, 1, 2]}))
    assert got == {("t", 0): (10, "m", 0), ("t", 1): (11, "m", 0), ("t", 2): (-1, "", 0)}
    everything = offsets_of(await env.fetch("s", None))
    assert set(everything) == {("t", 0), ("t", 1), ("u", 0)}
    v5 = await env.fetch("s", {"t": [0]}, version=5)
    assert v5["topics"][0]["partitions"][0]["committed_leader_epoch"] == 3
    unknown = await env.fetch("nobody", {"t": [0]}, version=1)
    assert offsets_of(unknown) == {("t", 0): (-1, "", 0)}
    v8 = await env.call(
        9,
        8,
        groups=[
            {"group_id": "s", "topics": [{"name": "u", "partition_indexes": [0]}]},
            {"group_id": "nobody", "topics": None},
        ],
    )
    assert [g["group_id"] for g in v8["groups"]] == ["s", "nobody"]
    assert v8["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 5
    assert v8["groups"][1]["topics"] == [] and v8["groups"][1]["error_code"] == 0


async def test_commit_checks() -> None:
    env = Env()
    a, _ = await stable_group(env, "g", 2)
    assert await env.commit("g", {("t", 0): 1}) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert await env.commit("g", {("t", 0): 1}, a, 7) == {("t", 0): E.ILLEGAL_GENERATION}
    assert await env.commit("g", {("t", 0): 1}, "x", 1) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert await env.commit("nogroup", {("t", 0): 1}, "x", 1) == {("t", 0): E.ILLEGAL_GENERATION}
    r = await env.commit("g", {("t", 0): 1, ("t", 1): 2}, a, 1, metadata="x" * 11)
    assert r == {("t", 0): E.OFFSET_METADATA_TOO_LARGE, ("t", 1): E.OFFSET_METADATA_TOO_LARGE}
    ok = await env.commit("g", {("t", 0): 7}, a, 1, metadata="short")
    assert ok == {("t", 0): 0}
    env.store.fail = KafkaError(E.REQUEST_TIMED_OUT)
    assert await env.commit("g", {("t", 0): 8, ("t", 1): 9}, a, 1) == {
        ("t", 0): E.REQUEST_TIMED_OUT,
        ("t", 1): E.REQUEST_TIMED_OUT,
    }
    env.store.fail = KafkaError(E.NOT_LEADER_OR_FOLLOWER)
    assert await env.commit("g", {("t", 0): 8}, a, 1) == {("t", 0): E.NOT_COORDINATOR}
    assert offsets_of(await env.fetch("g", {"t": [0, 1]}))[("t", 0)][0] == 7


async def test_commit_visible_only_after_append() -> None:
    env = Env()
    env.store.gate = asyncio.Event()
    pending = asyncio.ensure_future(env.commit("s", {("t", 0): 3}))
    await asyncio.sleep(0.01)
    assert offsets_of(await env.fetch("s", {"t": [0]}))[("t", 0)][0] == -1
    unstable = offsets_of(await env.fetch("s", {"t": [0]}, version=7))
    body = await env.call(
        9, 7, group_id="s", topics=[{"name": "t", "partition_indexes": [0]}], require_stable=True
    )
    assert offsets_of(body)[("t", 0)][2] == E.UNSTABLE_OFFSET_COMMIT
    assert unstable[("t", 0)][2] == 0
    env.store.gate.set()
    assert await pending == {("t", 0): 0}
    assert offsets_of(await env.fetch("s", {"t": [0]}))[("t", 0)][0] == 3


async def test_partition_stays_unstable_until_every_commit_of_it_is_written() -> None:
    """Two commits of one partition in flight: the first one's answer leaves the partition
    unstable (the second is still being written) and the group not Dead-able; offsets and
    stability follow the second once it is written."""
    env = Env()

    async def stable_fetch() -> dict[Any, Any]:
        topics = [{"name": "t", "partition_indexes": [0, 1]}]
        return offsets_of(await env.call(9, 7, group_id="s", topics=topics, require_stable=True))

    first_gate, second_gate = asyncio.Event(), asyncio.Event()
    env.store.gate = first_gate
    first = asyncio.ensure_future(env.commit("s", {("t", 0): 3, ("t", 1): 4}))
    await asyncio.sleep(0.01)
    env.store.gate = second_gate
    second = asyncio.ensure_future(env.commit("s", {("t", 0): 5, ("t", 1): 6}))
    await asyncio.sleep(0.01)
    first_gate.set()
    assert await first == {("t", 0): 0, ("t", 1): 0}
    fetched = await stable_fetch()
    assert fetched[("t", 0)][2] == E.UNSTABLE_OFFSET_COMMIT
    assert fetched[("t", 1)][2] == E.UNSTABLE_OFFSET_COMMIT
    group = env.shard.groups["s"]
    assert group.pending_partitions() == {("t", 0), ("t", 1)}
    second_gate.set()
    assert await second == {("t", 0): 0, ("t", 1): 0}
    fetched = await stable_fetch()
    assert (fetched[("t", 0)][0], fetched[("t", 0)][2]) == (5, 0)
    assert (fetched[("t", 1)][0], fetched[("t", 1)][2]) == (6, 0)
    assert group.pending_commits == [] and group.has_offsets()


async def test_retention_time_sets_expire_timestamp_and_expiry() -> None:
    env = Env()
    await env.commit("s", {("t", 0): 1}, version=2, retention_time=5000)
    await env.commit("s", {("t", 1): 2}, version=2)
    group = env.shard.groups["s"]
    assert group.offsets[("t", 0)].expire_timestamp > 0
    assert group.offsets[("t", 1)].expire_timestamp == -1
    env.clock.now = group.offsets[("t", 0)].expire_timestamp
    assert await env.shard.offsets.expire_offsets() == 1
    assert set(group.offsets) == {("t", 1)}
    assert env.store.appends[-1] == [(offset_commit_key("s", "t", 0), None)]
    # a standalone group's offsets expire retention after their commit; then the group is gone
    env.clock.now = group.offsets[("t", 1)].commit_timestamp + CONFIG.offsets_retention_ms
    assert await env.shard.offsets.expire_offsets() == 1
    assert "s" not in env.shard.groups


async def test_expiry_of_empty_group_counts_from_when_it_emptied() -> None:
    env = Env()
    (a,) = await stable_group(env, "g", 1)
    await env.commit("g", {("t", 0): 4}, a, 1)
    env.clock.now += CONFIG.offsets_retention_ms * 2
    assert await env.shard.offsets.expire_offsets() == 0  # Stable and subscribed to t
    await env.call(13, 3, group_id="g", members=[{"member_id": a, "group_instance_id": None}])
    assert env.state("g") == "Empty"
    env.clock.now += CONFIG.offsets_retention_ms - 1
    assert await env.shard.offsets.expire_offsets() == 0
    env.clock.now += 1
    assert await env.shard.offsets.expire_offsets() == 1
    assert "g" not in env.shard.groups
    assert env.store.keys()[-2:] == [
        (offset_commit_key("g", "t", 0), True),
        (group_metadata_key("g"), True),
    ]


async def test_periodic_expiry_task_runs() -> None:
    config = dataclasses.replace(CONFIG, offsets_retention_check_interval_ms=20)
    env = Env(config)
    await env.commit("s", {("t", 0): 1}, version=2, retention_time=0)
    await asyncio.sleep(0.1)
    assert "s" not in env.shard.groups


# ---- describe / list / delete ----------------------------------------------------------------
async def test_describe_list_delete() -> None:
    env = Env()
    a, b = await stable_group(env, "g", 2)
    await env.commit("simple", {("t", 0): 1})
    r = await env.call(15, 5, groups=["g", "missing"], include_authorized_operations=True)
    g, missing = r["groups"]
    assert (g["group_state"], g["protocol_type"], g["protocol_data"]) == (
        "Stable",
        "consumer",
        "range",
    )
    assert g["authorized_operations"] == api.GROUP_AUTHORIZED_OPERATIONS
    members = {m["member_id"]: m for m in g["members"]}
    assert set(members) == {a, b}
    assert members[a]["client_id"] == "cli" and members[a]["client_host"] == "/127.0.0.1"
    assert members[a]["member_metadata"] == subscription("t")
    assert members[a]["member_assignment"] == b"a0"
    assert (missing["error_code"], missing["group_state"], missing["members"]) == (0, "Dead", [])
    listed = await env.call(16, 4, states_filter=[])
    assert {(x["group_id"], x["group_state"]) for x in listed["groups"]} == {
        ("g", "Stable"),
        ("simple", "Empty"),
    }
    only_empty = await env.call(16, 4, states_filter=["empty"])
    assert [x["group_id"] for x in only_empty["groups"]] == ["simple"]
    r = await env.call(42, 2, groups_names=["g", "simple", "missing"])
    assert {x["group_id"]: x["error_code"] for x in r["results"]} == {
        "g": E.NON_EMPTY_GROUP,
        "simple": 0,
        "missing": E.GROUP_ID_NOT_FOUND,
    }
    assert env.store.appends[-1] == [(offset_commit_key("simple", "t", 0), None)]
    assert "simple" not in env.shard.groups
    described = await env.call(15, 0, groups=["simple"])
    assert described["groups"][0]["group_state"] == "Dead"


async def test_delete_group_failure_keeps_group() -> None:
    env = Env()
    await env.commit("s", {("t", 0): 1})
    env.store.fail = KafkaError(E.NOT_ENOUGH_REPLICAS)
    r = await env.call(42, 0, groups_names=["s"])
    assert r["results"] == [{"group_id": "s", "error_code": E.COORDINATOR_NOT_AVAILABLE}]
    assert env.state("s") == "Empty"
    assert offsets_of(await env.fetch("s", {"t": [0]}))[("t", 0)][0] == 1


async def test_offset_delete() -> None:
    env = Env()
    (a,) = await stable_group(env, "g", 1, topics=("t",))
    await env.commit("g", {("t", 0): 1, ("u", 0): 2}, a, 1)
    r = await env.call(
        47,
        0,
        group_id="g",
        topics=[
            {"name": "t", "partitions": [{"partition_index": 0}]},
            {"name": "u", "partitions": [{"partition_index": 0}]},
        ],
    )
    errors = {
        (t["name"], p["partition_index"]): p["error_code"]
        for t in r["topics"]
        for p in t["partitions"]
    }
    assert r["error_code"] == 0
    assert errors == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): 0}
    assert env.store.appends[-1] == [(offset_commit_key("g", "u", 0), None)]
    assert set(env.shard.groups["g"].offsets) == {("t", 0)}
    missing = await env.call(47, 0, group_id="nope", topics=[])
    assert missing["error_code"] == E.GROUP_ID_NOT_FOUND


# ---- load / resign ---------------------------------------------------------------------------
async def test_load_restores_groups_and_offsets() -> None:
    member = MemberMetadata("m-1", None, "cli", "/h", 300, 60, subscription("t"), b"asg")
    snapshot = ShardSnapshot(
        groups={
            "g": GroupMetadata("consumer", 4, "range", "m-1", 123, (member,)),
            "e": GroupMetadata("consumer", 2, None, None, 456, ()),
        },
        offsets={
            "g": {("t", 0): OffsetAndMetadata(9, 2, "md", 1)},
            "o": {("x", 1): OffsetAndMetadata(3)},
        },
    )
    env = Env()
    env.shard.resign()
    env.shard = GroupShard(7, env.store, CONFIG, coordinator_id=1, clock=env.clock)
    env.shard.load(snapshot)
    env.lookup = Lookup(env.shard)
    assert sorted(env.shard.group_states()) == ["Empty", "Empty", "Stable"]
    assert await env.heartbeat("g", "m-1", 4) == 0
    assert (await env.sync("g", "m-1", 4))["assignment"] == b"asg"
    assert offsets_of(await env.fetch("g", {"t": [0]}))[("t", 0)] == (9, "md", 0)
    assert offsets_of(await env.fetch("o", None)) == {("x", 1): (3, "", 0)}
    await asyncio.sleep(0.1)  # no heartbeat within the 60 ms session: removed
    assert "m-1" not in env.shard.groups["g"].members


async def test_resign_answers_pending_joins_not_coordinator() -> None:
    env = Env()
    a, _ = await stable_group(env, "g", 2)
    parked = asyncio.ensure_future(env.join("g", a))
    await asyncio.sleep(0.01)
    env.shard.resign()
    r = await parked
    assert r["error_code"] == E.NOT_COORDINATOR
    assert env.shard.group_states() == []
    writes = len(env.store.appends)
    assert await env.commit("g", {("t", 0): 1}) == {("t", 0): E.NOT_COORDINATOR}
    assert len(env.store.appends) == writes


async def test_shard_lookup_errors() -> None:
    env = Env()
    env.lookup = Lookup(E.COORDINATOR_LOAD_IN_PROGRESS)
    assert (await env.join("g"))["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert (await env.sync("g", "m", 1))["error_code"] == E.REBALANCE_IN_PROGRESS
    assert await env.heartbeat("g", "m", 1) == 0
    env.lookup = Lookup(E.NOT_COORDINATOR)
    assert await env.commit("g", {("t", 0): 1}) == {("t", 0): E.NOT_COORDINATOR}
    assert (await env.fetch("g", {"t": [0]}))["error_code"] == E.NOT_COORDINATOR
    v1 = await env.fetch("g", {"t": [0]}, version=1)
    assert offsets_of(v1) == {("t", 0): (-1, "", E.NOT_COORDINATOR)}
