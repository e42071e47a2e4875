"""An in-process GroupCoordinator gRPC server (grpc.aio on 127.0.0.1:0) for gateway tests, and
helpers to register coordinators and a shard map in a metadata cache."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc

from services.common.errors import ErrorCode
from services.common.group_errors import error_response
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey, decode_request_body, encode_response_body
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2 as pb
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2_grpc
from services.common.zk import layout

Answer = Callable[
    [int, int, dict[str, Any]], "dict[str, Any] | pb.ForwardResponse | Awaitable[Any]"
]


def tagged_answer(node_id: int) -> Answer:
    """An all-clear answer that says which coordinator gave it (DescribeGroups: the group state;
    ListGroups: one group ``listed@<id>``; JoinGroup: the generation id). OffsetDelete answers
    every partition."""

    def answer(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        resp = error_response(api_key, version, body, ErrorCode.NONE)
        if api_key == ApiKey.DESCRIBE_GROUPS:
            for g in resp["groups"]:
                g["group_state"] = f"Stable@{node_id}"
        elif api_key == ApiKey.LIST_GROUPS:
            resp["groups"] = [
                {
                    "group_id": f"listed@{node_id}",
                    "protocol_type": "consumer",
                    "group_state": "Stable",
                }
            ]
        elif api_key == ApiKey.JOIN_GROUP:
            resp["generation_id"] = node_id
        elif api_key == ApiKey.OFFSET_DELETE:
            resp["topics"] = [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": q["partition_index"], "error_code": 0}
                        for q in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ]
        return resp

    return answer


class FakeGroupCoordinator(group_coordinator_pb2_grpc.GroupCoordinatorServicer):
    """Records every ForwardRequest; answers through ``answer`` (a response body, or a
    ForwardResponse as is; may be a coroutine)."""

    def __init__(self, node_id: int, answer: Answer | None = None) -> None:
        self.node_id = node_id
        self.answer = answer or tagged_answer(node_id)
        self.calls: list[pb.ForwardRequest] = []
        self.port = 0
        self._server: grpc.aio.Server | None = None

    async def start(self) -> FakeGroupCoordinator:
        self._server = grpc.aio.server()
        group_coordinator_pb2_grpc.add_GroupCoordinatorServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)
            self._server = None

    def bodies(self, api_key: int | None = None) -> list[dict[str, Any]]:
        """The decoded request bodies received (of ``api_key`` only, when given)."""
        return [
            decode_request_body(c.api_key, c.api_version, c.request)[0]
            for c in self.calls
            if api_key is None or c.api_key == api_key
        ]

    async def Forward(  # noqa: N802 - gRPC method name
        self, request: pb.ForwardRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ForwardResponse:
        self.calls.append(request)
        key, version = request.api_key, request.api_version
        body, _ = decode_request_body(key, version, request.request)
        result: Any = self.answer(key, version, body)
        if asyncio.iscoroutine(result):
            result = await result
        if isinstance(result, pb.ForwardResponse):
            return result
        return pb.ForwardResponse(response=encode_response_body(key, version, result))


def register(cache: MetadataCache, *coordinators: FakeGroupCoordinator) -> None:
    for c in coordinators:
        cache.apply_group_coordinator(
            c.node_id, layout.Endpoint(c.node_id, "127.0.0.1", c.port).to_json()
        )


def place(cache: MetadataCache, owners: dict[int, int], partitions: int) -> None:
    """Publish a shard map: partition -> owner id (partitions not in ``owners``: unplaced)."""
    shards = {p: layout.ShardOwner(owner, 1, 1000 + p) for p, owner in owners.items()}
    cache.apply_shard_map(layout.ShardMap(partitions, shards).to_json())


def group_in(partitions: Iterable[int], modulus: int, prefix: str = "grp") -> str:
    """A group id whose ``__consumer_offsets`` partition is one of ``partitions``."""
    wanted = set(partitions)
    for i in range(10_000):
        name = f"{prefix}-{i}"
        if layout.group_partition(name, modulus) in wanted:
            return name
    raise AssertionError("no such group id")
