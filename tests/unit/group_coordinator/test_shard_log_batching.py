"""ShardLog's group commit against a fake ``__consumer_offsets`` leader: appends that arrive
while a batch is in flight go out together in the next batch, each caller answered with that
batch's outcome, sequences contiguous."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import uvloop

from services.common.coordinator.shard_log import ShardFencedError, ShardLog
from services.common.errors import ErrorCode
from services.common.records.batch import iter_headers
from services.common.records.record import iter_records
from services.common.rpc.kafkapy.v1 import storage_pb2
from tests.unit.group_coordinator.test_shard_manager import OWNER, FakeOffsetsLeader, StillCache


class GatedLeader(FakeOffsetsLeader):
    """Holds the first append until ``gate`` is set; answers append number n with
    ``answers[n]`` when given, and refuses batches of more than ``max_records`` records as
    MESSAGE_TOO_LARGE (a smaller ``message.max.bytes``)."""

    def __init__(self, max_records: int = 1_000_000) -> None:
        super().__init__([])
        self.gate = asyncio.Event()
        self.max_records = max_records
        self.answers: dict[int, ErrorCode] = {}
        self.calls = 0
        self.refused = 0

    async def Append(self, request: bytes, timeout: float) -> Any:  # noqa: N802, ASYNC109 - the gRPC stub's signature
        n, self.calls = self.calls, self.calls + 1
        if n == 0:
            await self.gate.wait()
        batch = storage_pb2.AppendRequest.FromString(request).partitions[0].records
        (header,) = iter_headers(batch)
        code = self.answers.get(n, ErrorCode.NONE)
        if code == ErrorCode.NONE and header.record_count > self.max_records:
            code = ErrorCode.MESSAGE_TOO_LARGE
        if code != ErrorCode.NONE:
            self.refused += 1
            return SimpleNamespace(
                partitions=[SimpleNamespace(error_code=code, base_offset=-1, error_message="")]
            )
        return await super().Append(request, timeout)

    def batches(self) -> list[tuple[int, list[bytes]]]:
        """(base sequence, record keys) of every batch in the log."""
        return [
            (h.base_sequence, [bytes(r.key or b"") for r in iter_records(self.log, h)])
            for h in iter_headers(self.log)
        ]


class Cache(StillCache):
    def topic(self, name: str) -> None:
        return None  # no max.message.bytes override: Kafka's default


def _log(leader: GatedLeader, fenced: list[int]) -> ShardLog:
    return ShardLog(
        "__consumer_offsets",
        0,
        OWNER,
        Cache(),  # type: ignore[arg-type]
        SimpleNamespace(stub=lambda node_id: leader),  # type: ignore[arg-type]
        commit_timeout_ms=5000,
        request_timeout_ms=5000,
        load_buffer_bytes=1 << 20,
        on_fenced=fenced.append,
        fence_key=b"",
    )


async def _queued_behind_first(shard: ShardLog, leader: GatedLeader, keys: list[bytes]) -> Any:
    """Append ``keys[0]`` (held by the leader), then the others while it is in flight; release
    it. The results of every append, in order."""
    first = asyncio.ensure_future(shard.append([(keys[0], b"v")]))
    await asyncio.sleep(0.01)
    rest = [asyncio.ensure_future(shard.append([(k, b"v")])) for k in keys[1:]]
    await asyncio.sleep(0.01)
    leader.gate.set()
    return await asyncio.wait_for(asyncio.gather(first, *rest, return_exceptions=True), timeout=5)


def test_appends_queued_behind_a_batch_in_flight_share_the_next_batch() -> None:
    async def scenario() -> None:
        leader = GatedLeader()
        shard = _log(leader, [])
        results = await _queued_behind_first(shard, leader, [b"a", b"b", b"c", b"d"])
        assert results == [None] * 4
        assert leader.calls == 2
        assert leader.batches() == [(0, [b"a"]), (1, [b"b", b"c", b"d"])]
        await shard.append([(b"e", b"v")])  # the sequence continues after the shared batch
        assert leader.batches()[-1] == (4, [b"e"])

    uvloop.run(scenario())


def test_a_shared_batch_refused_as_too_large_is_written_one_caller_at_a_time() -> None:
    async def scenario() -> None:
        leader = GatedLeader(max_records=1)
        shard = _log(leader, [])
        results = await _queued_behind_first(shard, leader, [b"a", b"b", b"c"])
        assert results == [None] * 3
        assert leader.refused == 1
        assert leader.batches() == [(0, [b"a"]), (1, [b"b"]), (2, [b"c"])]

    uvloop.run(scenario())


def test_every_caller_of_a_fenced_batch_gets_not_coordinator() -> None:
    async def scenario() -> None:
        leader = GatedLeader()
        leader.answers[1] = ErrorCode.INVALID_PRODUCER_EPOCH  # a newer owner wrote
        fenced: list[int] = []
        shard = _log(leader, fenced)
        results = await _queued_behind_first(shard, leader, [b"a", b"b", b"c"])
        assert results[0] is None
        assert all(isinstance(r, ShardFencedError) for r in results[1:]), results
        assert fenced == [0] and shard.fenced
        with pytest.raises(ShardFencedError):  # and nothing more is written
            await shard.append([(b"d", b"v")])
        assert leader.batches() == [(0, [b"a"])] and leader.calls == 2

    uvloop.run(scenario())
