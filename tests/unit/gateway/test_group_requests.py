"""FindCoordinator and the forwarding of group requests, with a real GroupCoordinator gRPC
service (the coordinator's own request handling over in-memory shards) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from services.common.coordinator.clients import CoordinatorClients
from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey, message_spec
from services.common.rpc.kafkapy.v1 import controller_pb2 as cpb
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2_grpc
from services.common.zk import layout
from services.common.zk.layout import ShardMap, ShardOwner, group_partition
from services.gateway.context import GatewayServices
from services.gateway.handlers import HANDLERS
from services.group_coordinator.config import GroupConfig
from services.group_coordinator.groups import GroupShard
from services.group_coordinator.metrics import CoordinatorMetrics
from services.group_coordinator.server import GroupCoordinatorService

from .fakes import FakeController, add_gateway, add_topic, context, services

PARTITIONS = 4


class _MemoryStore:
    async def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        return None


class _Shards:
    """One coordinator's shards, all loaded, over an in-memory store."""

    def __init__(self, owned: set[int]) -> None:
        config = GroupConfig(group_min_session_timeout_ms=10, group_initial_rebalance_delay_ms=0)
        self._shards = {p: GroupShard(p, _MemoryStore(), config, coordinator_id=0) for p in owned}

    def partition_of(self, group_id: str) -> int:
        return group_partition(group_id, PARTITIONS)

    def shard(self, partition: int | None) -> Any:
        return self._shards.get(partition, ErrorCode.NOT_COORDINATOR)  # type: ignore[arg-type]

    def loaded_shards(self) -> list[GroupShard]:
        return list(self._shards.values())

    async def settle(self, group_ids: list[str], timeout_s: float) -> None:
        return None


def _groups_on(partitions: set[int], count: int) -> list[str]:
    out, i = [], 0
    while len(out) < count:
        g = f"group-{i}"
        if group_partition(g, PARTITIONS) in partitions:
            out.append(g)
        i += 1
    return out


async def _serve(shards: _Shards) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    metrics = CoordinatorMetrics(registry=CollectorRegistry())
    group_coordinator_pb2_grpc.add_GroupCoordinatorServicer_to_server(
        GroupCoordinatorService(shards, metrics), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


@pytest.fixture
async def cluster() -> AsyncIterator[GatewayServices]:
    """Coordinator 0 owns shards 0-1, coordinator 1 shards 2-3; gateways 1 (z1) and 2 (z2)."""
    servers = []
    cache = MetadataCache()
    add_gateway(cache, 1, "z1")
    add_gateway(cache, 2, "z2")
    add_topic(cache, layout.CONSUMER_OFFSETS_TOPIC, {p: [11] for p in range(PARTITIONS)})
    add_topic(cache, "t", {0: [11], 1: [11]})
    for node, owned in ((0, {0, 1}), (1, {2, 3})):
        server, port = await _serve(_Shards(owned))
        servers.append(server)
        cache.apply_group_coordinator(node, layout.Endpoint(node, "127.0.0.1", port).to_json())
    cache.apply_shard_map(
        ShardMap(
            PARTITIONS, {p: ShardOwner(0 if p < 2 else 1, 0, 100 + p) for p in range(PARTITIONS)}
        ).to_json()
    )
    svc = services(cache)
    svc.coordinators = CoordinatorClients(cache)
    try:
        yield svc
    finally:
        await svc.coordinators.close()
        for server in servers:
            await server.stop(None)


async def call(svc: GatewayServices, key: int, version: int, body: dict[str, Any],
               client_id: str = "test") -> dict[str, Any]:  # fmt: skip
    resp = await HANDLERS[key].handle(context(svc, key, version, client_id), body)
    assert resp is not None
    return resp


async def test_find_coordinator_answers_an_in_zone_gateway(cluster: GatewayServices) -> None:
    answers = set()
    for g in _groups_on({0, 1, 2, 3}, 8):
        r = await call(cluster, ApiKey.FIND_COORDINATOR, 3, {"key": g, "key_type": 0})
        assert r["error_code"] == 0 and r["host"] == "127.0.0.1"
        answers.add(r["node_id"])
        z2 = await call(cluster, ApiKey.FIND_COORDINATOR, 3, {"key": g, "key_type": 0}, "a;zone=z2")
        assert z2["node_id"] == 2  # the only gateway in the client's zone
    assert answers == {1}  # the connected gateway's zone (z1) has one gateway
    batch = await call(
        cluster, ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]}
    )
    assert [c["key"] for c in batch["coordinators"]] == ["a", "b"]
    assert all(c["error_code"] == 0 for c in batch["coordinators"])
    bad = await call(cluster, ApiKey.FIND_COORDINATOR, 3, {"key": "x", "key_type": 7})
    assert bad["error_code"] == ErrorCode.INVALID_REQUEST


