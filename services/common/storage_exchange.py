"""Append and Fetch to one storage node over its ``Storage.Exchange`` stream.

One long-lived stream per channel carries every Append and Fetch, each with an id; the storage
node runs them concurrently and answers in completion order. The calls that are queued when the
writer runs travel in one stream message (up to ``MAX_MESSAGE_BYTES``, the first always goes),
so under load many calls share the gRPC runtime's per-message cost, and one call costs about
half of a unary call (docs/decisions.md, D9).

A call behaves as the unary call did: it raises ``grpc.aio.AioRpcError`` with
DEADLINE_EXCEEDED when its timeout passes, with the node's status when the node failed it, and
with the stream's status (UNAVAILABLE, CANCELLED, ...) when the stream breaks; a caller that
gives up (timeout or task cancellation) sends a cancel, which stops the call on the node. A
broken stream is replaced by a new one at the next call.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from typing import Any

import grpc

from services.common.protowire import Buffer
from services.common.rpc.kafkapy.v1 import storage_pb2
from services.common.storage_wire import (
    EXCHANGE_APPEND,
    EXCHANGE_CANCEL,
    EXCHANGE_ERROR,
    EXCHANGE_FETCH,
    CallError,
    FetchResponse,
    exchange_entry_parts,
    parse_exchange_responses,
)

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
_STATUS = {s.value[0]: s for s in grpc.StatusCode}


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def _as_rpc_error(exc: BaseException) -> grpc.aio.AioRpcError:
    """The error every call of a failed stream gets. The stream's own status is a transport
    status (the nodes' answers to calls travel inside the stream), so UNKNOWN and INTERNAL -
    what gRPC sometimes says of a peer that died - become UNAVAILABLE like the rest."""
    if isinstance(exc, grpc.aio.AioRpcError):
        code = exc.code()
        if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
            return _rpc_error(
                grpc.StatusCode.UNAVAILABLE, f"exchange stream broke: {code.name} {exc.details()}"
            )
        return exc
    if isinstance(exc, asyncio.CancelledError):
        return _rpc_error(grpc.StatusCode.CANCELLED, "exchange stream closed")
    return _rpc_error(grpc.StatusCode.UNAVAILABLE, f"exchange stream failed: {exc!r}")


class _Stream:
    """One Exchange call: the calls waiting for answers, the entries waiting to be written."""

    def __init__(self, method: Any) -> None:
        self.call = method()
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.queue: deque[list[Buffer]] = deque()
        self.wake = asyncio.Event()
        self.alive = True
        loop = asyncio.get_running_loop()
        self._writer = loop.create_task(self._write())
        self._reader = loop.create_task(self._read())

    def send(self, entry: list[Buffer]) -> None:
        self.queue.append(entry)
        self.wake.set()

    async def _write(self) -> None:
        try:
            while True:
                if not self.queue:
                    self.wake.clear()
                    await self.wake.wait()
                    continue
                message: list[Buffer] = []
                size = 0
                while self.queue and (not message or size < MAX_MESSAGE_BYTES):
                    entry = self.queue.popleft()
                    message += entry
                    size += sum(map(len, entry))
                await self.call.write(message)
        except BaseException as exc:  # noqa: BLE001 - any failure ends this stream
            self.fail(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def _read(self) -> None:
        try:
            while True:
                message = await self.call.read()
                if message is grpc.aio.EOF:
                    status = await self.call.code()
                    details = await self.call.details()
                    self.fail(
                        _rpc_error(
                            grpc.StatusCode.UNAVAILABLE if status == grpc.StatusCode.OK else status,
                            details or "exchange stream ended",
                        )
                    )  # (fail() turns UNKNOWN and INTERNAL into UNAVAILABLE)
                    return
                for call_id, kind, result in message:
                    future = self.pending.pop(call_id, None)
                    if future is None or future.done():
                        continue  # given up on already
                    if kind == EXCHANGE_ERROR:
                        assert isinstance(result, CallError)
                        code = _STATUS.get(result.status_code, grpc.StatusCode.UNKNOWN)
                        future.set_exception(_rpc_error(code, result.details))
                    else:
                        future.set_result(result)
        except BaseException as exc:  # noqa: BLE001 - any failure ends this stream
            self.fail(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    def fail(self, exc: BaseException) -> None:
        """End the stream: every pending call raises the stream's error."""
        if not self.alive:
            return
        self.alive = False
        error = _as_rpc_error(exc)
        pending, self.pending = self.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        self.queue.clear()
        self.call.cancel()
        for task in (self._writer, self._reader):
            if task is not asyncio.current_task():
                task.cancel()


class StorageExchange:
    """Append and Fetch of one channel, multiplexed on its Exchange stream."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._method = channel.stream_stream(
            "/kafkapy.v1.Storage/Exchange",
            request_serializer=b"".join,
            response_deserializer=parse_exchange_responses,
            _registered_method=True,
        )
        self._stream: _Stream | None = None
        self._next_id = 0

    def append(
        self,
        request: bytes | list[Buffer] | storage_pb2.AppendRequest,
        timeout: float | None = None,
    ) -> asyncio.Future[storage_pb2.AppendResponse]:
        """Storage.Append; ``request`` serialized (storage_wire.append_request[_parts]). The
        call is queued before this returns, so calls reach the node in the order they were
        made; the future gives the answer."""
        if isinstance(request, storage_pb2.AppendRequest):
            request = request.SerializeToString()
        parts: list[Buffer] = [request] if isinstance(request, bytes) else request
        return self._call(EXCHANGE_APPEND, parts, timeout)

    def fetch(
        self, request: storage_pb2.FetchRequest, timeout: float | None = None
    ) -> asyncio.Future[FetchResponse]:
        """Storage.Fetch (queued before this returns); the records of the answer are views of
        the received message."""
        return self._call(EXCHANGE_FETCH, [request.SerializeToString()], timeout)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.fail(_rpc_error(grpc.StatusCode.CANCELLED, "exchange closed"))
            self._stream = None

    def _call(self, kind: int, parts: list[Buffer], timeout: float | None) -> asyncio.Future[Any]:
        """Queue the call; its future is the answer. Cancelling the future, or its timeout
        passing (DEADLINE_EXCEEDED), sends a cancel for the call."""
        stream = self._stream
        if stream is None or not stream.alive:
            stream = self._stream = _Stream(self._method)
        self._next_id += 1
        call_id = self._next_id
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        stream.pending[call_id] = future
        stream.send(exchange_entry_parts(call_id, kind, parts))
        timer = loop.call_later(timeout, _expire, future) if timeout is not None else None
        future.add_done_callback(functools.partial(_settled, stream, call_id, timer))
        return future


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(_rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))


def _settled(
    stream: _Stream, call_id: int, timer: asyncio.TimerHandle | None, future: asyncio.Future[Any]
) -> None:
    """A call's future is done: answered (the reader took it from ``pending``), or given up on
    (timeout, cancellation), in which case the node is told to stop it."""
    if timer is not None:
        timer.cancel()
    if stream.pending.pop(call_id, None) is not None and stream.alive:
        stream.send(exchange_entry_parts(call_id, EXCHANGE_CANCEL, []))
