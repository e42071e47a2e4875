"""Fetch handler: sessions, per-node calls, the two waiting phases, cancellation, max_bytes."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import grpc
import pytest

from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import storage_pb2 as spb
from services.gateway.fetch_park import FetchPark
from services.gateway.handlers import fetch

from .fakes import FakeStorage, add_brokers, add_topic, context, services


def _cache() -> MetadataCache:
    cache = MetadataCache()
    add_brokers(cache, 11, 12)
    add_topic(cache, "a", {0: [11], 1: [12], 2: [11]})
    add_topic(cache, "off", {0: [13]})  # storage leader not registered
    return cache


def _req(
    *parts: tuple[str, int],
    min_bytes: int = 1,
    max_wait: int = 500,
    max_bytes: int = 1 << 20,
    epoch: int = -1,
    session: int = 0,
    isolation: int = 0,
) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, index in parts:
        topics.setdefault(name, []).append(
            {
                "partition": index,
                "current_leader_epoch": 3,
                "fetch_offset": 5,
                "partition_max_bytes": 1000,
            }
        )
    return {
        "replica_id": -1,
        "max_wait": max_wait,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation,
        "session_id": session,
        "session_epoch": epoch,
        "topics": [{"topic": n, "partitions": p} for n, p in topics.items()],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def _parts(resp: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {
        (t["topic"], p["partition_index"]): p for t in resp["responses"] for p in t["partitions"]
    }


def _answer(
    request: Any,
    records: bytes = b"",
    hw: int = 50,
    code: int = 0,
    aborted: list[tuple[int, int]] | None = None,
) -> Any:
    return spb.FetchResponse(
        partitions=[
            spb.PartitionFetchResult(
                topic=p.topic,
                partition=p.partition,
                error_code=code,
                high_watermark=hw,
                last_stable_offset=hw,
                log_start_offset=1,
                records=records,
                aborted_transactions=[
                    spb.AbortedTransaction(producer_id=a, first_offset=b) for a, b in aborted or []
                ],
            )
            for p in request.partitions
        ]
    )


async def test_incremental_session_is_unknown() -> None:
    svc = services(_cache())
    resp = await fetch.handle(context(svc, ApiKey.FETCH, 12), _req(("a", 0), session=77, epoch=3))
    assert resp["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert resp["responses"] == [] and resp["session_id"] == 0


async def test_one_call_per_node_and_fields_passed() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]

    async def data(request: Any) -> Any:
        return _answer(request, records=b"R" * 10)

    storage.node(11).fetch_handler = data
    storage.node(12).fetch_handler = data
    resp = await fetch.handle(
        context(svc, ApiKey.FETCH, 12),
        _req(("a", 0), ("a", 1), ("a", 2), ("nope", 0), ("off", 0), min_bytes=100),
    )
    parts = _parts(resp)
    assert parts[("nope", 0)]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert parts[("off", 0)]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert parts[("a", 0)]["records"] == b"R" * 10 and parts[("a", 0)]["high_watermark"] == 50
    assert parts[("a", 0)]["aborted_transactions"] is None
    assert resp["session_id"] == 0 and resp["error_code"] == 0
    ((name, r11),) = storage.nodes[11].calls
    assert [(p.topic, p.partition) for p in r11.partitions] == [("a", 0), ("a", 2)]
    p0 = r11.partitions[0]
    assert (p0.fetch_offset, p0.partition_max_bytes, p0.current_leader_epoch) == (5, 1000, 3)
    # a partition error elsewhere in the request answers at once (max_wait 0 to storage)
    assert r11.max_wait_ms == 0 and r11.min_bytes == 50  # min_bytes split over two nodes


async def test_long_poll_answers_when_combined_min_bytes_reached() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]
    cancelled = asyncio.Event()

    async def data_soon(request: Any) -> Any:
        if request.max_wait_ms == 0:  # phase 1: nothing yet
            return _answer(request)
        await asyncio.sleep(0.05)
        return _answer(request, records=b"x" * 300)

    async def long_poll(request: Any) -> Any:
        if request.max_wait_ms == 0:
            return _answer(request, hw=42)
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return _answer(request)

    storage.node(11).fetch_handler = data_soon
    storage.node(12).fetch_handler = long_poll
    loop = asyncio.get_running_loop()
    start = loop.time()
    resp = await fetch.handle(
        context(svc, ApiKey.FETCH, 12), _req(("a", 0), ("a", 1), min_bytes=200, max_wait=5000)
    )
    assert loop.time() - start < 1.0
    await asyncio.wait_for(cancelled.wait(), 1.0)
    parts = _parts(resp)
    assert parts[("a", 0)]["records"] == b"x" * 300
    # the cancelled node's partition keeps its first (immediate) answer
    assert parts[("a", 1)]["error_code"] == 0 and parts[("a", 1)]["records"] == b""
    assert parts[("a", 1)]["high_watermark"] == 42
    waits = [(r.max_wait_ms, r.min_bytes) for _, r in storage.nodes[12].calls]
    assert waits[0] == (0, 100) and waits[1][0] > 4000 and waits[1][1] == 100


async def test_immediate_reads_of_every_node_are_kept() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]

    async def quick(request: Any) -> Any:
        return _answer(request, records=b"q" * 300)

    async def slower(request: Any) -> Any:
        await asyncio.sleep(0.1)  # still reading when min_bytes is already met
        return _answer(request, records=b"s" * 50)

    storage.node(11).fetch_handler = quick
    storage.node(12).fetch_handler = slower
    resp = await fetch.handle(
        context(svc, ApiKey.FETCH, 12), _req(("a", 0), ("a", 1), min_bytes=1, max_wait=5000)
    )
    parts = _parts(resp)
    assert parts[("a", 0)]["records"] == b"q" * 300
    assert parts[("a", 1)]["records"] == b"s" * 50
    assert [len(n.calls) for n in storage.nodes.values()] == [1, 1]


async def test_caught_up_consumer_goes_straight_to_the_long_poll() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]
    for index in (0, 1):  # the request's fetch offset (5) is the last known high watermark
        svc.offsets.update("a", index, high_watermark=5, last_stable_offset=5)

    async def new_data(request: Any) -> Any:
        await asyncio.sleep(0.05)
        return _answer(request, records=b"n" * 10, hw=6)

    async def long_poll(request: Any) -> Any:
        await asyncio.sleep(5)

    storage.node(11).fetch_handler = new_data
    storage.node(12).fetch_handler = long_poll
    resp = await asyncio.wait_for(
        fetch.handle(context(svc, ApiKey.FETCH, 12), _req(("a", 0), ("a", 1), max_wait=5000)), 1.0
    )
    assert _parts(resp)[("a", 0)]["records"] == b"n" * 10
    calls = [(n, r.max_wait_ms) for n, node in storage.nodes.items() for _, r in node.calls]
    assert sorted(calls) == [(11, 5000), (12, 5000)]
    # one partition behind its known high watermark: the immediate round comes first again
    svc.offsets.update("a", 1, high_watermark=9)
    storage.node(12).calls.clear()
    storage.node(12).fetch_handler = new_data
    await fetch.handle(context(svc, ApiKey.FETCH, 12), _req(("a", 1), max_wait=100))
    assert [r.max_wait_ms for _, r in storage.nodes[12].calls][0] == 0


async def test_slow_node_is_cut_at_max_wait_once_min_bytes_are_in() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]
    svc.offsets.update("a", 1, high_watermark=42, log_start_offset=7)

    async def quick(request: Any) -> Any:
        return _answer(request, records=b"q" * 300)

    async def hung(request: Any) -> Any:
        await asyncio.sleep(5)

    storage.node(11).fetch_handler = quick
    storage.node(12).fetch_handler = hung
    loop = asyncio.get_running_loop()
    start = loop.time()
    resp = await fetch.handle(
        context(svc, ApiKey.FETCH, 12), _req(("a", 0), ("a", 1), min_bytes=1, max_wait=200)
    )
    assert 0.15 < loop.time() - start < 1.0
    parts = _parts(resp)
    assert parts[("a", 0)]["records"] == b"q" * 300
    # no answer from the node: no records and the last known offsets
    assert parts[("a", 1)]["error_code"] == 0 and parts[("a", 1)]["records"] == b""
    assert parts[("a", 1)]["high_watermark"] == 42 and parts[("a", 1)]["log_start_offset"] == 7


async def test_waits_for_all_nodes_below_min_bytes() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]

    def after(delay: float, size: int) -> Any:
        async def answer(request: Any) -> Any:
            await asyncio.sleep(delay)
            return _answer(request, records=b"y" * size, hw=60)

        return answer

    storage.node(11).fetch_handler = after(0.0, 10)
    storage.node(12).fetch_handler = after(0.1, 0)
    resp = await fetch.handle(
        context(svc, ApiKey.FETCH, 12), _req(("a", 0), ("a", 1), min_bytes=1000, max_wait=100)
    )
    parts = _parts(resp)
    assert parts[("a", 0)]["records"] == b"y" * 10
    assert parts[("a", 1)]["high_watermark"] == 60  # the slow node was waited for
    assert svc.offsets.get("a", 1)[0] == 60


async def test_node_error_answers_immediately() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]

    async def failing(request: Any) -> Any:
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "down"
        )

    async def long_poll(request: Any) -> Any:
        await asyncio.sleep(5)

    storage.node(11).fetch_handler = failing
    storage.node(12).fetch_handler = long_poll
    resp = await asyncio.wait_for(
        fetch.handle(context(svc, ApiKey.FETCH, 12), _req(("a", 0), ("a", 1), max_wait=5000)), 1.0
    )
    parts = _parts(resp)
    assert parts[("a", 0)]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert parts[("a", 1)]["error_code"] == 0


@pytest.mark.parametrize("status", [grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED])
async def test_a_storage_call_past_its_deadline_is_not_a_timeout_error(
    status: grpc.StatusCode,
) -> None:
    """REQUEST_TIMED_OUT is not a Fetch partition error in Kafka: the Java consumer throws
    IllegalStateException on it. A node that did not answer is looked up again instead."""
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]

    async def late(request: Any) -> Any:
        raise grpc.aio.AioRpcError(status, grpc.aio.Metadata(), grpc.aio.Metadata(), "late")

    storage.node(11).fetch_handler = late
    resp = await fetch.handle(context(svc, ApiKey.FETCH, 12), _req(("a", 0), max_wait=100))
    assert _parts(resp)[("a", 0)]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_max_bytes_keeps_first_and_drops_overflow() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]

    async def data(request: Any) -> Any:
        return _answer(request, records=b"z" * 100, aborted=[(9, 3)])

    storage.node(11).fetch_handler = data
    resp = await fetch.handle(
        context(svc, ApiKey.FETCH, 12), _req(("a", 0), ("a", 2), max_bytes=150, isolation=1)
    )
    parts = _parts(resp)
    assert parts[("a", 0)]["records"] == b"z" * 100
    assert parts[("a", 0)]["aborted_transactions"] == [{"producer_id": 9, "first_offset": 3}]
    assert parts[("a", 2)]["records"] == b""
    assert storage.nodes[11].calls[0][1].isolation_level == 1


async def test_nodes_share_max_bytes_by_their_partitions_with_data() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]

    async def data(request: Any) -> Any:
        return _answer(request, records=b"d" * 10)

    storage.node(11).fetch_handler = data
    storage.node(12).fetch_handler = data

    async def shares(*behind: int, max_bytes: int = 3000) -> dict[int, int]:
        """Each node's max_bytes when the partitions ``behind`` of a/0-2 have records."""
        for index in (0, 1, 2):
            hw = 9 if index in behind else 5  # the request's fetch offset is 5
            svc.offsets.update("a", index, high_watermark=hw, last_stable_offset=hw)
        for node in storage.nodes.values():
            node.calls.clear()
        req = _req(("a", 0), ("a", 1), ("a", 2), max_bytes=max_bytes, max_wait=0)
        await fetch.handle(context(svc, ApiKey.FETCH, 12), req)
        return {n: node.calls[0][1].max_bytes for n, node in storage.nodes.items()}

    # node 11 leads a/0 and a/2, node 12 a/1
    assert await shares(0, 1, 2) == {11: 2000, 12: 1000}
    assert await shares(0, 2) == {11: 3000, 12: 0}  # a caught-up node still returns a batch
    assert await shares(1) == {11: 0, 12: 3000}
    assert await shares() == {11: 1500, 12: 1500}  # nothing known to read: evenly
    assert await shares(0, 1, max_bytes=1001) == {11: 501, 12: 501}  # rounded up


