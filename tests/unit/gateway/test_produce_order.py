"""Produce ordering per connection and partition (issue 12 §0), through the Produce handler.

A Kafka broker handles one connection's requests in order, so when a leader moves every batch
after the one that failed fails too, and the client resends them in order. These tests move
the leader (in the gateway's metadata) while batches are in flight or just failed, and check
that no later batch reaches another node before the failed one's retry.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey
from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import storage_pb2 as spb
from services.common.zk import layout
from services.gateway.handlers import produce
from services.gateway.produce_order import ProduceOrder, sequence_after

from .fakes import FakeStorage, add_brokers, add_topic, context, services

PID = 4000


def _batch(seq: int, epoch: int = 0, pid: int = PID) -> bytes:
    return build_batch(
        [Record(value=b"v%d" % seq)], producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


PLAIN = build_batch([Record(value=b"plain")])


def _cache() -> MetadataCache:
    cache = MetadataCache()
    add_brokers(cache, 11, 12)
    add_topic(cache, "t", {0: [11, 12], 1: [12, 11]})
    return cache


def _move_leader(cache: MetadataCache, partition: int, leader: int) -> None:
    cache.apply_partition_state(
        "t", partition, layout.PartitionStateZk(leader, 9, [11, 12], 1).to_json(), version=2
    )


def _req(batches: dict[int, bytes]) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": 1000,
        "topic_data": [
            {
                "name": "t",
                "partition_data": [
                    {"index": i, "records": memoryview(b)} for i, b in batches.items()
                ],
            }
        ],
    }


def _code(resp: Any, partition: int = 0) -> int:
    for p in resp["responses"][0]["partition_responses"]:
        if p["index"] == partition:
            return int(p["error_code"])
    raise AssertionError(f"no partition {partition}")


def _answer(request: Any, code: ErrorCode = ErrorCode.NONE) -> spb.AppendResponse:
    return spb.AppendResponse(
        partitions=[
            spb.PartitionAppendResult(
                topic=p.topic,
                partition=p.partition,
                error_code=int(code),
                base_offset=0 if code == ErrorCode.NONE else -1,
                log_start_offset=0,
            )
            for p in request.partitions
        ]
    )


class _Connection:
    """Requests sharing one ProduceOrder, as on one client connection."""

    def __init__(self, cache: MetadataCache) -> None:
        self.svc = services(cache)
        self.storage: FakeStorage = self.svc.storage  # type: ignore[assignment]
        self.order = ProduceOrder()

    def send(self, batches: dict[int, bytes]) -> asyncio.Task[Any]:
        ctx = context(self.svc, ApiKey.PRODUCE, 9)
        ctx.produce_order = self.order
        return asyncio.get_running_loop().create_task(produce.handle(ctx, _req(batches)))

    def calls(self, node: int) -> int:
        """Appends that reached ``node``."""
        return sum(1 for name, _ in self.storage.node(node).calls if name == "Append")


def test_sequence_after_wraps() -> None:
    assert sequence_after(5, 4) and not sequence_after(4, 5) and not sequence_after(4, 4)
    assert sequence_after(0, 2**31 - 1) and sequence_after(3, 2**31 - 2)
    assert not sequence_after(2**31 - 1, 0)


async def test_batches_in_flight_pin_the_partition_to_their_node() -> None:
    cache = _cache()
    conn = _Connection(cache)
    release = asyncio.Event()

    async def old_leader(request: Any) -> Any:
        await release.wait()
        return _answer(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    conn.storage.node(11).append_handler = old_leader
    first = conn.send({0: _batch(0)})
    await _settle()
    _move_leader(cache, 0, 12)  # the leader moves while seq 0 waits on node 11
    second = conn.send({0: _batch(1)})
    await _settle()
    # seq 1 follows seq 0 to node 11 instead of overtaking it on node 12
    assert conn.calls(11) == 2 and conn.calls(12) == 0
    release.set()
    assert _code(await first) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert _code(await second) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # the client's retries, in order: now they go to the new leader
    assert _code(await conn.send({0: _batch(0)})) == ErrorCode.NONE
    assert _code(await conn.send({0: _batch(1)})) == ErrorCode.NONE
    assert conn.calls(12) == 2


async def test_later_batches_fail_unsent_until_the_failed_one_is_retried() -> None:
    cache = _cache()
    conn = _Connection(cache)

    async def demoted(request: Any) -> Any:
        return _answer(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    conn.storage.node(11).append_handler = demoted
    assert _code(await conn.send({0: _batch(7)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    _move_leader(cache, 0, 12)
    # seq 8 and 9 were pipelined before the client saw seq 7 fail: never sent anywhere
    assert _code(await conn.send({0: _batch(8)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert _code(await conn.send({0: _batch(9)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert conn.calls(12) == 0
    # other partitions and other producers are not held up
    assert _code(await conn.send({1: _batch(3)}), 1) == ErrorCode.NONE
    assert _code(await conn.send({0: _batch(0, pid=PID + 1)})) == ErrorCode.NONE
    assert conn.calls(12) == 2
    # the retry of seq 7 goes through, and with it the ones after
    for seq in (7, 8, 9):
        assert _code(await conn.send({0: _batch(seq)})) == ErrorCode.NONE
    assert conn.calls(12) == 5


async def test_a_new_producer_epoch_lifts_the_fence() -> None:
    cache = _cache()
    conn = _Connection(cache)
    conn.storage.node(11).append_handler = lambda r: _async(
        _answer(r, ErrorCode.NOT_ENOUGH_REPLICAS)
    )
    assert _code(await conn.send({0: _batch(3)})) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert _code(await conn.send({0: _batch(4)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    conn.storage.node(11).append_handler = None
    assert _code(await conn.send({0: _batch(0, epoch=1)})) == ErrorCode.NONE
    assert _code(await conn.send({0: _batch(1, epoch=1)})) == ErrorCode.NONE


async def test_unavailable_node_and_leaderless_partition_fence_too() -> None:
    cache = _cache()
    conn = _Connection(cache)
    _move_leader(cache, 0, -1)
    assert _code(await conn.send({0: _batch(0)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    _move_leader(cache, 0, 13)  # elected, but not reachable (not registered)
    assert _code(await conn.send({0: _batch(1)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert _code(await conn.send({0: _batch(0)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    _move_leader(cache, 0, 12)
    assert _code(await conn.send({0: _batch(1)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert _code(await conn.send({0: _batch(0)})) == ErrorCode.NONE
    assert _code(await conn.send({0: _batch(1)})) == ErrorCode.NONE


async def test_plain_batches_are_pinned_but_never_fenced() -> None:
    cache = _cache()
    conn = _Connection(cache)
    conn.storage.node(11).append_handler = lambda r: _async(
        _answer(r, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    )
    assert _code(await conn.send({0: PLAIN})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    _move_leader(cache, 0, 12)
    assert _code(await conn.send({0: PLAIN})) == ErrorCode.NONE
    assert not conn.order  # nothing kept once every batch is answered


async def _async(value: Any) -> Any:
    return value


async def _settle() -> None:
    """Let the handler tasks and the fake node's calls run up to their waits."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_resend_turns_chain_in_the_order_they_were_taken() -> None:
    order = ProduceOrder()
    none_before, first = order.resend_turn()
    after_first, second = order.resend_turn()
    assert none_before is None and after_first is first
    first.set_result(None)
    second.set_result(None)
    assert order.resend_turn()[0] is None  # the line is empty again


