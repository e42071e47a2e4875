"""Routing group (transaction) requests to the group (transaction) coordinator that owns the
group's (transactional id's) shard.

A group lives in ``__consumer_offsets`` partition ``abs(javaHashCode(group)) % partitions``, a
transactional id in ``__transaction_state`` partition ``abs(javaHashCode(id)) % partitions``;
the controller's shard map of that kind names the coordinator serving that partition. Requests
travel as Kafka request bodies inside ``GroupCoordinator.Forward`` /
``TransactionCoordinator.Forward`` (KIP-590's Envelope, in spirit).

Failures, as clients expect them: a shard not placed (or placed on a coordinator that is not
registered) is COORDINATOR_NOT_AVAILABLE; a coordinator that cannot be reached, or that does not
answer before the deadline, is NOT_COORDINATOR - the one error every group API's client handles
by looking the coordinator up again (Java's consumer treats e.g. REQUEST_TIMED_OUT on JoinGroup,
SyncGroup or Heartbeat as fatal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ProtocolError, decode_response_body, encode_request_body
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2 as pb
from services.common.rpc.kafkapy.v1 import (
    group_coordinator_pb2_grpc,
    transaction_coordinator_pb2_grpc,
)
from services.common.storage_client import ChannelPool
from services.common.zk.layout import GROUP, TRANSACTION, CoordinatorKind, shard_of

log = get_logger("coordinator.clients")


@dataclass(frozen=True, slots=True)
class Route:
    """Where a group's requests go: its shard and the owning coordinator (or why not)."""

    partition: int
    coordinator: int
    error: ErrorCode = ErrorCode.NONE


class ForwardError(Exception):
    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


_STUBS = {
    GROUP: group_coordinator_pb2_grpc.GroupCoordinatorStub,
    TRANSACTION: transaction_coordinator_pb2_grpc.TransactionCoordinatorStub,
}


class CoordinatorClients(ChannelPool[Any]):
    """Coordinator stubs of one kind by coordinator id, plus the key -> coordinator routing."""

    def __init__(self, cache: MetadataCache, kind: CoordinatorKind = GROUP) -> None:
        def address_of(node_id: int) -> str | None:
            ep = cache.coordinators(kind).get(node_id)
            return ep.address if ep is not None else None

        super().__init__(address_of, _STUBS[kind])
        self._cache = cache
        self.kind = kind

    def route(self, key: str) -> Route:
        """COORDINATOR_NOT_AVAILABLE until the shard is placed on a registered coordinator."""
        shard_map = self._cache.shard_map_of(self.kind)
        if shard_map is None or shard_map.partitions <= 0:
            return Route(-1, -1, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        p = shard_of(key, shard_map.partitions)
        owner = shard_map.shards.get(p)
        if owner is None or owner.owner not in self._cache.coordinators(self.kind):
            return Route(p, -1, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return Route(p, owner.owner)

    async def forward(
        self,
        coordinator: int,
        api_key: int,
        api_version: int,
        body: Mapping[str, Any],
        *,
        client_id: str,
        client_host: str,
        timeout_s: float,
    ) -> dict[str, Any]:
        """The coordinator's response body; ForwardError when there is none (NOT_COORDINATOR
        when the coordinator cannot be reached: clients then look it up again)."""
        stub = self.stub(coordinator)
        if stub is None:
            raise ForwardError(ErrorCode.NOT_COORDINATOR, f"coordinator {coordinator} is gone")
        request = pb.ForwardRequest(
            api_key=api_key,
            api_version=api_version,
            request=encode_request_body(api_key, api_version, body),
            client_id=client_id,
            client_host=client_host,
        )
        try:
            response = await stub.Forward(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            log.info("forward_failed", coordinator=coordinator, api_key=api_key, status=code.name)
            raise ForwardError(ErrorCode.NOT_COORDINATOR, code.name) from None
        if response.error_code:
            raise ForwardError(_code(response.error_code), response.error_message)
        try:
            return decode_response_body(api_key, api_version, response.response)[0]
        except ProtocolError as exc:
            log.error(
                "forward_bad_response",
                coordinator=coordinator,
                api_key=api_key,
                api_version=api_version,
                error=str(exc),
            )
            raise ForwardError(ErrorCode.UNKNOWN_SERVER_ERROR, "malformed response") from None


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
