"""Long-lived gRPC channels by node id (``ChannelPool``); the storage nodes' (``StorageClients``),
used by gateways and group coordinators alike."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import grpc

from services.common import internal_tls
from services.common.metadata_cache import MetadataCache
from services.common.rpc.kafkapy.v1 import storage_pb2_grpc
from services.common.runtime import new_channel
from services.common.storage_exchange import StorageExchange

S = TypeVar("S")


class StorageStub:
    """The generated stub, except for the calls that carry records, which go over the node's
    Exchange stream (storage_exchange.py): ``Append`` takes an already serialized request (or
    its buffers) too, and ``Fetch`` answers a storage_wire.FetchResponse whose ``records`` are
    views of the received bytes. Both are coroutine functions with the unary calls' ``timeout``
    and errors. Other calls are the generated stub's."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._generated: Any = storage_pb2_grpc.StorageStub(channel)
        self.exchange = StorageExchange(channel)
        self.Append = self.exchange.append
        self.Fetch = self.exchange.fetch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generated, name)


class ChannelPool(Generic[S]):
    """One long-lived channel (and stub) per node id; re-created when the node's address
    changes or this process's internal TLS certificates were rotated, dropped when the node is
    gone. ``address_of`` reads the address from the metadata."""

    def __init__(
        self, address_of: Callable[[int], str | None], make_stub: Callable[[grpc.aio.Channel], S]
    ) -> None:
        self._address_of = address_of
        self._make_stub = make_stub
        # node id -> ((address, internal TLS generation), channel, stub)
        self._entries: dict[int, tuple[tuple[str, int], grpc.aio.Channel, S]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def stub(self, node_id: int) -> S | None:
        """The stub of ``node_id``, or None when it is not registered."""
        address = self._address_of(node_id)
        entry = self._entries.get(node_id)
        if address is None:
            if entry is not None:
                self._drop(node_id)
            return None
        key = (address, internal_tls.generation())
        if entry is not None and entry[0] == key:
            return entry[2]
        if entry is not None:
            self._drop(node_id)
        channel = new_channel(address)
        stub = self._make_stub(channel)
        self._entries[node_id] = (key, channel, stub)
        return stub

    def _drop(self, node_id: int) -> None:
        _, channel, _ = self._entries.pop(node_id)
        task = asyncio.get_running_loop().create_task(channel.close(grace=5.0))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        channels = [c for _, c, _ in self._entries.values()]
        self._entries.clear()
        await asyncio.gather(*(c.close() for c in channels), *self._closing, return_exceptions=True)


class StorageClients(ChannelPool[Any]):
    """Storage stubs by broker id (``/brokers/ids``)."""

    def __init__(self, cache: MetadataCache) -> None:
        def address_of(broker_id: int) -> str | None:
            reg = cache.brokers.get(broker_id)
            return reg.address if reg is not None else None

        super().__init__(address_of, StorageStub)