def _producer_state(last_sequence: int, epoch: int = 0) -> Any:
    """A leader's DescribeProducers answer: PID at ``epoch`` with ``last_sequence`` stored."""

    async def answer(request: Any) -> Any:
        return spb.DescribeProducersResponse(
            partitions=[
                spb.DescribeProducersPartitionResult(
                    topic=q.topic,
                    partition=q.partition,
                    active_producers=[
                        spb.ActiveProducer(
                            producer_id=PID, producer_epoch=epoch, last_sequence=last_sequence
                        )
                    ],
                )
                for q in request.partitions
            ]
        )

    return answer


async def test_a_fence_lifts_once_the_leader_holds_the_failed_batch_resent_elsewhere() -> None:
    """The client resent the failed batch over its other connection to this gateway (a second
    broker id naming the same gateway) or through another gateway: this connection never sees
    the retry, and must not refuse the partition's later batches for good."""
    cache = _cache()
    conn, other = _Connection(cache), _Connection(cache)
    other.svc = conn.svc
    other.storage = conn.storage
    conn.storage.node(11).append_handler = lambda r: _async(
        _answer(r, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    )
    assert _code(await conn.send({0: _batch(7)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    _move_leader(cache, 0, 12)
    # the leader has not got seq 7 yet: the fence holds, however often it is asked
    conn.storage.node(12).producers_handler = _producer_state(6)
    for _ in range(3):
        assert _code(await conn.send({0: _batch(8)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        await _settle()
    asked = [c for c in conn.storage.node(12).calls if c[0] == "DescribeProducers"]
    assert asked and conn.calls(12) == 0
    # seq 7 is resent on the other connection and stored; the next look lifts the fence
    assert _code(await other.send({0: _batch(7)})) == ErrorCode.NONE
    conn.storage.node(12).producers_handler = _producer_state(7)
    assert _code(await conn.send({0: _batch(8)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    await _settle()
    assert _code(await conn.send({0: _batch(8)})) == ErrorCode.NONE
    assert _code(await conn.send({0: _batch(9)})) == ErrorCode.NONE
    assert not conn.order  # nothing kept once every batch is answered


async def test_a_fence_lifts_when_the_leader_knows_a_newer_epoch_and_not_on_errors() -> None:
    cache = _cache()
    conn = _Connection(cache)
    conn.storage.node(11).append_handler = lambda r: _async(
        _answer(r, ErrorCode.NOT_ENOUGH_REPLICAS)
    )
    assert _code(await conn.send({0: _batch(3)})) == ErrorCode.NOT_ENOUGH_REPLICAS

    async def unavailable(request: Any) -> Any:
        raise ConnectionError("storage node gone")

    conn.storage.node(11).producers_handler = unavailable
    assert _code(await conn.send({0: _batch(4)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    await _settle()
    assert _code(await conn.send({0: _batch(4)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    await _settle()
    conn.storage.node(11).producers_handler = _producer_state(0, epoch=1)
    assert _code(await conn.send({0: _batch(4)})) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    await _settle()
    conn.storage.node(11).append_handler = None
    assert _code(await conn.send({0: _batch(4)})) == ErrorCode.NONE
