"""The ``GroupCoordinator`` gRPC service: the group APIs (``api``) behind common's
``ForwardService`` (see there for the forwarding rules)."""

from __future__ import annotations

from typing import Any, Protocol

from services.common.coordinator.forward import Body, ForwardedApis, ForwardService
from services.common.group_errors import GROUP_API_NAMES
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2_grpc
from services.group_coordinator import api
from services.group_coordinator.metrics import CoordinatorMetrics


def group_ids(api_key: int, body: dict[str, Any]) -> list[str]:
    """The groups a request names."""
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return [str(g) for g in body.get("groups") or ()]
    if api_key == ApiKey.DELETE_GROUPS:
        return [str(g) for g in body.get("groups_names") or ()]
    if api_key == ApiKey.OFFSET_FETCH and "groups" in body and "group_id" not in body:
        return [str(g.get("group_id", "")) for g in body.get("groups") or ()]
    if api_key == ApiKey.WRITE_TXN_MARKERS:
        return []  # names partitions, not groups
    group = body.get("group_id")
    return [group] if isinstance(group, str) and group else []


class ShardSettler(api.ShardLookup, Protocol):
    async def settle(self, keys: list[str], timeout_s: float) -> None: ...


class GroupCoordinatorService(ForwardService, group_coordinator_pb2_grpc.GroupCoordinatorServicer):
    def __init__(self, shards: ShardSettler, metrics: CoordinatorMetrics) -> None:
        async def handle(key: int, version: int, body: Body, client_id: str, host: str) -> Body:
            return await api.handle(
                shards, key, version, body, client_id=client_id, client_host=host
            )

        apis = ForwardedApis(
            names={int(k): v for k, v in GROUP_API_NAMES.items()},
            supports=api.supports,
            handle=handle,
            error_response=api.error_response,
            keys=group_ids,
        )
        super().__init__(shards, apis, metrics.request_ms)
