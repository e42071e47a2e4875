"""A TCP proxy in front of ZooKeeper that can stall, for tests of ZooKeeper pauses.

While stalled nothing passes in either direction, as when ZooKeeper is SIGSTOPped: clients time
their pings out, go SUSPENDED and retry. Unlike a real SIGSTOP, the proxy keeps every session it
relayed alive meanwhile, with pings of its own on the server side, so when the stall ends the
clients reconnect to their old sessions. That is the state a SIGCONTed ZooKeeper reaches when
the clients' reconnects win the race against its own session expiry (what happened in 3 of 22
pauses in the fault runs); here it happens every time, whatever the stall's length.

ZooKeeper's wire protocol: every frame is a 4-byte big-endian length and a payload; the first
client frame is the ConnectRequest, the first server frame the ConnectResponse (protocol version,
timeout, session id, password). A ping is ``xid -2, type 11``; the server touches the session on
every frame it receives.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

PING = struct.pack(">iii", 8, -2, 11)
MULTI = 14  # ZooKeeper's opcode of a multi request
PING_INTERVAL_S = 0.25
# After a stall a frozen link keeps its session alive until the client is back on a new link
# for the same session (the server then drops the old one), at most this long.
RESUME_GRACE_S = 10.0


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    session_id: int = 0  # from the ConnectResponse
    frozen: bool = False  # caught by a stall: never forwards again, only keeps the session
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class ZkStallProxy:
    """``start()``, point clients at ``address``, then ``stall()`` / ``resume()``; ``stop()``."""

    def __init__(self, upstream: str, host: str = "127.0.0.1") -> None:
        up_host, _, up_port = upstream.rpartition(":")
        self._upstream = (up_host, int(up_port))
        self.host = host
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._open: asyncio.Event | None = None
        self._links: set[_Link] = set()
        self._stall_after_op: int | None = None
        self.stalled_at: float | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # ---- control (from any thread) --------------------------------------------------------
    def start(self) -> ZkStallProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def stall(self) -> None:
        """From now on nothing passes; every session stays alive."""
        self._call(self._stall())
        self.stalled_at = time.monotonic()

    def stall_after(self, op: int) -> None:
        """Pass the next request of ``op`` (e.g. MULTI) to ZooKeeper, then stall before its
        reply: the request runs, its client never learns the outcome (ConnectionLoss)."""
        self._stall_after_op = op

    def resume(self) -> None:
        """Let new connections through again (the stalled ones stay dead, as after a client
        timed them out)."""
        self._call(self._resume())
        self.stalled_at = None

    def hold(self, session_id: int) -> None:
        """Freeze one session's link, as a stall does, so the session outlives its client (a
        registration of a process killed -9 then stays until :meth:`release`)."""
        self._call(self._set_frozen(session_id))

    def release(self, session_id: int) -> None:
        """Close a held session's link: ZooKeeper expires the session after its timeout."""
        self._call(self._close_session(session_id))

    def sessions(self) -> set[int]:
        """Sessions of the links alive now (frozen ones included)."""
        return {link.session_id for link in list(self._links) if link.session_id}

    def _call(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    # ---- the loop's side ------------------------------------------------------------------
    async def _start(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        asyncio.get_running_loop().create_task(self._pinger())

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            self._close(link)

    async def _stall(self) -> None:
        assert self._open is not None
        self._open.clear()
        for link in self._links:
            link.frozen = True

    async def _set_frozen(self, session_id: int) -> None:
        for link in self._links:
            if link.session_id == session_id:
                link.frozen = True

    async def _close_session(self, session_id: int) -> None:
        for link in [x for x in self._links if x.session_id == session_id]:
            self._close(link)

    async def _resume(self) -> None:
        assert self._open is not None
        self._open.set()
        asyncio.get_running_loop().call_later(RESUME_GRACE_S, self._drop_frozen)

    def _drop_frozen(self) -> None:
        for link in [link for link in self._links if link.frozen]:
            self._close(link)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        _nodelay(writer)
        link = _Link(writer)
        self._links.add(link)
        try:
            await self._open.wait()  # a connection made during a stall waits, unanswered
            up_reader, link.upstream = await asyncio.open_connection(*self._upstream)
            _nodelay(link.upstream)
            link.tasks = [
                asyncio.current_task(),  # type: ignore[list-item]
                asyncio.get_running_loop().create_task(self._downstream(link, up_reader)),
            ]
            await self._upstream_frames(link, reader)
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # cancelled: closed by the proxy itself
        finally:
            if not link.frozen:
                self._close(link)

    async def _upstream_frames(self, link: _Link, reader: asyncio.StreamReader) -> None:
        """Client -> ZooKeeper, whole frames only, so the pinger can slip pings between them."""
        while True:
            head = await reader.readexactly(4)
            body = await reader.readexactly(struct.unpack(">i", head)[0])
            if link.frozen:
                continue  # swallowed, as by a stopped server
            assert link.upstream is not None
            link.upstream.write(head + body)
            if self._stall_after_op is not None and len(body) >= 8:
                if struct.unpack_from(">i", body, 4)[0] == self._stall_after_op:
                    self._stall_after_op = None
                    await self._stall()
                    self.stalled_at = time.monotonic()

    async def _downstream(self, link: _Link, reader: asyncio.StreamReader) -> None:
        """ZooKeeper -> client; learns the session from the ConnectResponse."""
        try:
            head = await reader.readexactly(4)
            body = await reader.readexactly(struct.unpack(">i", head)[0])
            if len(body) >= 16:
                link.session_id = struct.unpack(">q", body[8:16])[0]
                self._replaced(link)
            if not link.frozen:
                link.client.write(head + body)
            while data := await reader.read(65536):
                if not link.frozen:
                    link.client.write(data)
        except (OSError, asyncio.IncompleteReadError):
            pass
        self._close(link)  # the server closed it (a frozen link too: its session moved)

    def _replaced(self, new: _Link) -> None:
        """The session is back on a new link: its frozen link has done its job."""
        for link in [x for x in self._links if x.frozen and x.session_id == new.session_id]:
            self._close(link)

    async def _pinger(self) -> None:
        while True:
            await asyncio.sleep(PING_INTERVAL_S)
            for link in list(self._links):
                if link.frozen and link.session_id and link.upstream is not None:
                    with contextlib.suppress(OSError, RuntimeError):
                        link.upstream.write(PING)

    def _close(self, link: _Link) -> None:
        self._links.discard(link)
        for writer in (link.client, link.upstream):
            if writer is not None:
                with contextlib.suppress(OSError, RuntimeError):
                    writer.close()
        current = asyncio.current_task()
        for task in link.tasks:
            if task is not current:
                task.cancel()


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