async def test_find_coordinator_creates_the_offsets_topic_once() -> None:
    calls: list[str] = []

    async def controller(method: str, request: Any) -> Any:
        calls.append(method)
        return cpb.CreateInternalTopicResponse()

    cache = MetadataCache()
    add_gateway(cache, 1, "z1")
    svc = services(cache, controller=FakeController(controller))
    svc.coordinators = CoordinatorClients(cache)
    svc.coordinator_wait_s = 0.0  # answer at once (the wait: test_find_coordinator.py)
    for _ in range(3):
        r = await call(svc, ApiKey.FIND_COORDINATOR, 2, {"key": "g", "key_type": 0})
        assert r["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert svc.offsets_topic_creation is not None
    await svc.offsets_topic_creation
    assert calls == ["CreateInternalTopic"]
    # topic there, shard map not yet: still not available
    add_topic(cache, layout.CONSUMER_OFFSETS_TOPIC, {0: [11]})
    r = await call(svc, ApiKey.FIND_COORDINATOR, 2, {"key": "g", "key_type": 0})
    assert r["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    await svc.coordinators.close()


async def test_offsets_round_trip_through_the_coordinator(cluster: GatewayServices) -> None:
    g = _groups_on({3}, 1)[0]
    commit = {
        "group_id": g, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "retention_time": -1,
        "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 42,
                                          "committed_leader_epoch": -1,
                                          "committed_metadata": "m"}]},
            {"name": "missing", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                "committed_leader_epoch": -1,
                                                "committed_metadata": ""}]},
        ],
    }  # fmt: skip
    r = await call(cluster, ApiKey.OFFSET_COMMIT, 8, commit)
    errors = {t["name"]: t["partitions"][0]["error_code"] for t in r["topics"]}
    assert errors == {"t": 0, "missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    f = await call(cluster, ApiKey.OFFSET_FETCH, 7,
                   {"group_id": g, "topics": None, "require_stable": False})  # fmt: skip
    assert f["error_code"] == 0
    assert [(t["name"], t["partitions"][0]["committed_offset"]) for t in f["topics"]] == [("t", 42)]


async def test_multi_group_requests_are_split_and_merged_in_order(
    cluster: GatewayServices,
) -> None:
    a, b = _groups_on({0}, 1)[0], _groups_on({2}, 1)[0]
    for g, offset in ((a, 1), (b, 2)):
        await call(cluster, ApiKey.OFFSET_COMMIT, 8, {
            "group_id": g, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                {"partition_index": 1, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})  # fmt: skip
    r = await call(cluster, ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": b, "topics": None}, {"group_id": a, "topics": None}],
        "require_stable": False})  # fmt: skip
    assert [(x["group_id"], x["topics"][0]["partitions"][0]["committed_offset"])
            for x in r["groups"]] == [(b, 2), (a, 1)]  # fmt: skip
    d = await call(cluster, ApiKey.DESCRIBE_GROUPS, 5,
                   {"groups": [b, a], "include_authorized_operations": False})  # fmt: skip
    assert [x["group_id"] for x in d["groups"]] == [b, a]
    assert all(x["group_state"] == "Empty" for x in d["groups"])
    listed = await call(cluster, ApiKey.LIST_GROUPS, 4, {"states_filter": []})
    assert listed["error_code"] == 0
    assert {x["group_id"] for x in listed["groups"]} == {a, b}
    deleted = await call(cluster, ApiKey.DELETE_GROUPS, 2, {"groups_names": [a, b, "nope"]})
    assert [(x["group_id"], x["error_code"]) for x in deleted["results"]] == [
        (a, 0),
        (b, 0),
        ("nope", ErrorCode.GROUP_ID_NOT_FOUND),
    ]


async def test_an_unreachable_coordinator_answers_not_coordinator_in_every_shape(
    cluster: GatewayServices,
) -> None:
    cluster.cache.apply_group_coordinator(1, layout.Endpoint(1, "127.0.0.1", 1).to_json())
    g = _groups_on({2}, 1)[0]
    requests: dict[int, tuple[int, dict[str, Any]]] = {
        ApiKey.HEARTBEAT: (4, {"group_id": g, "generation_id": 1, "member_id": "m",
                               "group_instance_id": None}),
        ApiKey.JOIN_GROUP: (9, {"group_id": g, "session_timeout": 10000, "rebalance_timeout": 100,
                                "member_id": "", "group_instance_id": None,
                                "protocol_type": "consumer", "protocols": [], "reason": None}),
        ApiKey.DESCRIBE_GROUPS: (5, {"groups": [g], "include_authorized_operations": False}),
    }  # fmt: skip
    for key, (version, body) in requests.items():
        r = await call(cluster, key, version, body)
        codes = [r.get("error_code")] + [x.get("error_code") for x in r.get("groups", [])]
        assert ErrorCode.NOT_COORDINATOR in codes, (key, r)
        spec = message_spec(key, version, "response")
        assert set(r) <= set(spec.field_names), (key, set(r) - set(spec.field_names))
    listed = await call(cluster, ApiKey.LIST_GROUPS, 4, {"states_filter": []})
    assert listed["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE, listed


async def test_an_unplaced_shard_is_not_available(cluster: GatewayServices) -> None:
    cluster.cache.apply_group_coordinator(1, None)  # its shards' owner is gone
    cluster.coordinator_wait_s = 0.0  # FindCoordinator answers at once
    g = _groups_on({3}, 1)[0]
    r = await call(cluster, ApiKey.FIND_COORDINATOR, 3, {"key": g, "key_type": 0})
    assert r["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    hb = await call(
        cluster,
        ApiKey.HEARTBEAT,
        4,
        {"group_id": g, "generation_id": 1, "member_id": "m", "group_instance_id": None},
    )
    assert hb["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
