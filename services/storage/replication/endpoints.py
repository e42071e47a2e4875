"""How a follower reaches a leader: its address from ZooKeeper and a long-lived gRPC channel.

The address of broker N is its registration ``/brokers/ids/N`` (``host``/``port`` of the gRPC
listener), kept fresh by a ZooKeeper data watch; a changed address replaces the channel and wakes
the fetcher. Until the watch's first reading, a lookup reads the registration itself: kazoo
registers a data watch with a blocking read retried without limit, its sleeps growing to 60 s
while ZooKeeper is unreachable or the session expired, so that registration (on its own task,
never tied to the caller) may come up to a minute after ZooKeeper is back. Channels reconnect by
themselves; their reconnect backoff is capped at one second so a restarted leader is found again
quickly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from typing import Protocol

from services.common import internal_tls, storage_wire
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.rpc.kafkapy.v1 import storage_pb2_grpc as pb_grpc
from services.common.runtime import GRPC_OPTIONS, new_channel
from services.common.storage_exchange import StorageExchange
from services.common.zk import layout
from services.common.zk.client import AsyncZk, ZnodeStat

log = get_logger("storage.replication.endpoints")

ADDRESS_LOOKUP_TIMEOUT_S = 10.0
CHANNEL_OPTIONS = [
    *GRPC_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


FetchAnswer = pb.FetchResponse | storage_wire.FetchResponse


class LeaderEndpoint(Protocol):
    """The calls a follower makes to its leader."""

    async def fetch(self, req: pb.FetchRequest, timeout_s: float) -> FetchAnswer: ...

    async def offset_for_leader_epoch(
        self, req: pb.OffsetForLeaderEpochRequest, timeout_s: float
    ) -> pb.OffsetForLeaderEpochResponse: ...


class EndpointProvider(Protocol):
    async def endpoint(self, broker_id: int) -> LeaderEndpoint | None:
        """The leader's endpoint, or None while the broker is not registered."""
        ...

    async def close(self) -> None: ...


class GrpcLeaderEndpoint:
    """Fetches go over the leader's Exchange stream (storage_exchange.py): each is a stream
    message rather than a unary call, and the records are views of the received message."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._channel = new_channel(address, CHANNEL_OPTIONS)
        self.tls_generation = internal_tls.generation()
        self._stub = pb_grpc.StorageStub(self._channel)
        self._exchange = StorageExchange(self._channel)

    async def fetch(self, req: pb.FetchRequest, timeout_s: float) -> FetchAnswer:
        return await self._exchange.fetch(req, timeout=timeout_s)

    async def offset_for_leader_epoch(
        self, req: pb.OffsetForLeaderEpochRequest, timeout_s: float
    ) -> pb.OffsetForLeaderEpochResponse:
        resp: pb.OffsetForLeaderEpochResponse = await self._stub.OffsetForLeaderEpoch(
            req, timeout=timeout_s
        )
        return resp

    async def close(self) -> None:
        self._exchange.close()
        await self._channel.close()


class BrokerAddresses:
    """``host:port`` of storage nodes, cached and refreshed by ZooKeeper watches."""

    def __init__(self, zk: AsyncZk, on_change: Callable[[int], None] | None = None) -> None:
        self.zk = zk
        self._on_change = on_change
        self._known: dict[int, str | None] = {}  # what each watch last read
        # what lookups' own reads answered before the watch's first reading
        self._read: dict[int, set[str | None]] = {}
        self._watches: dict[int, asyncio.Task[None]] = {}  # registering, or registered

    async def get(self, broker_id: int) -> str | None:
        """The registered address of ``broker_id`` (None if it is not registered). Before its
        watch has read it, an async read of its own (TimeoutError after
        ADDRESS_LOOKUP_TIMEOUT_S, ZooKeeper errors as raised: the caller retries)."""
        if broker_id in self._known:
            return self._known[broker_id]
        self._watch(broker_id)
        got = await asyncio.wait_for(
            self.zk.get_or_none(layout.broker_path(broker_id)), ADDRESS_LOOKUP_TIMEOUT_S
        )
        if broker_id in self._known:  # the watch read it meanwhile: the latest
            return self._known[broker_id]
        address = _address(broker_id, got[0] if got is not None else None)
        self._read.setdefault(broker_id, set()).add(address)
        return address

    def _watch(self, broker_id: int) -> None:
        """Register the watch once, on a task of its own: a cancelled caller (its fetcher
        stopped) neither cancels it nor leaves later lookups waiting on it."""
        if broker_id in self._watches:
            return
        task = asyncio.get_running_loop().create_task(
            # kazoo's DataWatch reads the node in its constructor: keep that off the loop
            asyncio.to_thread(
                self.zk.watch_data,
                layout.broker_path(broker_id),
                functools.partial(self._on_data, broker_id),
            ),
            name=f"broker-address-watch-{broker_id}",
        )
        self._watches[broker_id] = task
        task.add_done_callback(functools.partial(self._watch_done, broker_id))

    def _watch_done(self, broker_id: int, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is not None:
            if self._watches.get(broker_id) is task:
                del self._watches[broker_id]  # the next lookup registers it again
            if not task.cancelled():
                log.warning(
                    "broker address watch not registered",
                    broker=broker_id,
                    error=repr(task.exception()),
                )

    def _on_data(self, broker_id: int, data: bytes | None, stat: ZnodeStat | None) -> None:
        address = _address(broker_id, data)
        if broker_id in self._known:
            changed, old = self._known[broker_id] != address, self._known[broker_id]
        else:  # the first reading: a change if a lookup answered otherwise
            answered = self._read.pop(broker_id, set()) - {address}
            changed, old = bool(answered), next(iter(answered), None)
        self._known[broker_id] = address
        if changed:
            log.info("broker address changed", broker=broker_id, old=old, new=address)
            if self._on_change is not None:
                self._on_change(broker_id)


def _address(broker_id: int, data: bytes | None) -> str | None:
    """``host:port`` of a registration znode's data (None: no znode, or unreadable)."""
    if not data:
        return None
    try:
        return layout.BrokerRegistration.from_json(broker_id, data).address
    except (KeyError, ValueError, TypeError) as exc:
        log.warning("unreadable broker registration", broker=broker_id, error=repr(exc))
        return None


class GrpcEndpoints:
    """One channel per leader broker, replaced when the broker's address changes or this
    process's internal TLS certificates were rotated."""

    def __init__(self, addresses: BrokerAddresses) -> None:
        self.addresses = addresses
        self._endpoints: dict[int, GrpcLeaderEndpoint] = {}

    async def endpoint(self, broker_id: int) -> LeaderEndpoint | None:
        address = await self.addresses.get(broker_id)
        current = self._endpoints.get(broker_id)
        if (
            current is not None
            and current.address == address
            and current.tls_generation == internal_tls.generation()
        ):
            return current
        if current is not None:
            del self._endpoints[broker_id]
            await current.close()
        if address is None:
            return None
        created = self._endpoints[broker_id] = GrpcLeaderEndpoint(address)
        return created

    async def close(self) -> None:
        endpoints, self._endpoints = list(self._endpoints.values()), {}
        for ep in endpoints:
            with contextlib.suppress(Exception):
                await ep.close()
