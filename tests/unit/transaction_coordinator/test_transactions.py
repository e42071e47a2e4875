"""The transaction state machine, driven through ``api.handle`` with codec dicts as the gateway
forwards them, over an in-memory store and a markers recorder."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.internal_topics.transaction_state import (
    TxnRecord,
    TxnState,
    parse_key,
    parse_value,
)
from services.common.protocol import ApiKey, default_dict, message_spec
from services.transaction_coordinator import api, transactions
from services.transaction_coordinator.config import TxnConfig
from services.transaction_coordinator.replay import TxnReplay
from services.transaction_coordinator.transactions import TxnShard
from tests.unit.group_coordinator.test_groups import Clock, FakeStore

E = ErrorCode
S = TxnState
CONFIG = TxnConfig(max_timeout_ms=60000, abort_interval_ms=3600000)


class Ids:
    def __init__(self) -> None:
        self.next = 4000

    async def next_id(self) -> int:
        self.next += 1
        return self.next - 1


class Markers:
    """Records marker writes; ``gate`` holds them, ``result`` is what they return."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int, bool, set[tuple[str, int]]]] = []
        self.gate: asyncio.Event | None = None
        self.result = True

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[tuple[str, int]],
        live: Callable[[], bool],
    ) -> bool:
        if self.gate is not None:
            await self.gate.wait()
        self.calls.append((producer_id, producer_epoch, coordinator_epoch, commit, set(partitions)))
        return self.result and live()


class Lookup:
    def __init__(self, shard: TxnShard | ErrorCode) -> None:
        self._shard = shard

    def partition_of(self, key: str) -> int | None:
        return 0

    def shard(self, partition: int | None) -> TxnShard | ErrorCode:
        return self._shard

    def loaded_shards(self) -> list[TxnShard]:
        return [self._shard] if isinstance(self._shard, TxnShard) else []


