"""The Kafka protocol listener: framing, dispatch, pipelining, response order.

Each connection reads ``int32 size`` + frame (framing.FrameReader: large frames are read
straight into their own buffer, and their record batches are never copied here). A size below 0
or above ``socket.request.max.bytes`` closes the connection, as do an unreadable header, an
unknown API key and a body that fails to decode (Kafka does the same). Requests on one
connection are handled concurrently, each in its own task, and responses are written strictly
in request order through a queue of slots; an acks=0 Produce takes no slot, so it never holds
back later responses. Responses are written as lists of buffers (record sets are not joined
into one frame). Reading pauses when a connection has ``max_inflight`` requests running or its
write buffer is full.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import (
    ApiKey,
    decode_request,
    encode_response_chunks,
    parse_request_header,
)
from services.common.protocol.primitives import Buffer
from services.gateway import authz, error_counts, metrics, quota_enforcement
from services.gateway.connection_quotas import ConnectionQuotas
from services.gateway.context import ClientSoftware, RequestContext
from services.gateway.fetch_park import FetchPark
from services.gateway.framing import FrameReader, FrameSizeError
from services.gateway.handlers.api_versions import fallback_body
from services.gateway.handlers.base import ApiHandler
from services.gateway.listeners import Listener
from services.gateway.produce_order import ProduceOrder
from services.gateway.sasl import ANONYMOUS, SaslFailure, Session
from services.gateway.security import ListenerSecurity

log = get_logger("gateway.server")

_WRITE_HIGH_WATER = 4 * 1024 * 1024
_SASL_PHASE_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class _Slot:
    """A response position in a connection's output order (its frame, as buffers)."""

    __slots__ = ("data",)

    def __init__(self, data: list[Buffer] | None = None) -> None:
        self.data = data


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: KafkaServer) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._transport: Any = None  # asyncio.Transport or uvloop's TCPTransport
        self._reader = FrameReader(server.max_request_bytes)
        self._fetch_park = FetchPark()
        self._produce_order = ProduceOrder()
        self._software = ClientSoftware()
        self._out: deque[_Slot] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._reading_paused = False
        self._write_paused = False
        self._draining = False
        self.closing = False
        self.peer = "?"
        self.peer_ip = "?"
        self.last_active = self._loop.time()
        self.requests = 0
        self.session: Session | None = None
        self._muted_until = 0.0  # loop time until which a quota throttle mutes reading

    # ---- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.peer_ip = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        if not self._server.quotas.admit(self.peer_ip):
            # Over max.connections(.per.ip): closed before anything is read, as Kafka does.
            self.closing = True
            transport.close()
            return
        try:
            self.session = self._server.security.session(transport.get_extra_info("peercert"))
            if self._server.security.tls is not None and self.session.principal != ANONYMOUS:
                log.info(
                    "tls_client_authenticated",
                    peer=self.peer,
                    listener=self.session.listener.name,
                    principal=self.session.principal,
                )
        except ValueError as exc:  # no ssl.principal.mapping.rules rule matches
            log.warning("tls_principal_unmapped", peer=self.peer, error=str(exc))
            self.closing = True
            transport.close()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self._transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        self._server._register(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        metrics.BYTES_RECEIVED.inc(nbytes)
        self.last_active = self._loop.time()
        self._reader.filled(nbytes)
        self._process()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        for task in list(self._tasks):
            task.cancel()
        self._out.clear()
        self._fetch_park.clear()
        self._server._unregister(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()
        self._process()

    # ---- state --------------------------------------------------------------------------
    @property
    def tasks(self) -> set[asyncio.Task[None]]:
        return set(self._tasks)

    @property
    def busy(self) -> bool:
        return bool(self._tasks) or bool(self._out)

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            if self._transport is not None:
                self._transport.close()

    def close_for(self, reason: str) -> None:
        """Close on a handler's request (e.g. a failed acks=0 Produce, as Kafka does)."""
        if not self.closing:
            log.info("closing_connection", reason=reason, peer=self.peer)
            self.close()

    def stop_reading(self) -> None:
        """Graceful shutdown: take no new requests, finish the running ones."""
        self._draining = True
        self._update_reading()

    def _must_pause(self) -> bool:
        return (
            self._draining
            or self._write_paused
            or self._muted_until > 0.0
            or len(self._tasks) >= self._server.max_inflight
            or (bool(self._tasks) and self._authenticating)
        )

    @property
    def _authenticating(self) -> bool:
        """While a SASL session is not (or no longer) authenticated, requests are handled one
        at a time, as Kafka's authenticator does, so each sees the state the previous left."""
        session = self.session
        return session is not None and session.sasl is not None and session.needs_auth

    def mute_for(self, throttle_ms: int) -> None:
        """KIP-219: after a throttled response, read nothing from the client for
        ``throttle_ms`` (requests already running go on)."""
        until = self._loop.time() + throttle_ms / 1000.0
        if until <= self._muted_until or self.closing:
            return
        self._muted_until = until
        self._update_reading()
        self._loop.call_later(throttle_ms / 1000.0, self._unmute, until)

    def _unmute(self, until: float) -> None:
        if self._muted_until != until or self.closing:
            return  # a later throttle extended the mute
        self._muted_until = 0.0
        self._update_reading()
        if not self._reading_paused:
            self._process()

    def _update_reading(self) -> None:
        if self._transport is None or self.closing:
            return
        pause = self._must_pause()
        if pause and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        elif not pause and self._reading_paused:
            self._transport.resume_reading()
            self._reading_paused = False

    def _protocol_close(self, reason: str, **kw: Any) -> None:
        metrics.PROTOCOL_CLOSES.labels(reason).inc()
        log.error("closing_connection", reason=reason, peer=self.peer, **kw)
        for task in list(self._tasks):
            task.cancel()
        self._out.clear()
        self.close()

    # ---- input --------------------------------------------------------------------------
    def _process(self) -> None:
        reader = self._reader
        while not self.closing and not self._must_pause():
            try:
                frame = reader.next_frame()
            except FrameSizeError as exc:
                self._protocol_close("frame_size", size=exc.size, limit=exc.limit)
                return
            if frame is None:
                break
            self._on_frame(frame)
        self._update_reading()

    def _on_frame(self, frame: Buffer) -> None:
        start = time.perf_counter()
        session = self.session
        if session is not None and session.raw_tokens and session.mechanism is not None:
            self._raw_token(session, bytes(frame))
            return
        try:
            header, offset = parse_request_header(frame)
        except Exception as exc:  # noqa: BLE001 - any header failure closes, as in Kafka
            self._protocol_close("bad_header", error=repr(exc))
            return
        api_key, version = header.api_key, header.api_version
        handler = self._server.handlers.get(api_key)
        if handler is None:
            self._protocol_close("unknown_api_key", api_key=api_key, api_version=version)
            return
        if session is not None and session.needs_auth and api_key not in _SASL_PHASE_APIS:
            # Kafka closes a SASL connection that sends anything else before authenticating
            # (and, KIP-368, after its session expired).
            reason = "reauthentication_required" if session.authenticated else "unauthenticated"
            self._protocol_close(reason, api_key=api_key, listener=session.listener.name)
            return
        lo, hi = self._server.versions[api_key]
        if not lo <= version <= hi:
            self._unsupported_version(handler, header, frame, offset)
            return
        try:
            body = decode_request(api_key, version, frame, offset)
        except Exception as exc:  # noqa: BLE001 - malformed request: close, as in Kafka
            self._protocol_close(
                "malformed_request",
                api_key=api_key,
                api_version=version,
                correlation_id=header.correlation_id,
                error=repr(exc),
            )
            return
        self.requests += 1
        slot: _Slot | None = None
        if not (api_key == ApiKey.PRODUCE and body.get("acks") == 0):
            slot = _Slot()
            self._out.append(slot)
        ctx = RequestContext(
            self._server.services,
            api_key,
            version,
            header.correlation_id,
            header.client_id,
            self.peer,
            self._server.versions,
            self.close_for,
            self._fetch_park,
            self._produce_order,
            self._software,
            session,
        )
        throttle_ms = self._on_arrival(ctx, len(frame) + 4)
        task = self._loop.create_task(self._run(handler, ctx, body, slot, start, throttle_ms))
        self._tasks.add(task)
        metrics.INFLIGHT.inc()
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        metrics.INFLIGHT.dec()
        if self._reading_paused and not self.closing:
            self._update_reading()
            if not self._reading_paused:
                self._process()

    def _unsupported_version(
        self, handler: ApiHandler, header: Any, frame: Buffer, offset: int
    ) -> None:
        corr = header.correlation_id
        try:
            if header.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer v0 with UNSUPPORTED_VERSION and our version table.
                data = encode_response_chunks(
                    ApiKey.API_VERSIONS, 0, corr, fallback_body(self._server.versions)
                )
            else:
                body = decode_request(header.api_key, header.api_version, frame, offset)
                resp = handler.error_response(
                    body, header.api_version, ErrorCode.UNSUPPORTED_VERSION
                )
                data = encode_response_chunks(header.api_key, header.api_version, corr, resp)
                error_counts.record(handler.name, header.api_key, header.api_version, resp)
        except Exception as exc:  # noqa: BLE001 - no schema for that version: close, as in Kafka
            self._protocol_close(
                "unsupported_version",
                api_key=header.api_key,
                api_version=header.api_version,
                error=repr(exc),
            )
            return
        self._out.append(_Slot(data))
        self._flush()

    # ---- handling and output --------------------------------------------------------------
    async def _run(
        self,
        handler: ApiHandler,
        ctx: RequestContext,
        body: dict[str, Any],
        slot: _Slot | None,
        start: float,
        arrival_throttle_ms: int = 0,
    ) -> None:
        version = ctx.api_version
        try:
            quota_enforcement.before(ctx, body)
            resp = await authz.handle(handler, ctx, body)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - every handler failure becomes an error response
            log.exception(
                "handler_failed",
                api=handler.name,
                api_version=version,
                correlation_id=ctx.correlation_id,
                client_id=ctx.client_id,
                peer=self.peer,
            )
            resp = self._safe_error_body(handler, body, version)
        self._server.observe(handler.name, version, start)
        error_counts.record(handler.name, ctx.api_key, version, resp)
        await self._throttle(ctx, resp, arrival_throttle_ms, start)
        if slot is None:
            return
        data = self._encode(handler, ctx, body, resp)
        if data is None:
            self._protocol_close("no_response", api=handler.name, correlation_id=ctx.correlation_id)
            return
        slot.data = data
        self._flush()
        if ctx.session is not None and ctx.session.failed:
            self._close_after_auth_failure(ctx.session)

    def _on_arrival(self, ctx: RequestContext, request_bytes: int) -> int:
        """Client quotas on a request just read (Produce): when throttled, read nothing more
        (the requests pipelined behind it wait out the throttle, as on a Kafka broker)."""
        try:
            throttle_ms = quota_enforcement.on_arrival(ctx, request_bytes)
        except Exception:  # noqa: BLE001 - a quota failure must not lose the request
            log.exception("quota_record_failed", api_key=ctx.api_key, client_id=ctx.client_id)
            return 0
        if throttle_ms > 0:
            self.mute_for(throttle_ms)
        return throttle_ms

    async def _throttle(
        self, ctx: RequestContext, resp: dict[str, Any] | None, arrival_ms: int, start: float
    ) -> None:
        """Client quotas after the handler: record, then mute the connection for the throttle
        time (clients older than KIP-219 also get the response held back that long)."""
        try:
            throttle_ms = quota_enforcement.after(
                ctx, resp, time.perf_counter() - start, arrival_ms
            )
        except Exception:  # noqa: BLE001 - a quota failure must not lose the response
            log.exception("quota_record_failed", api_key=ctx.api_key, client_id=ctx.client_id)
            return
        if throttle_ms <= 0:
            return
        self.mute_for(throttle_ms)  # no-op when on_arrival already muted as long
        if quota_enforcement.delays_response(ctx.api_key, ctx.api_version):
            await asyncio.sleep(throttle_ms / 1000.0)

    def _close_after_auth_failure(self, session: Session) -> None:
        """Kafka answers a failed authentication, then closes after
        connection.failed.authentication.delay.ms (reading nothing more meanwhile)."""
        if self.closing or self._draining:
            return
        self.stop_reading()
        delay = session.sasl.failed_delay_ms / 1000.0 if session.sasl else 0.0
        self._loop.call_later(delay, self.close_for, "authentication_failed")

    def _raw_token(self, session: Session, token: bytes) -> None:
        """A SASL token after SaslHandshake v0: a bare frame, answered with a bare frame
        (failure: the connection is closed, the only signal that mode has)."""
        slot = _Slot()
        self._out.append(slot)

        async def run() -> None:
            try:
                out, _, _ = await session.authenticate(token, self._server.services.zk)
            except SaslFailure as exc:
                metrics.SASL_FAILURES.labels(session.listener.name, "raw").inc()
                log.warning("sasl_authentication_failed", peer=self.peer, error=exc.message)
                self._out.clear()
                self._close_after_auth_failure(session)
                return
            slot.data = [len(out).to_bytes(4, "big") + out]
            self._flush()

        task = self._loop.create_task(run())
        self._tasks.add(task)
        metrics.INFLIGHT.inc()
        task.add_done_callback(self._task_done)

    def _safe_error_body(
        self, handler: ApiHandler, body: dict[str, Any], version: int
    ) -> dict[str, Any] | None:
        try:
            return handler.error_response(body, version, ErrorCode.UNKNOWN_SERVER_ERROR)
        except Exception:  # noqa: BLE001
            log.exception("error_response_failed", api=handler.name)
            return None

    def _encode(
        self,
        handler: ApiHandler,
        ctx: RequestContext,
        body: dict[str, Any],
        resp: dict[str, Any] | None,
    ) -> list[Buffer] | None:
        if resp is not None:
            try:
                return encode_response_chunks(
                    ctx.api_key, ctx.api_version, ctx.correlation_id, resp
                )
            except Exception:  # noqa: BLE001 - a handler built a bad body: answer an error instead
                log.exception(
                    "encode_failed",
                    api=handler.name,
                    api_version=ctx.api_version,
                    correlation_id=ctx.correlation_id,
                )
        err = self._safe_error_body(handler, body, ctx.api_version)
        if err is None:
            return None
        try:
            return encode_response_chunks(ctx.api_key, ctx.api_version, ctx.correlation_id, err)
        except Exception:  # noqa: BLE001
            log.exception("encode_failed", api=handler.name, api_version=ctx.api_version)
            return None

    def _flush(self) -> None:
        out = self._out
        if not out or out[0].data is None:
            return
        chunks: list[Buffer] = []
        while out and out[0].data is not None:
            chunks += out.popleft().data  # type: ignore[arg-type]
        if self.closing or self._transport is None:
            return
        self.last_active = self._loop.time()
        if len(chunks) == 1:
            self._transport.write(chunks[0])
        else:
            self._transport.writelines(chunks)  # uvloop: one vectored write, nothing joined
        metrics.BYTES_SENT.inc(sum(map(len, chunks)))


class KafkaServer:
    """Accepts client connections and dispatches their requests to ``handlers``."""

    def __init__(
        self,
        services: Any,
        handlers: Mapping[int, ApiHandler],
        versions: Mapping[int, tuple[int, int]],
        *,
        max_request_bytes: int,
        max_inflight: int = 128,
        idle_timeout_s: float = 600.0,
        quotas: ConnectionQuotas | None = None,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.services = services
        self.handlers = dict(handlers)
        self.versions = dict(versions)
        self.max_request_bytes = max_request_bytes
        self.max_inflight = max_inflight
        self.idle_timeout_s = idle_timeout_s
        self.quotas = quotas if quotas is not None else ConnectionQuotas()
        if security is None:
            security = ListenerSecurity(Listener("PLAINTEXT", "PLAINTEXT", "", 0))
        self.security = security
        self.connections: set[Connection] = set()
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._hist: dict[str, Any] = {}
        self._counters: dict[tuple[str, int], Any] = {}

    @property
    def bound(self) -> bool:
        """Listening and accepting connections."""
        return self._server is not None and self._server.is_serving()

    async def start(self, host: str, port: int, *, serve: bool = True) -> int:
        """Bind (and, by default, accept); returns the port. With ``serve=False`` the port is
        held but connections are refused until :meth:`serve`, so a client retries elsewhere
        (Kafka likewise binds at start-up but processes requests only once registered)."""
        factory: Callable[[], Connection] = lambda: Connection(self)  # noqa: E731
        tls = self.security.tls
        self._server = await asyncio.get_running_loop().create_server(
            factory,
            host or None,
            port,
            reuse_address=True,
            backlog=1024,
            start_serving=serve,
            ssl=tls.context if tls is not None else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_idle())
        return self.port

    async def serve(self) -> None:
        """Start accepting the connections a ``start(serve=False)`` left waiting."""
        if self._server is not None and not self._server.is_serving():
            await self._server.start_serving()

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def drain(self, grace_s: float) -> None:
        """Stop reading new requests, wait (bounded) for the running ones, then close.

        A response is written as soon as its request's task ends, so when every task is done
        every response has been handed to its transport (which flushes it on close).
        """
        self.stop_accepting()
        tasks: set[asyncio.Task[None]] = set()
        for conn in list(self.connections):
            conn.stop_reading()
            tasks |= conn.tasks
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        await self.close()

    async def close(self) -> None:
        self.stop_accepting()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            except TimeoutError:
                pass

    def observe(self, name: str, version: int, start: float) -> None:
        counter = self._counters.get((name, version))
        if counter is None:
            counter = self._counters[(name, version)] = metrics.REQUESTS.labels(name, str(version))
        hist = self._hist.get(name)
        if hist is None:
            hist = self._hist[name] = metrics.TOTAL_TIME_MS.labels(name)
        counter.inc()
        hist.observe((time.perf_counter() - start) * 1000.0)

    def _register(self, conn: Connection) -> None:
        self.connections.add(conn)
        metrics.CONNECTIONS.inc()
        metrics.CONNECTIONS_CREATED.inc()

    def _unregister(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.quotas.release(conn.peer_ip)
            metrics.CONNECTIONS.dec()
            metrics.CONNECTIONS_CLOSED.inc()

    async def _sweep_idle(self) -> None:
        interval = max(min(self.idle_timeout_s / 4, 10.0), 0.05)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for conn in list(self.connections):
                if not conn.busy and now - conn.last_active > self.idle_timeout_s:
                    log.info("closing_idle_connection", peer=conn.peer)
                    conn.close()
