"""FindCoordinator: __consumer_offsets creation, shard placement, the in-zone gateway answered."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.common.coordinator.clients import CoordinatorClients
from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.protocol import (
    ApiKey,
    decode_response_body,
    encode_response_body,
    message_spec,
)
from services.common.rpc.kafkapy.v1 import controller_pb2 as cpb
from services.common.zk import layout
from services.gateway.context import GatewayServices
from services.gateway.controller_client import ControllerError
from services.gateway.handlers import find_coordinator, metadata

from .fake_group_coordinator import group_in, place
from .fakes import FakeController, add_brokers, add_gateway, add_topic, context, services

NOT_AVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
PARTITIONS = 6
OFFSETS = layout.CONSUMER_OFFSETS_TOPIC


def _cache(*, topic: bool = True) -> MetadataCache:
    cache = MetadataCache()
    for node_id, rack in ((1, "z1"), (2, "z1"), (3, "z2"), (4, "z2")):
        add_gateway(cache, node_id, rack)
    add_brokers(cache, 11)
    if topic:
        add_topic(cache, OFFSETS, {p: [11] for p in range(PARTITIONS)})
    return cache


def _register(cache: MetadataCache, *ids: int) -> None:
    for i in ids:
        cache.apply_group_coordinator(i, layout.Endpoint(i, "127.0.0.1", 7700 + i).to_json())


def _svc(cache: MetadataCache, controller: FakeController | None = None) -> GatewayServices:
    svc = services(cache, controller=controller or FakeController())
    svc.coordinators = CoordinatorClients(cache)
    svc.coordinator_wait_s = 0.0  # answer at once (the wait: test_lookup_waits_*)
    return svc


async def _find(
    svc: GatewayServices, version: int, key: str, key_type: int = 0, client_id: str = "app"
) -> dict[str, Any]:
    req = {"key": key, "key_type": key_type, "coordinator_keys": [key]}
    resp = await find_coordinator.handle(
        context(svc, ApiKey.FIND_COORDINATOR, version, client_id), req
    )
    if version >= 4:
        assert [c["key"] for c in resp["coordinators"]] == [key]
        return dict(resp["coordinators"][0])
    return resp


def _roundtrip(version: int, resp: dict[str, Any]) -> dict[str, Any]:
    data = encode_response_body(ApiKey.FIND_COORDINATOR, version, resp)
    return decode_response_body(ApiKey.FIND_COORDINATOR, version, data)[0]


@pytest.mark.parametrize("version", range(5))
async def test_missing_offsets_topic_is_created_once(version: int) -> None:
    release = asyncio.Event()

    async def controller(method: str, request: Any) -> Any:
        await release.wait()
        return cpb.CreateInternalTopicResponse()

    fake = FakeController(controller)
    svc = _svc(_cache(topic=False), fake)
    answers = [await _find(svc, version, f"g{i}") for i in range(3)]
    assert [a["error_code"] for a in answers] == [NOT_AVAILABLE] * 3
    assert all(a["node_id"] == -1 and a["host"] == "" and a["port"] == -1 for a in answers)
    if 1 <= version <= 3:
        assert answers[0]["error_message"] == "The coordinator is not available."
    elif version == 4:
        assert answers[0]["error_message"] is None  # Kafka sets none on per-key lookups
    await asyncio.sleep(0)
    assert fake.requests == [("CreateInternalTopic", cpb.CreateInternalTopicRequest(name=OFFSETS))]
    release.set()
    await svc.wait_background(1.0)
    await _find(svc, version, "g")  # the call is over: the next lookup asks again
    await asyncio.sleep(0)
    assert len(fake.requests) == 2
    release.set()
    await svc.wait_background(1.0)


async def test_failed_creation_is_logged_not_raised() -> None:
    async def controller(method: str, request: Any) -> Any:
        raise ControllerError("CreateInternalTopic: INTERNAL boom")

    fake = FakeController(controller)
    svc = _svc(_cache(topic=False), fake)
    assert (await _find(svc, 3, "g"))["error_code"] == NOT_AVAILABLE
    await svc.wait_background(1.0)
    assert svc.offsets_topic_creation is not None and svc.offsets_topic_creation.done()
    assert (await _find(svc, 3, "g"))["error_code"] == NOT_AVAILABLE
    await svc.wait_background(1.0)
    assert len(fake.requests) == 2


async def test_unplaced_shard_or_unregistered_owner() -> None:
    cache = _cache()
    svc = _svc(cache)
    assert (await _find(svc, 2, "g"))["error_code"] == NOT_AVAILABLE  # no shard map yet
    group = group_in([0], PARTITIONS)
    place(cache, {p: 7 for p in range(1, PARTITIONS)}, PARTITIONS)
    _register(cache, 7)
    assert (await _find(svc, 2, group))["error_code"] == NOT_AVAILABLE  # shard 0 unplaced
    place(cache, {p: 8 for p in range(PARTITIONS)}, PARTITIONS)
    assert (await _find(svc, 2, group))["error_code"] == NOT_AVAILABLE  # 8 not registered
    _register(cache, 8)
    assert (await _find(svc, 2, group))["error_code"] == 0
    assert not svc.controller.requests  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", range(5))
async def test_answers_the_gateway_routing_leads_the_shard_with(version: int) -> None:
    cache = _cache()
    place(cache, {p: 5 for p in range(PARTITIONS)}, PARTITIONS)
    _register(cache, 5)
    svc = _svc(cache)
    md = await metadata.handle(
        context(svc, ApiKey.METADATA, 12, "app;zone=z2"),
        {"topics": [{"name": OFFSETS, "topic_id": None}]},
    )
    leaders = {p["partition_index"]: p["leader_id"] for p in md["topics"][0]["partitions"]}
    seen = set()
    for p in range(PARTITIONS):
        group = group_in([p], PARTITIONS, prefix=f"v{version}")
        answer = await _find(svc, version, group, client_id="app;zone=z2")
        assert answer["error_code"] == 0
        assert answer["node_id"] == leaders[p]
        assert answer["node_id"] in (3, 4)  # the client's zone
        assert (answer["host"], answer["port"]) == ("127.0.0.1", 9000 + answer["node_id"])
        seen.add(answer["node_id"])
        _roundtrip(
            version,
            await find_coordinator.handle(
                context(svc, ApiKey.FIND_COORDINATOR, version),
                {"key": group, "key_type": 0, "coordinator_keys": [group]},
            ),
        )
    assert seen == {3, 4}  # spread over the zone's gateways
    # no zone hint: the connected gateway's zone (z1)
    assert (await _find(svc, version, "some-group"))["node_id"] in (1, 2)


async def test_empty_group_id_is_a_group_like_any_other() -> None:
    cache = _cache()
    place(cache, {0: 5}, PARTITIONS)  # only partition 0: "" hashes to 0, as in Kafka
    _register(cache, 5)
    svc = _svc(cache)
    assert (await _find(svc, 3, ""))["error_code"] == 0
    assert (await _find(svc, 4, ""))["error_code"] == 0


@pytest.mark.parametrize("version", range(1, 5))
async def test_transaction_key_type_and_unknown_key_types(version: int) -> None:
    async def controller(method: str, request: Any) -> Any:
        return cpb.CreateInternalTopicResponse()

    cache = _cache()
    fake = FakeController(controller)
    svc = _svc(cache, fake)
    svc.txn_coordinators = CoordinatorClients(cache, layout.TRANSACTION)
    # no __transaction_state yet: retriable, and the controller is asked to create it
    txn = await _find(svc, version, "txn-1", key_type=1)
    assert txn["error_code"] == NOT_AVAILABLE and txn["node_id"] == -1
    await svc.wait_background(1.0)
    assert fake.requests == [
        ("CreateInternalTopic", cpb.CreateInternalTopicRequest(name=layout.TRANSACTION_STATE_TOPIC))
    ]
    add_topic(cache, layout.TRANSACTION_STATE_TOPIC, {p: [11] for p in range(PARTITIONS)})
    assert (await _find(svc, version, "txn-1", key_type=1))["error_code"] == NOT_AVAILABLE
    shards = {p: layout.ShardOwner(7, 1, 2000 + p) for p in range(PARTITIONS)}
    cache.apply_shard_map(layout.ShardMap(PARTITIONS, shards).to_json(), layout.TRANSACTION)
    cache.apply_transaction_coordinator(7, layout.Endpoint(7, "127.0.0.1", 7707).to_json())
    txn = await _find(svc, version, "txn-1", key_type=1)
    assert txn["error_code"] == 0 and txn["node_id"] in (1, 2, 3, 4)  # a gateway
    # the group coordinators' map does not serve transactional ids, and "" is no id
    assert (await _find(svc, version, "", key_type=1))["error_code"] == ErrorCode.INVALID_REQUEST
    bad = await _find(svc, version, "g", key_type=2)
    assert bad["error_code"] == ErrorCode.INVALID_REQUEST and bad["node_id"] == -1
    assert bad["error_message"] == find_coordinator.MESSAGES[ErrorCode.INVALID_REQUEST]


async def test_v4_batch_answers_every_key_in_order() -> None:
    cache = _cache()
    placed = group_in([1], PARTITIONS, prefix="placed")
    unplaced = group_in([2], PARTITIONS, prefix="unplaced")
    place(cache, {1: 5}, PARTITIONS)
    _register(cache, 5)
    svc = _svc(cache)
    req = {"key_type": 0, "coordinator_keys": [placed, unplaced, placed]}
    resp = await find_coordinator.handle(context(svc, ApiKey.FIND_COORDINATOR, 4), req)
    got = [(c["key"], c["error_code"]) for c in _roundtrip(4, resp)["coordinators"]]
    assert got == [(placed, 0), (unplaced, NOT_AVAILABLE), (placed, 0)]
    empty = await find_coordinator.handle(
        context(svc, ApiKey.FIND_COORDINATOR, 4), {"key_type": 0, "coordinator_keys": []}
    )
    assert empty["coordinators"] == []


@pytest.mark.parametrize("version", range(5))
def test_error_response_shape(version: int) -> None:
    req = {"key": "g", "key_type": 0, "coordinator_keys": ["a", "b"]}
    resp = find_coordinator.error_response(req, version, ErrorCode.UNKNOWN_SERVER_ERROR)
    spec = message_spec(ApiKey.FIND_COORDINATOR, version, "response")
    assert set(resp) == set(spec.field_names)
    decoded = _roundtrip(version, resp)
    if version >= 4:
        assert [(c["key"], c["error_code"]) for c in decoded["coordinators"]] == [
            ("a", -1),
            ("b", -1),
        ]
    else:
        assert decoded["error_code"] == -1 and decoded["node_id"] == -1


@pytest.mark.parametrize("version", [2, 4])
async def test_lookup_waits_for_the_coordinator_being_placed(version: int) -> None:
    """On a fresh cluster the first lookup waits for the shard's placement instead of
    answering COORDINATOR_NOT_AVAILABLE (librdkafka's admin client gives up retrying those
    after ~0.3 s and then never sends its request: issue 19)."""
    cache = _cache()
    svc = _svc(cache)
    svc.coordinator_wait_s = 5.0
    group = group_in([0], PARTITIONS)
    lookup = asyncio.ensure_future(_find(svc, version, group))
    await asyncio.sleep(0.05)
    assert not lookup.done()
    place(cache, {p: 7 for p in range(PARTITIONS)}, PARTITIONS)
    _register(cache, 7)
    answer = await asyncio.wait_for(lookup, 1.0)
    assert answer["error_code"] == 0 and answer["node_id"] in (1, 2, 3, 4)


async def test_lookup_wait_is_bounded() -> None:
    svc = _svc(_cache())
    svc.coordinator_wait_s = 0.2
    loop = asyncio.get_running_loop()
    started = loop.time()
    answer = await _find(svc, 4, "g")
    assert answer["error_code"] == NOT_AVAILABLE and answer["node_id"] == -1
    assert 0.2 <= loop.time() - started < 2.0
