"""The ``Forward`` RPC of a coordinator: Kafka request bodies forwarded by gateways.

A request the coordinator cannot handle at all (an API or version it does not serve, a body
that does not decode) is answered with ``ForwardResponse.error_code`` and a message; everything
else is answered inside the Kafka response (per key / partition / member errors), as a broker
would. No server-side deadline is imposed (JoinGroup may wait a whole rebalance).

A request runs in its own task, shielded from the RPC: if the gateway cancels the call (its
client went away or timed out), the request still completes and only its answer is dropped, as
in Kafka when a connection drops (a write under way is still applied, never "in the log but not
in memory").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from prometheus_client import Histogram

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ProtocolError, decode_request_body, encode_response_body
from services.common.protocol.schema import EntitySpec
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2 as pb

log = get_logger("coordinator.forward")

# How long a request waits for its key's shard to be taken and loaded (ShardManager.settle).
SETTLE_TIMEOUT_S = 5.0

Body = dict[str, Any]


class Settler(Protocol):
    async def settle(self, keys: list[str], timeout_s: float) -> None: ...


@dataclass(frozen=True, slots=True)
class ForwardedApis:
    """The APIs one kind of coordinator answers."""

    names: Mapping[int, str]  # api key -> name (metric label, task name)
    supports: Callable[[int, int], bool]  # (api key, version)
    handle: Callable[[int, int, Body, str, str], Coroutine[Any, Any, Body]]
    error_response: Callable[[int, int, Body, ErrorCode], Body]
    keys: Callable[[int, Body], list[str]]  # the group / transactional ids a request names


# id(spec) -> (spec, its field names when none of its fields is an entity, else None)
_FLAT_NAMES: dict[int, tuple[EntitySpec, frozenset[str] | None]] = {}


def _flat_names(spec: EntitySpec) -> frozenset[str] | None:
    known = _FLAT_NAMES.get(id(spec))
    if known is None or known[0] is not spec:
        fields = (*spec.fields, *spec.tagged)
        names = (
            None if any(f.entity is not None for f in fields) else frozenset(f.name for f in fields)
        )
        known = _FLAT_NAMES[id(spec)] = (spec, names)
    return known[1]


def fit(spec: EntitySpec, data: Body) -> Body:
    """``data`` cut to the fields of ``spec`` (recursively): responses are built with every
    field any version has, then fitted to the requested version's schema. An array item of
    a flat entity (no nested entities) that has no other field is kept as it is (a response
    with a partition per entry would copy each)."""
    out: Body = {}
    for field in (*spec.fields, *spec.tagged):
        if field.name not in data:
            continue
        value = data[field.name]
        entity = field.entity
        if entity is not None and value is not None:
            if field.array:
                names = _flat_names(entity)
                value = [
                    item if names is not None and item.keys() <= names else fit(entity, item)
                    for item in value
                ]
            else:
                value = fit(entity, value)
        out[field.name] = value
    return out


class ForwardService:
    def __init__(self, shards: Settler, apis: ForwardedApis, request_ms: Histogram) -> None:
        self._shards = shards
        self._apis = apis
        self._request_ms = request_ms
        self.accepting = True
        self._inflight: set[asyncio.Task[bytes]] = set()

    async def Forward(  # noqa: N802 - gRPC method name
        self, request: pb.ForwardRequest, context: grpc.aio.ServicerContext
    ) -> pb.ForwardResponse:
        key, version = request.api_key, request.api_version
        if not self.accepting:
            return _refused(ErrorCode.NOT_COORDINATOR, "the coordinator is shutting down")
        if not self._apis.supports(key, version):
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
            name=f"forward-{self._apis.names[key]}",
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
        self, key: int, version: int, body: Body, client_id: str, client_host: str
    ) -> bytes:
        started = time.monotonic()
        await self._shards.settle(self._apis.keys(key, body), SETTLE_TIMEOUT_S)
        response = await self._apis.handle(key, version, body, client_id, client_host)
        self._request_ms.labels(self._apis.names[key]).observe((time.monotonic() - started) * 1000)
        try:
            return encode_response_body(key, version, response)
        except Exception:  # noqa: BLE001 - a handler bug must not fail the RPC
            log.exception("response_encoding_failed", api_key=key, api_version=version)
            return encode_response_body(
                key,
                version,
                self._apis.error_response(key, version, body, ErrorCode.UNKNOWN_SERVER_ERROR),
            )

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for requests still running, including those whose RPC
        was cancelled."""
        if self._inflight and timeout_s > 0:
            await asyncio.wait(set(self._inflight), timeout=timeout_s)


def _refused(code: ErrorCode, message: str) -> pb.ForwardResponse:
    return pb.ForwardResponse(error_code=int(code), error_message=message)
