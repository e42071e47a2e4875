"""The ``GroupCoordinator`` gRPC service: Kafka request bodies forwarded by gateways.

A request the coordinator cannot handle at all (an API or version it does not serve, a body
that does not decode) is answered with ``ForwardResponse.error_code`` and a message; everything
else is answered inside the Kafka response (per group / partition / member errors), as a broker
would. JoinGroup may wait up to the rebalance timeout: no server-side deadline is imposed.

A request runs in its own task, shielded from the RPC: if the gateway cancels the call (its
client went away or timed out), the request still completes and only its answer is dropped, as
in Kafka when a connection drops. A pending JoinGroup member simply stays pending, and a commit
whose append is under way is still applied (never "in the log but not in memory").
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import grpc

from services.common.errors import ErrorCode
from services.common.group_errors import GROUP_API_NAMES
from services.common.logging import get_logger
from services.common.protocol import (
    ApiKey,
    ProtocolError,
    decode_request_body,
    encode_response_body,
)
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2 as pb
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2_grpc
from services.group_coordinator import api
from services.group_coordinator.metrics import CoordinatorMetrics

log = get_logger("group_coordinator.server")


# How long a request waits for its group's shard to be taken and loaded (see ShardManager.settle).
SETTLE_TIMEOUT_S = 5.0


def group_ids(api_key: int, body: dict[str, Any]) -> list[str]:
    """The groups a request names."""
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return [str(g) for g in body.get("groups") or ()]
    if api_key == ApiKey.DELETE_GROUPS:
        return [str(g) for g in body.get("groups_names") or ()]
    if api_key == ApiKey.OFFSET_FETCH and "groups" in body and "group_id" not in body:
        return [str(g.get("group_id", "")) for g in body.get("groups") or ()]
    group = body.get("group_id")
    return [group] if isinstance(group, str) and group else []


class ShardSettler(api.ShardLookup, Protocol):
    async def settle(self, group_ids: list[str], timeout_s: float) -> None: ...


class GroupCoordinatorService(group_coordinator_pb2_grpc.GroupCoordinatorServicer):
    def __init__(self, shards: ShardSettler, metrics: CoordinatorMetrics) -> None:
        self._shards = shards
        self._metrics = metrics
        self.accepting = True
        self._inflight: set[asyncio.Task[bytes]] = set()

    async def Forward(  # noqa: N802 - gRPC method name
        self, request: pb.ForwardRequest, context: grpc.aio.ServicerContext
    ) -> pb.ForwardResponse:
        key, version = request.api_key, request.api_version
        if not self.accepting:
            return _refused(ErrorCode.NOT_COORDINATOR, "the coordinator is shutting down")
        if not api.supports(key, version):
            return _refused(
                ErrorCode.UNSUPPORTED_VERSION, f"api key {key} version {version} is not served"
            )
        try:
            body, _ = decode_request_body(key, version, request.request)
        except ProtocolError as exc:
            log.warning("forwarded_request_malformed", api_key=key, api_version=version)
            return _refused(ErrorCode.INVALID_REQUEST, f"malformed request body: {exc}")
        task = asyncio.get_running_loop().create_task(
            self._answer(key, version, body, request.client_id, request.client_host),
            name=f"forward-{GROUP_API_NAMES[ApiKey(key)]}",
        )
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        try:
            encoded = await asyncio.shield(task)
        except asyncio.CancelledError:
            log.debug("forwarded_request_cancelled", api_key=key, api_version=version)
            raise
        return pb.ForwardResponse(error_code=0, response=encoded)

    async def _answer(
        self, key: int, version: int, body: dict[str, Any], client_id: str, client_host: str
    ) -> bytes:
        started = time.monotonic()
        await self._shards.settle(group_ids(key, body), SETTLE_TIMEOUT_S)
        response = await api.handle(
            self._shards, key, version, body, client_id=client_id, client_host=client_host
        )
        self._metrics.request_ms.labels(GROUP_API_NAMES[ApiKey(key)]).observe(
            (time.monotonic() - started) * 1000
        )
        try:
            return encode_response_body(key, version, response)
        except Exception:  # noqa: BLE001 - a handler bug must not fail the RPC
            log.exception("response_encoding_failed", api_key=key, api_version=version)
            return encode_response_body(
                key, version, api.error_response(key, version, body, ErrorCode.UNKNOWN_SERVER_ERROR)
            )

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for requests still running, including those whose RPC
        was cancelled."""
        if self._inflight and timeout_s > 0:
            await asyncio.wait(set(self._inflight), timeout=timeout_s)


def _refused(code: ErrorCode, message: str) -> pb.ForwardResponse:
    return pb.ForwardResponse(error_code=int(code), error_message=message)