async def test_a_node_share_is_capped_by_fetch_node_max_bytes() -> None:
    svc = services(_cache(), fetch_node_max_bytes=1200)
    storage: FakeStorage = svc.storage  # type: ignore[assignment]

    async def data(request: Any) -> Any:
        return _answer(request, records=b"d" * 10)

    storage.node(11).fetch_handler = data
    storage.node(12).fetch_handler = data
    req = _req(("a", 0), ("a", 1), ("a", 2), max_bytes=3000, max_wait=0)
    await fetch.handle(context(svc, ApiKey.FETCH, 12), req)
    # node 11 (a/0, a/2) would get 2000 of the 3000: cut to 1200; node 12's 1000 stays
    assert {n: node.calls[0][1].max_bytes for n, node in storage.nodes.items()} == {
        11: 1200,
        12: 1000,
    }


# ---- long polls parked between a connection's Fetch requests ---------------------------------
def _parked_context(svc: Any, park: FetchPark) -> Any:
    return dataclasses.replace(context(svc, ApiKey.FETCH, 12), fetch_park=park)


def _at(req: dict[str, Any], topic: str, index: int, offset: int) -> dict[str, Any]:
    for t in req["topics"]:
        for p in t["partitions"]:
            if (t["topic"], p["partition"]) == (topic, index):
                p["fetch_offset"] = offset
    return req