class Env:
    def __init__(self, records: dict[str, TxnRecord] | None = None) -> None:
        self.store = FakeStore()
        self.clock = Clock()
        self.markers = Markers()
        self.ids = Ids()
        self.shard = TxnShard(
            3, self.store, CONFIG, self.ids, self.markers, coordinator_epoch=9, clock=self.clock
        )
        self.shard.load(records or {})
        self.lookup = Lookup(self.shard)

    async def call(self, api_key: int, version: int, **fields: Any) -> dict[str, Any]:
        body = default_dict(message_spec(api_key, version, "request"))
        assert set(fields) <= set(body), set(fields) - set(body)
        body.update(fields)
        return await api.handle(self.lookup, lambda group: 11, api_key, version, body)

    async def init(
        self,
        txn: str = "tx",
        pid: int = -1,
        epoch: int = -1,
        version: int = 4,
        txn_timeout: int = 1000,
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {"transactional_id": txn, "transaction_timeout": txn_timeout}
        if version >= 3:
            fields |= {"producer_id": pid, "producer_epoch": epoch}
        return await self.call(ApiKey.INIT_PRODUCER_ID, version, **fields)

    async def add(
        self, pid: int, epoch: int, parts: dict[str, list[int]], txn: str = "tx", version: int = 3
    ) -> dict[tuple[str, int], int]:
        resp = await self.call(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            version,
            v3_and_below_transactional_id=txn,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[{"name": t, "partitions": ps} for t, ps in parts.items()],
        )
        return {
            (t["name"], p["partition_index"]): p["partition_error_code"]
            for t in resp["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]
        }

    async def end(
        self, pid: int, epoch: int, commit: bool, txn: str = "tx", version: int = 3
    ) -> int:
        resp = await self.call(
            ApiKey.END_TXN,
            version,
            transactional_id=txn,
            producer_id=pid,
            producer_epoch=epoch,
            committed=commit,
        )
        return int(resp["error_code"])

    def written(self) -> list[tuple[str, TxnRecord | None]]:
        return [
            (parse_key(k), parse_value(v) if v is not None else None)
            for batch in self.store.appends
            for k, v in batch
        ]

    def state(self, txn: str = "tx") -> TxnState:
        return self.shard.entries[txn].record.state


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_init_commit_abort_and_the_log() -> None:
    env = Env()
    r = await env.init()
    assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (0, 4000, 0)
    assert await env.add(4000, 0, {"a": [0, 1], "b": [2]}) == {
        ("a", 0): 0,
        ("a", 1): 0,
        ("b", 2): 0,
    }
    assert env.state() == S.ONGOING
    assert await env.add(4000, 0, {"a": [0]}) == {("a", 0): 0}  # already in: no write
    offsets = await env.call(
        ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id="tx", producer_id=4000, producer_epoch=0,
        group_id="g",
    )  # fmt: skip
    assert offsets["error_code"] == 0
    assert await env.end(4000, 0, commit=True) == 0
    await settle()
    assert env.markers.calls == [
        (4000, 0, 9, True, {("a", 0), ("a", 1), ("b", 2), ("__consumer_offsets", 11)})
    ]
    assert env.state() == S.COMPLETE_COMMIT
    assert await env.end(4000, 0, commit=True) == 0  # a retry of a completed commit
    assert await env.end(4000, 0, commit=False) == E.INVALID_TXN_STATE
    # the next transaction, aborted
    assert await env.add(4000, 0, {"c": [0]}) == {("c", 0): 0}
    assert await env.end(4000, 0, commit=False) == 0
    await settle()
    assert env.markers.calls[-1] == (4000, 0, 9, False, {("c", 0)})
    states = [rec.state for _, rec in env.written() if rec is not None]
    assert states == [
        S.EMPTY, S.ONGOING, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT,
        S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT,
    ]  # fmt: skip
    # replaying what was written gives the same state
    replay = TxnReplay()
    replay.transactions = {t: r for t, r in env.written() if r is not None}
    assert replay.transactions["tx"] == env.shard.entries["tx"].record


async def test_a_second_producer_fences_the_first() -> None:
    env = Env()
    assert (await env.init())["producer_epoch"] == 0
    assert await env.add(4000, 0, {"a": [0]}) == {("a", 0): 0}
    # the new instance: the open transaction is aborted with a bumped epoch, caller retries
    assert (await env.init())["error_code"] == E.CONCURRENT_TRANSACTIONS
    await settle()
    assert env.markers.calls == [(4000, 1, 9, False, {("a", 0)})]
    r = await env.init()
    assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (0, 4000, 2)
    # the zombie: fenced everywhere
    assert await env.add(4000, 0, {"a": [0]}) == {("a", 0): E.PRODUCER_FENCED}
    assert await env.add(4000, 0, {"a": [0]}, version=1) == {("a", 0): E.INVALID_PRODUCER_EPOCH}
    assert await env.end(4000, 0, commit=True) == E.PRODUCER_FENCED
    assert await env.end(4000, 0, commit=True, version=1) == E.INVALID_PRODUCER_EPOCH
    assert await env.end(4001, 2, commit=True) == E.INVALID_PRODUCER_ID_MAPPING
    # KIP-360: the zombie may not re-initialize with its old epoch
    assert (await env.init(pid=4000, epoch=0))["error_code"] == E.PRODUCER_FENCED
    assert (await env.init(pid=4000, epoch=0, version=3))["error_code"] == E.INVALID_PRODUCER_EPOCH


async def test_kip360_recovery_and_retried_init() -> None:
    env = Env()
    await env.init()
    r = await env.init(pid=4000, epoch=0)  # the producer bumps its own epoch
    assert (r["error_code"], r["producer_epoch"]) == (0, 1)
    r = await env.init(pid=4000, epoch=0)  # that answer was lost: the same answer again
    assert (r["error_code"], r["producer_epoch"]) == (0, 1)
    assert len(env.store.appends) == 2


async def test_timeout_aborts_with_a_fence_and_validation() -> None:
    env = Env()
    assert (await env.init(txn_timeout=60001))["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert (await env.init(txn_timeout=0))["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert (await env.init(txn=""))["error_code"] == E.INVALID_REQUEST
    await env.init(txn_timeout=1000)
    await env.add(4000, 0, {"a": [0]})
    env.clock.now += 1000
    assert env.shard.abort_timed_out() == 0  # not past its timeout yet
    env.clock.now += 1
    assert env.shard.abort_timed_out() == 1
    await settle()
    assert env.markers.calls == [(4000, 1, 9, False, {("a", 0)})]
    assert env.state() == S.COMPLETE_ABORT
    assert await env.end(4000, 0, commit=True) == E.PRODUCER_FENCED
    # the timed-out producer recovers with KIP-360 (its last epoch): bumped again
    r = await env.init(pid=4000, epoch=0)
    assert (r["error_code"], r["producer_epoch"]) == (0, 2)


async def test_concurrent_requests_while_markers_are_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Requests of the id's producer wait (bounded) for the markers, then CONCURRENT_..."""
    monkeypatch.setattr(transactions, "SETTLE_WAIT_S", 0.05)
    env = Env()
    await env.init()
    await env.add(4000, 0, {"a": [0]})
    env.markers.gate = asyncio.Event()
    assert await env.end(4000, 0, commit=True) == 0  # answered once PrepareCommit is written
    await settle()
    assert env.state() == S.PREPARE_COMMIT
    assert await env.add(4000, 0, {"a": [1]}) == {("a", 1): E.CONCURRENT_TRANSACTIONS}
    assert await env.end(4000, 0, commit=True) == E.CONCURRENT_TRANSACTIONS
    assert await env.end(4000, 0, commit=False) == E.INVALID_TXN_STATE
    assert (await env.init())["error_code"] == E.CONCURRENT_TRANSACTIONS
    env.markers.gate.set()
    await settle()
    assert env.state() == S.COMPLETE_COMMIT
    assert await env.end(4000, 0, commit=False) == E.INVALID_TXN_STATE
    assert await env.end(4000, 1, commit=False) == E.PRODUCER_FENCED


async def test_next_transaction_waits_for_the_markers_instead_of_a_retry() -> None:
    """The producer's next AddPartitionsToTxn, arriving while the previous transaction's
    markers are written, is held and answered NONE once CompleteCommit is written; a fenced
    producer and an EndTxn are not held."""
    env = Env()
    await env.init()
    await env.add(4000, 0, {"a": [0]})
    env.markers.gate = asyncio.Event()
    assert await env.end(4000, 0, commit=True) == 0
    await settle()
    held = asyncio.ensure_future(env.add(4000, 0, {"a": [1]}))
    await settle()
    assert not held.done()
    assert await env.add(4000, 1, {"a": [1]}) == {("a", 1): E.PRODUCER_FENCED}  # not held
    # a retried EndTxn is not held into the next transaction
    assert await env.end(4000, 0, commit=True) == E.CONCURRENT_TRANSACTIONS
    env.markers.gate.set()
    assert await held == {("a", 1): 0}
    assert env.state() == S.ONGOING
    assert env.shard.entries["tx"].record.partitions == {("a", 1)}
    assert [r.state for _, r in env.written() if r is not None][-3:] == [
        S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.ONGOING
    ]  # fmt: skip


async def test_a_loaded_prepared_transaction_is_completed() -> None:
    prepared = TxnRecord(77, 4, 1000, S.PREPARE_ABORT, frozenset({("t", 1)}), 5, 5)
    env = Env({"old": prepared})
    await settle()
    assert env.markers.calls == [(77, 4, 9, False, {("t", 1)})]
    assert env.state("old") == S.COMPLETE_ABORT
    assert env.written() == [
        ("old", TxnRecord(77, 4, 1000, S.COMPLETE_ABORT, frozenset(), env.clock.now, 5))
    ]


async def test_failed_writes_are_answered_and_not_applied() -> None:
    env = Env()
    await env.init()
    env.store.fail = KafkaError(E.NOT_ENOUGH_REPLICAS, "x")
    assert await env.add(4000, 0, {"a": [0]}) == {("a", 0): E.COORDINATOR_NOT_AVAILABLE}
    assert env.state() == S.EMPTY
    env.store.fail = KafkaError(E.NOT_LEADER_OR_FOLLOWER, "x")
    assert (await env.init())["error_code"] == E.NOT_COORDINATOR
    env.store.fail = None
    env.shard.resign()
    assert (await env.init())["error_code"] == E.NOT_COORDINATOR
    assert await env.end(4000, 0, commit=True) == E.NOT_COORDINATOR


async def test_expired_ids_are_tombstoned() -> None:
    env = Env()
    await env.init(txn="idle")
    await env.init(txn="busy")
    await env.add(4001, 0, {"a": [0]}, txn="busy")
    env.clock.now += CONFIG.id_expiration_ms + 1
    assert await env.shard.remove_expired() == 1
    assert env.written()[-1] == ("idle", None)
    assert set(env.shard.entries) == {"busy"}


async def test_describe_and_list_transactions() -> None:
    env = Env()
    await env.init(txn="a")
    await env.init(txn="b")
    await env.add(4001, 0, {"t": [1, 0], "u": [2]}, txn="b")
    env.clock.now += 5000
    r = await env.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=["b", "a", "nope"])
    b, a, nope = r["transaction_states"]
    assert (b["transaction_state"], b["producer_id"], b["producer_epoch"]) == ("Ongoing", 4001, 0)
    assert b["topics"] == [{"topic": "t", "partitions": [0, 1]}, {"topic": "u", "partitions": [2]}]
    assert b["transaction_start_time"] == env.clock.now - 5000 and b["transaction_timeout"] == 1000
    assert (a["error_code"], a["transaction_state"], a["topics"]) == (0, "Empty", [])
    assert nope["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND

    async def listed(**filters: Any) -> tuple[list[str], list[str]]:
        body = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1} | filters
        r = await env.call(ApiKey.LIST_TRANSACTIONS, 1, **body)
        ids = sorted(t["transactional_id"] for t in r["transaction_states"])
        return ids, r["unknown_state_filters"]

    assert await listed() == (["a", "b"], [])
    assert await listed(state_filters=["Ongoing", "Bogus"]) == (["b"], ["Bogus"])
    assert await listed(producer_id_filters=[4000]) == (["a"], [])
    assert await listed(duration_filter=4000) == (["b"], [])  # open for 5 s
    assert await listed(duration_filter=6000) == ([], [])


@pytest.mark.parametrize("api_key", sorted(api.SUPPORTED_VERSIONS))
async def test_not_coordinator_in_every_shape(api_key: int) -> None:
    low, high = api.SUPPORTED_VERSIONS[api_key]
    for version in range(low, high + 1):
        body = default_dict(message_spec(api_key, version, "request"))
        for field in ("transactional_id", "v3_and_below_transactional_id"):
            if field in body:
                body[field] = "tx"
        if "v3_and_below_topics" in body:
            body["v3_and_below_topics"] = [{"name": "a", "partitions": [0]}]
        if "transactional_ids" in body:
            body["transactional_ids"] = ["tx"]
        if "transactions" in body:  # AddPartitionsToTxn v4: verify-only (KIP-890)
            body["transactions"] = [{"transactional_id": "tx", "producer_id": 1, "verify_only": True,
                                     "topics": [{"name": "a", "partitions": [0]}]}]  # fmt: skip
        if api_key == ApiKey.LIST_TRANSACTIONS:
            continue  # asks the loaded shards only: no shard, nothing to list
        resp = await api.handle(Lookup(E.NOT_COORDINATOR), lambda g: 0, api_key, version, body)
        if api_key == ApiKey.ADD_PARTITIONS_TO_TXN and version >= 4:
            codes = [p["partition_error_code"] for r in resp["results_by_transaction"]
                     for t in r["topic_results"] for p in t["results_by_partition"]]  # fmt: skip
        elif api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
            codes = [p["partition_error_code"] for t in resp["results_by_topic_v3_and_below"]
                     for p in t["results_by_partition"]]  # fmt: skip
        elif api_key == ApiKey.DESCRIBE_TRANSACTIONS:
            codes = [t["error_code"] for t in resp["transaction_states"]]
        else:
            codes = [resp["error_code"]]
        assert codes == [E.NOT_COORDINATOR]


async def test_kip890_verify_only_answers_without_writing() -> None:
    """AddPartitionsToTxn v4 verify-only (what the gateway asks before a transaction's first
    append to a partition): NONE for a partition of the Ongoing transaction, INVALID_TXN_STATE
    for any other or once the transaction ended, CONCURRENT_TRANSACTIONS while its markers are
    written, the producer checks of AddPartitionsToTxn; nothing is ever written."""
    env = Env()
    await env.init()

    async def verify(pid: int, epoch: int, parts: list[int]) -> dict[tuple[str, int], int]:
        txn = {"transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch,
               "verify_only": True, "topics": [{"name": "a", "partitions": parts}]}  # fmt: skip
        resp = await env.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, transactions=[txn])
        assert [r["transactional_id"] for r in resp["results_by_transaction"]] == ["tx"]
        return {
            (t["name"], p["partition_index"]): p["partition_error_code"]
            for r in resp["results_by_transaction"]
            for t in r["topic_results"]
            for p in t["results_by_partition"]
        }

    assert await verify(4000, 0, [0]) == {("a", 0): E.INVALID_TXN_STATE}  # no transaction
    await env.add(4000, 0, {"a": [0]})
    writes = len(env.store.appends)
    assert await verify(4000, 0, [0, 1]) == {("a", 0): 0, ("a", 1): E.INVALID_TXN_STATE}
    assert await verify(4000, 1, [0]) == {("a", 0): E.PRODUCER_FENCED}
    assert await verify(4001, 0, [0]) == {("a", 0): E.INVALID_PRODUCER_ID_MAPPING}
    env.markers.gate = asyncio.Event()
    assert await env.end(4000, 0, commit=True) == 0
    await settle()
    assert await verify(4000, 0, [0]) == {("a", 0): E.CONCURRENT_TRANSACTIONS}
    env.markers.gate.set()
    await settle()
    assert await verify(4000, 0, [0]) == {("a", 0): E.INVALID_TXN_STATE}  # a late batch
    assert len(env.store.appends) == writes + 2  # PrepareCommit, CompleteCommit: none by verify
