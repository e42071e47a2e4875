"""ControllerClient: follows the active controller, re-sends NOT_CONTROLLER items, times out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.rpc.kafkapy.v1 import controller_pb2 as cpb
from services.common.rpc.kafkapy.v1 import controller_pb2_grpc
from services.common.zk import layout
from services.common.zk.server import free_port
from services.gateway.controller_client import ControllerClient


class Controller(controller_pb2_grpc.ControllerServicer):
    def __init__(self, active: bool) -> None:
        self.active = active
        self.seen: list[list[str]] = []

    async def CreateTopics(self, request: Any, context: Any) -> Any:  # noqa: N802
        names = [t.name for t in request.topics]
        self.seen.append(names)
        code = 0 if self.active else ErrorCode.NOT_CONTROLLER
        return cpb.CreateTopicsResponse(
            topics=[cpb.TopicResult(name=n, error_code=code) for n in names]
        )

    async def CreateInternalTopic(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append([request.name])
        code = 0 if self.active else ErrorCode.NOT_CONTROLLER
        return cpb.CreateInternalTopicResponse(error_code=code)


@pytest.fixture
async def controllers() -> AsyncIterator[tuple[MetadataCache, Controller, Controller]]:
    cache = MetadataCache()
    servers = []
    impls = [Controller(active=False), Controller(active=True)]
    for cid, impl in enumerate(impls, start=1):
        server = grpc.aio.server()
        controller_pb2_grpc.add_ControllerServicer_to_server(impl, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        cache.apply_controller_endpoint(cid, layout.Endpoint(cid, "127.0.0.1", port).to_json())
    yield cache, impls[0], impls[1]
    for server in servers:
        await server.stop(None)


def _request(items: Any) -> Any:
    return cpb.CreateTopicsRequest(topics=[cpb.TopicSpec(name=n) for n in items])


async def _create(client: ControllerClient, names: list[str], within_s: float) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + within_s
    return await client.call_items(
        "CreateTopics", names, _request, lambda n: n, lambda r: r.topics, lambda r: r.name, deadline
    )


async def test_not_controller_items_follow_the_new_controller(
    controllers: tuple[MetadataCache, Controller, Controller],
) -> None:
    cache, standby, active = controllers
    cache.apply_controller(layout.controller_json(1))  # stale: 1 is a standby
    client = ControllerClient(cache)
    loop = asyncio.get_running_loop()
    loop.call_later(0.1, cache.apply_controller, layout.controller_json(2))
    try:
        out = await _create(client, ["a", "b"], 5.0)
    finally:
        await client.close()
    assert {n: r.error_code for n, r in out.items()} == {"a": 0, "b": 0}
    assert standby.seen and active.seen == [["a", "b"]]


async def test_waits_for_a_controller_to_be_known(
    controllers: tuple[MetadataCache, Controller, Controller],
) -> None:
    cache, _, active = controllers
    client = ControllerClient(cache)
    asyncio.get_running_loop().call_later(0.1, cache.apply_controller, layout.controller_json(2))
    try:
        out = await _create(client, ["x"], 5.0)
    finally:
        await client.close()
    assert out["x"].error_code == 0 and active.seen == [["x"]]


async def test_unreachable_controller_times_out() -> None:
    cache = MetadataCache()
    cache.apply_controller_endpoint(3, layout.Endpoint(3, "127.0.0.1", free_port()).to_json())
    cache.apply_controller(layout.controller_json(3))
    client = ControllerClient(cache)
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        out = await _create(client, ["x"], 0.5)
    finally:
        await client.close()
    assert out == {} and 0.4 < loop.time() - start < 2.0


async def test_create_internal_topic_follows_the_new_controller(
    controllers: tuple[MetadataCache, Controller, Controller],
) -> None:
    cache, standby, active = controllers
    cache.apply_controller(layout.controller_json(1))  # stale: 1 is a standby
    client = ControllerClient(cache)
    loop = asyncio.get_running_loop()
    loop.call_later(0.1, cache.apply_controller, layout.controller_json(2))
    try:
        resp = await client.create_internal_topic("__consumer_offsets", loop.time() + 5.0)
    finally:
        await client.close()
    assert resp.error_code == 0
    assert standby.seen and {tuple(s) for s in standby.seen} == {("__consumer_offsets",)}
    assert active.seen == [["__consumer_offsets"]]


async def test_create_internal_topic_times_out_on_a_standby(
    controllers: tuple[MetadataCache, Controller, Controller],
) -> None:
    cache, standby, active = controllers
    cache.apply_controller(layout.controller_json(1))  # never moves to the active one
    client = ControllerClient(cache)
    loop = asyncio.get_running_loop()
    try:
        with pytest.raises(TimeoutError):
            await client.create_internal_topic("__consumer_offsets", loop.time() + 0.3)
    finally:
        await client.close()
    assert standby.seen and not active.seen
