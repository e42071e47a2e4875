"""ShardManager against a fake ``__consumer_offsets`` leader: what it does when storage fences
a shard that the shard map still places on this coordinator."""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace
from typing import Any

import uvloop
from prometheus_client import CollectorRegistry

from services.common.errors import ErrorCode
from services.common.metadata_cache import PartitionInfo
from services.common.records.batch import iter_headers
from services.common.rpc.kafkapy.v1 import storage_pb2
from services.common.zk.layout import CoordinatorKind, ShardMap, ShardOwner
from services.group_coordinator.config import GroupConfig
from services.group_coordinator.metrics import CoordinatorMetrics
from services.group_coordinator.settings import GroupCoordinatorSettings
from services.group_coordinator.shards import ShardManager

NODE = 1
OWNER = ShardOwner(owner=NODE, epoch=3, producer_id=4000)


class FakeOffsetsLeader:
    """Leader of ``__consumer_offsets-0``: appends batches and serves them; the first appends
    are answered with ``errors`` instead."""

    def __init__(self, errors: list[ErrorCode]) -> None:
        self.errors = errors
        self.log = bytearray()
        self.next_offset = 0
        self.appends = 0

    async def Append(self, request: bytes, timeout: float) -> Any:  # noqa: N802, ASYNC109 - the gRPC stub's signature
        self.appends += 1
        if self.errors:
            code = self.errors.pop(0)
            return _answer(error_code=code, base_offset=-1, error_message=code.name)
        batch = bytearray(storage_pb2.AppendRequest.FromString(request).partitions[0].records)
        base = self.next_offset
        struct.pack_into(">q", batch, 0, base)
        (header,) = iter_headers(batch)
        self.next_offset += header.record_count
        self.log += batch
        return _answer(error_code=0, base_offset=base, error_message="")

    async def Fetch(self, request: Any, timeout: float) -> Any:  # noqa: N802, ASYNC109 - the gRPC stub's signature
        offset = request.partitions[0].fetch_offset
        records = bytes(self.log) if offset < self.next_offset else b""
        result = SimpleNamespace(
            error_code=0,
            records=records,
            high_watermark=self.next_offset,
            log_start_offset=0,
        )
        return SimpleNamespace(partitions=[result])


def _answer(**fields: Any) -> Any:
    return SimpleNamespace(partitions=[SimpleNamespace(**fields)])


class StillCache:
    """A metadata cache that never changes: the shard map places shard 0 here throughout."""

    shard_map = ShardMap(partitions=1, shards={0: OWNER})

    def shard_map_of(self, kind: CoordinatorKind) -> ShardMap:
        return self.shard_map

    def partition(self, topic: str, partition: int) -> PartitionInfo:
        return PartitionInfo(partition, (2,), 2, 0, (2,), 0)

    async def changed(self) -> bool:
        await asyncio.Event().wait()
        return True

    async def wait_for(self, predicate: Any, timeout: float) -> bool:  # noqa: ASYNC109
        await asyncio.sleep(timeout)
        return predicate()


def test_a_shard_fenced_while_the_map_still_places_it_here_is_taken_again() -> None:
    leader = FakeOffsetsLeader([ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER])
    storage = SimpleNamespace(stub=lambda node_id: leader)
    manager = ShardManager(
        NODE,
        StillCache(),  # type: ignore[arg-type]
        storage,  # type: ignore[arg-type]
        GroupCoordinatorSettings(node_id=NODE),
        GroupConfig(),
        CoordinatorMetrics(CollectorRegistry()),
    )

    async def scenario() -> None:
        runner = asyncio.create_task(manager.run())
        try:
            for _ in range(100):
                await asyncio.sleep(0.05)
                if not isinstance(manager.shard(0), ErrorCode):
                    break
            assert not isinstance(manager.shard(0), ErrorCode), manager.shard(0)
            assert leader.appends == 2  # the refused fence write, then the retake's
            assert manager.owned == [0]
        finally:
            runner.cancel()
            await manager.stop()

    uvloop.run(scenario())
