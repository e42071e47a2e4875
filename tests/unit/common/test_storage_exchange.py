"""Storage.Exchange over a real gRPC server on loopback: the client (storage_exchange.py) and the
server side (services/storage/exchange.py) with stand-in Append and Fetch handlers. Every test
runs twice: Append as a task per call, and Append run inline in the stream's reader (as the
storage node does), acks=-1 then finishing in a task."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.storage_exchange import StorageExchange
from services.storage.exchange import ExchangeStreams, serve_exchange
from services.storage.metrics import StorageMetrics
from services.storage.wire import APPEND, FETCH, FetchReply, FetchResult, parse_exchange_requests


class Node:
    """Stand-in storage node: Append echoes its partitions (base offset = order of arrival);
    Fetch waits ``max_wait_ms`` then answers one partition named after the wait."""

    def __init__(self, inline: bool = False) -> None:
        self.inline = inline
        self.messages = 0
        self.appends: list[int] = []
        self.cancelled: list[int] = []
        self.fail_appends = False
        self.server: grpc.aio.Server | None = None
        self.streams = ExchangeStreams()
        self.events: list[str] = []  # how each stream's handler ended
        self.fetching = 0
        self.metrics = StorageMetrics()

    def counted(self, what: str, direction: str) -> float:
        value = self.metrics.registry.get_sample_value(
            f"kafkapy_storage_exchange_{what}_total", {"direction": direction}
        )
        return value or 0.0

    def _read(self, data: bytes) -> Any:
        self.messages += 1
        return parse_exchange_requests(data)

    async def append(self, request: Any, context: Any) -> pb.AppendResponse:
        return self._append(request)

    def append_now(self, request: Any, context: Any) -> Any:
        """Inline: appended (in arrival order) now; acks=-1 answers after a wait, in a task."""
        answer = self._append(request)
        if request.acks != -1:
            return answer

        async def replicated() -> pb.AppendResponse:
            await asyncio.sleep(0.05)
            return answer

        return replicated()

    def _append(self, request: Any) -> pb.AppendResponse:
        if self.fail_appends:
            raise ValueError("disk on fire")
        partition = request.partitions[0].partition
        self.appends.append(partition)
        return pb.AppendResponse(
            partitions=[
                pb.PartitionAppendResult(
                    topic=request.partitions[0].topic,
                    partition=partition,
                    base_offset=len(self.appends) - 1,
                )
            ]
        )

    async def fetch(self, request: pb.FetchRequest, context: Any) -> FetchReply:
        self.fetching += 1
        try:
            await asyncio.sleep(request.max_wait_ms / 1000)
        except asyncio.CancelledError:
            self.cancelled.append(request.max_wait_ms)
            raise
        result = FetchResult(f"waited-{request.max_wait_ms}", 0)
        result.records = b"records"
        return FetchReply([result])

    async def exchange(self, request_iterator: Any, context: Any) -> None:
        try:
            await serve_exchange(
                {APPEND: self.append, FETCH: self.fetch},
                context,
                self.streams,
                self.metrics,
                inline={APPEND: self.append_now} if self.inline else None,
            )
        except asyncio.CancelledError:
            self.events.append("stream cancelled")
            raise
        self.events.append("stream ended")

    async def start(self, port: int = 0) -> int:
        handler = grpc.stream_stream_rpc_method_handler(
            self.exchange, request_deserializer=self._read, response_serializer=b"".join
        )
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("kafkapy.v1.Storage", {"Exchange": handler}),)
        )
        port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        await self.server.start()
        return port


@pytest.fixture(params=[False, True], ids=["task", "inline"])
async def node_and_client(
    request: Any,
) -> AsyncIterator[tuple[Node, StorageExchange, grpc.aio.Channel, int]]:
    node = Node(inline=request.param)
    port = await node.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    exchange = StorageExchange(channel)
    yield node, exchange, channel, port
    exchange.close()
    await channel.close()
    if node.server is not None:
        await node.server.stop(0)


def _append(partition: int, acks: int = 1) -> pb.AppendRequest:
    return pb.AppendRequest(
        acks=acks, partitions=[pb.PartitionAppend(topic="t", partition=partition, records=b"x")]
    )


async def _until(check: Any, within_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_answers_in_completion_order_reach_their_calls(node_and_client: Any) -> None:
    _, exchange, _, _ = node_and_client
    waits = [300, 10, 200, 0, 100]
    fetches = [exchange.fetch(pb.FetchRequest(max_wait_ms=w)) for w in waits]
    appends = [exchange.append(_append(p)) for p in range(5)]
    fetched = await asyncio.gather(*fetches)
    appended = await asyncio.gather(*appends)
    assert [f.partitions[0].topic for f in fetched] == [f"waited-{w}" for w in waits]
    assert all(bytes(f.partitions[0].records) == b"records" for f in fetched)
    assert [a.partitions[0].partition for a in appended] == list(range(5))


async def test_calls_made_together_share_messages_and_keep_their_order(
    node_and_client: Any,
) -> None:
    node, exchange, _, _ = node_and_client
    await exchange.append(_append(-1))  # the stream is open
    before = node.messages
    counted = {(w, d): node.counted(w, d) for w in ("messages", "calls") for d in ("in", "out")}
    answers = await asyncio.gather(*[exchange.append(_append(p)) for p in range(50)])
    assert node.appends[1:] == list(range(50))  # the order the calls were made in
    assert [a.partitions[0].base_offset for a in answers] == list(range(1, 51))
    assert node.messages - before < 50  # queued together, written together
    # the node's counters see the same: 50 calls each way in fewer messages
    grown = {k: node.counted(*k) - v for k, v in counted.items()}
    assert grown[("calls", "in")] == 50 and grown[("calls", "out")] == 50
    assert grown[("messages", "in")] == node.messages - before
    assert 1 <= grown[("messages", "out")] <= 50


async def test_appends_keep_their_order_whatever_their_acks(node_and_client: Any) -> None:
    """acks=-1 calls wait after their append; calls behind them are appended in order and
    answered at once (inline), or as their tasks finish."""
    node, exchange, _, _ = node_and_client
    await exchange.append(_append(-1))  # the stream is open
    calls = [exchange.append(_append(p, acks=-1 if p % 3 == 0 else 1)) for p in range(30)]
    answers = await asyncio.gather(*calls)
    assert node.appends[1:] == list(range(30))
    assert [a.partitions[0].base_offset for a in answers] == list(range(1, 31))


async def test_cancelled_call_is_stopped_on_the_node(node_and_client: Any) -> None:
    node, exchange, _, _ = node_and_client
    task = asyncio.ensure_future(exchange.fetch(pb.FetchRequest(max_wait_ms=60_000)))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until(lambda: node.cancelled == [60_000])
    answer = await exchange.fetch(pb.FetchRequest(max_wait_ms=1))  # the stream goes on
    assert answer.partitions[0].topic == "waited-1"


async def test_timeout_is_deadline_exceeded_and_stops_the_call(node_and_client: Any) -> None:
    node, exchange, _, _ = node_and_client
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await exchange.fetch(pb.FetchRequest(max_wait_ms=30_000), timeout=0.2)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await _until(lambda: node.cancelled == [30_000])


async def test_failed_call_is_an_rpc_error_and_others_go_on(node_and_client: Any) -> None:
    node, exchange, _, _ = node_and_client
    node.fail_appends = True
    slow = asyncio.ensure_future(exchange.fetch(pb.FetchRequest(max_wait_ms=100)))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await exchange.append(_append(0))
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    assert "disk on fire" in (info.value.details() or "")
    assert (await slow).partitions[0].topic == "waited-100"
    node.fail_appends = False
    assert (await exchange.append(_append(3))).partitions[0].partition == 3


async def test_broken_stream_fails_pending_calls_and_a_new_stream_follows(
    node_and_client: Any,
) -> None:
    node, exchange, _, port = node_and_client
    pending = asyncio.ensure_future(exchange.fetch(pb.FetchRequest(max_wait_ms=60_000)))
    await asyncio.sleep(0.2)
    assert node.server is not None
    await node.server.stop(0)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await asyncio.wait_for(pending, 10)
    assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    restarted = Node()
    assert await restarted.start(port) == port
    try:
        deadline = asyncio.get_running_loop().time() + 15
        while True:  # the channel reconnects with backoff; each failed call fails fast
            try:
                answer = await exchange.append(_append(7), timeout=2)
                break
            except grpc.aio.AioRpcError as exc:
                assert exc.code() in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.CANCELLED,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                )
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.2)
        assert answer.partitions[0].partition == 7 and restarted.appends == [7]
    finally:
        assert restarted.server is not None
        await restarted.server.stop(0)


@pytest.mark.parametrize("status", [grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL])
async def test_a_stream_ended_with_unknown_or_internal_fails_its_calls_as_unavailable(
    status: grpc.StatusCode,
) -> None:
    """gRPC sometimes reports a peer that died as UNKNOWN "Stream removed" (grpc/grpc#34076):
    for the calls on the stream that is a broken connection, retriable like UNAVAILABLE."""

    class DyingNode(Node):
        async def exchange(self, request_iterator: Any, context: Any) -> None:
            await context.read()
            await context.abort(status, "Stream removed")

    node = DyingNode()
    port = await node.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    exchange = StorageExchange(channel)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await exchange.append(_append(1), timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert status.name in (info.value.details() or "")
    finally:
        exchange.close()
        await channel.close()
        assert node.server is not None
        await node.server.stop(0)


async def test_a_stopping_node_ends_its_streams_instead_of_waiting_out_the_grace(
    node_and_client: Any,
) -> None:
    """What StorageNode.stop does: end the Exchange streams, then stop gRPC with its grace
    (``shutdown.grace.ms``). A follower's stream with a long poll in flight answers that poll and
    ends by itself (status OK), so the server's stop never reaches the grace, which would cancel
    the stream; a call made meanwhile fails retriably and never runs."""
    node, exchange, _, _ = node_and_client
    assert node.server is not None
    await exchange.append(_append(0))  # the stream is open
    polling = asyncio.ensure_future(exchange.fetch(pb.FetchRequest(max_wait_ms=300)))
    await _until(lambda: node.fetching == 1)
    assert len(node.streams) == 1

    node.streams.close()
    answer = await polling  # the running call is answered before the stream ends
    assert answer.partitions[0].topic == "waited-300"
    await _until(lambda: node.events == ["stream ended"])
    with pytest.raises(grpc.aio.AioRpcError) as info:  # on a new stream: ended at once
        await exchange.append(_append(1), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert node.appends == [0]

    await node.server.stop(120)  # a grace far beyond the test's timeout: never waited out
    node.events.append("server stopped")
    assert "stream cancelled" not in node.events
    assert node.events[-1] == "server stopped" and set(node.events[:-1]) == {"stream ended"}
    assert len(node.streams) == 0
