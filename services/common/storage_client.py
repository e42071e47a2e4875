"""Long-lived gRPC channels to the storage nodes, looked up by broker id (gateway and
group coordinator alike)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from services.common.metadata_cache import MetadataCache
from services.common.rpc.kafkapy.v1 import storage_pb2, storage_pb2_grpc
from services.common.runtime import new_channel
from services.common.storage_wire import parse_fetch_response


def _append_bytes(request: bytes | storage_pb2.AppendRequest) -> bytes:
    """Append requests arrive serialized (storage_wire.append_request); messages still work."""
    return request if isinstance(request, bytes) else request.SerializeToString()


class StorageStub:
    """The generated stub, except for the calls that carry records: ``Append`` also takes an
    already serialized request, and ``Fetch`` answers a storage_wire.FetchResponse whose
    ``records`` are views of the received bytes. Other calls are the generated stub's."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._generated: Any = storage_pb2_grpc.StorageStub(channel)
        self.Append = channel.unary_unary(
            "/kafkapy.v1.Storage/Append",
            request_serializer=_append_bytes,
            response_deserializer=storage_pb2.AppendResponse.FromString,
            _registered_method=True,
        )
        self.Fetch = channel.unary_unary(
            "/kafkapy.v1.Storage/Fetch",
            request_serializer=storage_pb2.FetchRequest.SerializeToString,
            response_deserializer=parse_fetch_response,
            _registered_method=True,
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generated, name)


class StorageClients:
    """One channel per registered storage node; re-created when its address changes."""

    def __init__(self, cache: MetadataCache) -> None:
        self._cache = cache
        self._entries: dict[int, tuple[str, grpc.aio.Channel, Any]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def stub(self, broker_id: int) -> Any | None:
        """The Storage stub of ``broker_id``, or None when it is not registered."""
        reg = self._cache.brokers.get(broker_id)
        entry = self._entries.get(broker_id)
        if reg is None:
            if entry is not None:
                self._drop(broker_id)
            return None
        if entry is not None and entry[0] == reg.address:
            return entry[2]
        if entry is not None:
            self._drop(broker_id)
        channel = new_channel(reg.address)
        stub = StorageStub(channel)
        self._entries[broker_id] = (reg.address, channel, stub)
        return stub

    def _drop(self, broker_id: int) -> None:
        _, channel, _ = self._entries.pop(broker_id)
        task = asyncio.get_running_loop().create_task(channel.close(grace=5.0))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        channels = [c for _, c, _ in self._entries.values()]
        self._entries.clear()
        await asyncio.gather(*(c.close() for c in channels), *self._closing, return_exceptions=True)
