"""The Forward servicer without a network: refusals, and requests whose RPC is cancelled (the
gateway's client went away) still complete, as in Kafka when a connection drops."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey, decode_response_body, encode_request_body
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2 as pb
from services.group_coordinator.config import GroupConfig
from services.group_coordinator.groups import GroupShard
from services.group_coordinator.metrics import CoordinatorMetrics
from services.group_coordinator.server import GroupCoordinatorService

GROUP = "g"


class _GatedStore:
    """An in-memory shard log whose appends wait until ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.appended: list[Sequence[tuple[bytes, bytes | None]]] = []

    async def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        await self.gate.wait()
        self.appended.append(records)


class _OneShard:
    def __init__(self, store: _GatedStore) -> None:
        config = GroupConfig(group_min_session_timeout_ms=10, group_initial_rebalance_delay_ms=0)
        self.groups = GroupShard(0, store, config, coordinator_id=0)

    def partition_of(self, group_id: str) -> int:
        return 0

    def shard(self, partition: int | None) -> Any:
        return self.groups if partition == 0 else ErrorCode.NOT_COORDINATOR

    def loaded_shards(self) -> list[GroupShard]:
        return [self.groups]

    async def settle(self, group_ids: list[str], timeout_s: float) -> None:
        return None


def _request(api_key: int, version: int, body: dict[str, Any]) -> pb.ForwardRequest:
    return pb.ForwardRequest(
        api_key=api_key,
        api_version=version,
        request=encode_request_body(api_key, version, body),
        client_id="c",
        client_host="/127.0.0.1",
    )


def _commit(offset: int) -> pb.ForwardRequest:
    partition = {
        "partition_index": 0,
        "committed_offset": offset,
        "committed_leader_epoch": -1,
        "committed_metadata": "",
    }
    return _request(
        ApiKey.OFFSET_COMMIT,
        8,
        {
            "group_id": GROUP,
            "generation_id_or_member_epoch": -1,  # a "simple" commit: no group membership
            "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [partition]}],
        },
    )


async def _fetched(service: GroupCoordinatorService) -> int:
    request = _request(
        ApiKey.OFFSET_FETCH,
        5,
        {"group_id": GROUP, "topics": [{"name": "t", "partition_indexes": [0]}]},
    )
    got = await service.Forward(request, None)  # type: ignore[arg-type]
    response, _ = decode_response_body(ApiKey.OFFSET_FETCH, 5, got.response)
    return int(response["topics"][0]["partitions"][0]["committed_offset"])


def _service(store: _GatedStore) -> tuple[GroupCoordinatorService, CoordinatorMetrics]:
    metrics = CoordinatorMetrics(CollectorRegistry())
    return GroupCoordinatorService(_OneShard(store), metrics), metrics


async def test_a_commit_whose_rpc_is_cancelled_is_still_applied() -> None:
    store = _GatedStore()
    service, metrics = _service(store)
    rpc = asyncio.create_task(service.Forward(_commit(42), None))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)  # the append is under way
    rpc.cancel()
    with pytest.raises(asyncio.CancelledError):
        await rpc
    store.gate.set()  # the append succeeds after the caller went away
    await service.drain(5)
    assert len(store.appended) == 1
    assert await _fetched(service) == 42  # in the log and in memory, never only one of them
    observed = metrics.registry.get_sample_value(
        "kafka_network_requestmetrics_totaltimems_count", {"request": "OffsetCommit"}
    )
    assert observed == 1


async def test_drain_waits_for_requests_whose_rpc_was_cancelled() -> None:
    store = _GatedStore()
    service, _ = _service(store)
    rpc = asyncio.create_task(service.Forward(_commit(7), None))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    rpc.cancel()
    await asyncio.gather(rpc, return_exceptions=True)
    await service.drain(0.05)  # bounded: the append is still blocked
    assert store.appended == []
    asyncio.get_running_loop().call_later(0.05, store.gate.set)
    await service.drain(5)
    assert len(store.appended) == 1


@pytest.mark.parametrize(
    ("api_key", "version", "body", "code"),
    [
        (ApiKey.PRODUCE, 9, b"", ErrorCode.UNSUPPORTED_VERSION),
        (ApiKey.OFFSET_COMMIT, 9, b"", ErrorCode.UNSUPPORTED_VERSION),  # codec knows it; not served
        (ApiKey.HEARTBEAT, 4, b"\x00", ErrorCode.INVALID_REQUEST),
        (ApiKey.JOIN_GROUP, 5, b"\xff" * 40, ErrorCode.INVALID_REQUEST),
    ],
)
async def test_what_cannot_be_handled_is_refused_with_a_message(
    api_key: int, version: int, body: bytes, code: ErrorCode
) -> None:
    service, _ = _service(_GatedStore())
    request = pb.ForwardRequest(api_key=api_key, api_version=version, request=body)
    got = await service.Forward(request, None)  # type: ignore[arg-type]
    assert got.error_code == code and got.error_message and not got.response


async def test_a_stopping_coordinator_refuses_with_not_coordinator() -> None:
    service, _ = _service(_GatedStore())
    service.accepting = False
    got = await service.Forward(_commit(1), None)  # type: ignore[arg-type]
    assert got.error_code == ErrorCode.NOT_COORDINATOR
