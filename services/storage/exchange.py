"""Storage.Exchange: Append and Fetch calls multiplexed on one long-lived stream.

Each call runs in its own task through the same code (and metrics) as the unary call. Answers
go out in completion order, matched by id; those ready together share one stream message (up
to ``MAX_MESSAGE_BYTES``, the first always goes). A cancel stops its call and answers nothing.
When the client half-closes, the running calls finish and are answered; when the stream
breaks (client gone, channel closed), every running call is cancelled, as gRPC does for unary
calls whose client went away. A call that raises is answered with a ``CallError`` (status
UNKNOWN), as a unary handler's exception would be.

A call kind with an inline handler (Append) is started in the reader, as its message arrives:
the handler returns the answer, written without a task per call, or a coroutine for the rest of
the call (acks=-1's wait for replication), which runs as the other calls do. Calls are started
in the order they arrive either way.

Streams live as long as their client, so a stopping node ends them itself (``ExchangeStreams``)
rather than have gRPC's stop wait out its whole grace for them: each stream stops reading, answers
the calls already running, and ends with status OK (its client fails anything still pending as
UNAVAILABLE and retries, as for a broken stream); a stream opened after that ends at once."""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

import grpc

from services.common.logging import get_logger
from services.common.protowire import Buffer
from services.common.storage_wire import exchange_entry_parts
from services.storage.metrics import StorageMetrics
from services.storage.wire import (
    CANCEL,
    ERROR,
    FETCH,
    ExchangeCall,
    call_error_parts,
    fetch_response_parts,
)

log = get_logger("storage.exchange")

MAX_MESSAGE_BYTES = 8 * 1024 * 1024

Handler = Callable[[Any, Any], Coroutine[Any, Any, Any]]
# run in the reader: the answer, or a coroutine that gives it
Inline = Callable[[Any, Any], Any]


def _status(code: grpc.StatusCode) -> int:
    return int(code.value[0])


class _Session:
    """One Exchange stream: running calls by id, answers waiting to be written."""

    def __init__(
        self, handlers: dict[int, Handler], context: Any, inline: dict[int, Inline] | None = None
    ) -> None:
        self._handlers = handlers
        self._inline = inline or {}
        self._context = context
        self._loop = asyncio.get_running_loop()
        self.running: dict[int, asyncio.Task[Any]] = {}
        self.ready: deque[list[Buffer]] = deque()
        self.wake = asyncio.Event()
        self.reading = True
        self.ending = False  # the node is stopping: read no more, finish what runs, end

    def start(self, calls: list[ExchangeCall]) -> None:
        for call_id, kind, body in calls:
            if kind == CANCEL:
                task = self.running.pop(call_id, None)
                if task is not None:
                    task.cancel()
                continue
            now = self._inline.get(kind)
            if now is not None:
                try:
                    rest = now(body, self._context)
                except Exception as exc:  # noqa: BLE001 - answered, as a task's failure is
                    self._failed(call_id, kind, exc)
                    continue
                if not asyncio.iscoroutine(rest):
                    self._answer(call_id, kind, _parts(kind, rest))
                    continue
            else:
                handler = self._handlers.get(kind)
                if handler is None:
                    self._answer(
                        call_id,
                        ERROR,
                        call_error_parts(
                            _status(grpc.StatusCode.UNIMPLEMENTED), "unknown Exchange call"
                        ),
                    )
                    continue
                rest = handler(body, self._context)
            task = self._loop.create_task(rest)
            self.running[call_id] = task
            task.add_done_callback(functools.partial(self._finished, call_id, kind))

    def _finished(self, call_id: int, kind: int, task: asyncio.Task[Any]) -> None:
        if self.running.get(call_id) is task:
            del self.running[call_id]
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._failed(call_id, kind, exc)
            return
        self._answer(call_id, kind, _parts(kind, task.result()))

    def _failed(self, call_id: int, kind: int, exc: BaseException) -> None:
        log.error("exchange_call_failed", kind=kind, error=repr(exc))
        self._answer(
            call_id,
            ERROR,
            call_error_parts(
                _status(grpc.StatusCode.UNKNOWN), f"Unexpected {type(exc).__name__}: {exc}"
            ),
        )

    def _answer(self, call_id: int, kind: int, parts: list[Buffer]) -> None:
        self.ready.append(exchange_entry_parts(call_id, kind, parts))
        self.wake.set()

    def next_message(self) -> list[Buffer]:
        """The answers ready now, up to MAX_MESSAGE_BYTES (at least one)."""
        out: list[Buffer] = []
        size = 0
        while self.ready and (not out or size < MAX_MESSAGE_BYTES):
            parts = self.ready.popleft()
            out += parts
            size += sum(map(len, parts))
        return out

    def cancel_all(self) -> None:
        for task in self.running.values():
            task.cancel()
        self.running.clear()

    def end(self) -> None:
        self.ending = True
        self.wake.set()


def _parts(kind: int, result: Any) -> list[Buffer]:
    return fetch_response_parts(result) if kind == FETCH else [result.SerializeToString()]


class ExchangeStreams:
    """The open Exchange streams of one server, so that a stopping node can end them."""

    def __init__(self) -> None:
        self._sessions: set[_Session] = set()
        self.closing = False

    def __len__(self) -> int:
        return len(self._sessions)

    def close(self) -> None:
        """End every open stream (see the module doc); streams opened from now on end at once."""
        self.closing = True
        for session in list(self._sessions):
            session.end()


async def serve_exchange(
    handlers: dict[int, Handler],
    context: Any,
    streams: ExchangeStreams | None = None,
    metrics: StorageMetrics | None = None,
    inline: dict[int, Inline] | None = None,
) -> None:
    """The Exchange handler body; ``handlers`` by call kind (wire.APPEND, wire.FETCH), and
    ``inline`` those run in the reader (module doc); ``metrics`` counts the stream messages and
    calls each way."""
    if streams is not None and streams.closing:
        return
    session = _Session(handlers, context, inline)
    if streams is not None:
        streams._sessions.add(session)
    # the counters' label children, bound once per stream
    counters = (
        None
        if metrics is None
        else [
            m.labels(way)
            for way in ("in", "out")
            for m in (metrics.exchange_messages, metrics.exchange_calls)
        ]
    )

    async def read() -> None:
        try:
            while True:
                calls = await context.read()
                if calls is grpc.aio.EOF:
                    return
                if counters is not None:
                    counters[0].inc()
                    counters[1].inc(len(calls))
                session.start(calls)
        finally:
            session.reading = False
            session.wake.set()

    reader = asyncio.get_running_loop().create_task(read())
    try:
        while True:
            if session.ready:
                answers = len(session.ready)
                message = session.next_message()
                if counters is not None:
                    counters[2].inc()
                    counters[3].inc(answers - len(session.ready))
                await context.write(message)
                continue
            if session.ending:
                reader.cancel()
                if not session.running:
                    break
            elif reader.done() and (
                not session.running or reader.cancelled() or reader.exception() is not None
            ):
                break
            session.wake.clear()
            await session.wake.wait()
        if not session.ending:
            reader.result()  # a read that failed ends the call with its error
    finally:
        reader.cancel()
        session.cancel_all()
        if streams is not None:
            streams._sessions.discard(session)