class _Poll:
    """A node whose long polls wait for ``release`` (or their max_wait), then answer data."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.cancelled = 0

    async def __call__(self, request: Any) -> Any:
        try:
            await asyncio.wait_for(self.release.wait(), request.max_wait_ms / 1000)
        except TimeoutError:
            return _answer(request, hw=5)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return _answer(request, records=b"late", hw=6)


def _caught_up(svc: Any) -> None:
    for index in (0, 1):
        svc.offsets.update("a", index, high_watermark=5, last_stable_offset=5)


async def _new_data(request: Any) -> Any:
    return _answer(request, records=b"n", hw=7)


def _parked_setup() -> tuple[Any, FakeStorage, _Poll, FetchPark]:
    """A caught-up consumer of a/0 (node 11, which has new data) and a/1 (node 12, which
    long-polls), and the connection's park."""
    svc = services(_cache())
    _caught_up(svc)
    storage: FakeStorage = svc.storage  # type: ignore[assignment]
    poll = _Poll()
    storage.node(11).fetch_handler = _new_data
    storage.node(12).fetch_handler = poll
    return svc, storage, poll, FetchPark()


async def test_next_fetch_takes_over_the_parked_long_poll() -> None:
    svc, storage, poll, park = _parked_setup()
    resp = await fetch.handle(_parked_context(svc, park), _req(("a", 0), ("a", 1), max_wait=5000))
    assert _parts(resp)[("a", 0)]["records"] == b"n"
    assert len(park) == 1 and poll.cancelled == 0  # node 12's long poll was kept, not cancelled
    # the consumer moved on in a/0 only (and is caught up there): node 11 is asked anew, node 12
    # the same thing as before, so its poll is taken over
    storage.node(11).fetch_handler = _Poll()
    second = asyncio.ensure_future(
        fetch.handle(
            _parked_context(svc, park), _at(_req(("a", 0), ("a", 1), max_wait=5000), "a", 0, 7)
        )
    )
    await asyncio.sleep(0.1)
    assert not second.done()
    poll.release.set()
    resp = await asyncio.wait_for(second, 2.0)
    assert _parts(resp)[("a", 1)]["records"] == b"late"
    assert len(storage.nodes[12].calls) == 1 and len(storage.nodes[11].calls) == 2
    assert poll.cancelled == 0
    assert len(park) == 1  # node 11's new long poll waits for the next Fetch


async def test_parked_poll_that_answered_meanwhile_answers_the_next_fetch_at_once() -> None:
    svc, storage, poll, park = _parked_setup()
    await fetch.handle(_parked_context(svc, park), _req(("a", 0), ("a", 1), max_wait=5000))
    poll.release.set()
    await asyncio.sleep(0.05)  # the parked poll answers before the next Fetch comes
    svc.offsets.update("a", 0, high_watermark=7)
    storage.node(11).fetch_handler = poll  # a/0 has nothing new now
    poll.release.clear()
    loop = asyncio.get_running_loop()
    start = loop.time()
    resp = await fetch.handle(
        _parked_context(svc, park), _at(_req(("a", 0), ("a", 1), max_wait=5000), "a", 0, 7)
    )
    assert loop.time() - start < 1.0
    assert _parts(resp)[("a", 1)]["records"] == b"late"
    assert len(storage.nodes[12].calls) == 1


async def test_parked_poll_for_something_else_is_cancelled() -> None:
    svc, storage, poll, park = _parked_setup()
    await fetch.handle(_parked_context(svc, park), _req(("a", 0), ("a", 1), max_wait=5000))
    # a/1 is now asked from another offset: the parked poll is cancelled, a new one is made
    resp = await fetch.handle(
        _parked_context(svc, park),
        _at(_at(_req(("a", 0), ("a", 1), max_wait=5000), "a", 1, 9), "a", 0, 7),
    )
    assert _parts(resp)[("a", 0)]["records"] == b"n"
    await asyncio.sleep(0.05)
    assert poll.cancelled == 1
    assert [r.partitions[0].fetch_offset for _, r in storage.nodes[12].calls] == [5, 9]
    park.clear()  # the connection closes: what is parked is cancelled
    await asyncio.sleep(0.05)
    assert poll.cancelled == 2 and len(park) == 0


async def test_parked_poll_that_ends_empty_is_followed_by_a_call_for_the_rest() -> None:
    svc, storage, poll, park = _parked_setup()
    await fetch.handle(_parked_context(svc, park), _req(("a", 1), ("a", 0), max_wait=300))
    storage.node(11).fetch_handler = poll  # nothing more on node 11 either
    svc.offsets.update("a", 0, high_watermark=7)
    # node 12's parked poll (300 ms) ends empty while this Fetch may wait 1.5 s: node 12 is
    # asked again for the rest of the wait, and the data arriving then is answered
    second = asyncio.ensure_future(
        fetch.handle(
            _parked_context(svc, park), _at(_req(("a", 1), ("a", 0), max_wait=1500), "a", 0, 7)
        )
    )
    await asyncio.sleep(0.6)
    poll.release.set()
    resp = await asyncio.wait_for(second, 2.0)
    assert _parts(resp)[("a", 1)]["records"] == b"late"
    waits = [r.max_wait_ms for _, r in storage.nodes[12].calls]
    assert len(waits) == 2 and waits[0] == 300 and 0 < waits[1] < 1500


async def test_parked_poll_is_taken_over_whatever_the_order_of_the_partitions() -> None:
    """librdkafka starts each Fetch's partition list one partition further on: a node asked
    the same partitions and offsets in another order is asked the same thing."""
    svc = services(_cache())
    for index in (0, 1, 2):
        svc.offsets.update("a", index, high_watermark=5, last_stable_offset=5)
    storage: FakeStorage = svc.storage  # type: ignore[assignment]
    poll = _Poll()
    storage.node(11).fetch_handler = poll  # a/0 and a/2: a long poll
    storage.node(12).fetch_handler = _new_data  # a/1
    park = FetchPark()
    req = _req(("a", 0), ("a", 1), ("a", 2), max_wait=5000)
    resp = await fetch.handle(_parked_context(svc, park), req)
    assert _parts(resp)[("a", 1)]["records"] == b"n" and len(park) == 1
    storage.node(12).fetch_handler = _Poll()
    second = asyncio.ensure_future(
        fetch.handle(
            _parked_context(svc, park),
            _at(_req(("a", 2), ("a", 1), ("a", 0), max_wait=5000), "a", 1, 7),
        )
    )
    await asyncio.sleep(0.1)
    poll.release.set()
    parts = _parts(await asyncio.wait_for(second, 2.0))
    assert parts[("a", 0)]["records"] == b"late" and parts[("a", 2)]["records"] == b"late"
    assert len(storage.nodes[11].calls) == 1 and poll.cancelled == 0  # taken over


async def test_immediate_reads_are_awaited_on_a_connection_too() -> None:
    """Every node's immediate read is awaited (none is parked): below min_bytes, and after."""
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]

    async def slower(request: Any) -> Any:
        await asyncio.sleep(0.1)
        return _answer(request, records=b"s" * 50)

    async def quick(request: Any) -> Any:
        return _answer(request, records=b"q" * 30)

    storage.node(11).fetch_handler = slower
    storage.node(12).fetch_handler = quick
    park = FetchPark()
    resp = await fetch.handle(
        _parked_context(svc, park), _req(("a", 0), ("a", 1), min_bytes=60, max_wait=5000)
    )
    parts = _parts(resp)
    assert parts[("a", 0)]["records"] == b"s" * 50 and parts[("a", 1)]["records"] == b"q" * 30
    assert len(park) == 0
