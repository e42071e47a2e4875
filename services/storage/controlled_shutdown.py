"""A storage node's side of Kafka's controlled shutdown (ZooKeeper mode).

Before a node stopped by SIGTERM deregisters, it asks the active controller (``/controller`` ->
``/kafka-py/controllers/<id>``) to move leadership of its replicated partitions to other
in-sync replicas and to take it out of the ISRs it follows in. The node keeps serving while the
controller works, so followers and in-flight requests finish; requests for partitions that moved
are answered NOT_LEADER_OR_FOLLOWER (retriable). As Kafka's ``KafkaServer.controlledShutdown``:
up to ``controlled.shutdown.max.retries`` attempts, ``controlled.shutdown.retry.backoff.ms``
apart, while the controller answers an error or partitions the node still leads; then the node
stops anyway. Each attempt is bounded by ``controller.socket.timeout.ms``. Two additions
(docs/decisions.md): when the controller says none of the partitions left has another live
replica (the last node of a cluster stopping), retrying cannot help and the node stops at once;
and without a ZooKeeper connection (no controller could write a leader change) it stops at once,
so a SIGTERM stays bounded whatever ZooKeeper does. (A node hosting no replicated partition does
not ask at all: ``StorageNode``.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import controller_pb2, controller_pb2_grpc
from services.common.runtime import new_channel
from services.common.zk import layout
from services.common.zk.client import AsyncZk

log = get_logger("storage.controlled_shutdown")


@dataclass(frozen=True, slots=True)
class ShutdownSettings:
    max_retries: int
    retry_backoff_ms: int
    request_timeout_ms: int


class NoController(Exception):
    """No active controller is registered in ZooKeeper right now."""


async def active_controller_address(zk: AsyncZk) -> str:
    """``host:port`` of the active controller's gRPC listener."""
    found = await zk.get_or_none(layout.CONTROLLER)
    body = layout.loads(found[0]) if found else None
    try:
        controller_id = int((body or {})["brokerid"])
    except (KeyError, TypeError, ValueError):
        raise NoController("no active controller") from None
    endpoint = await zk.get_or_none(layout.controller_endpoint_path(controller_id))
    if endpoint is None:
        raise NoController(f"controller {controller_id} has no registered endpoint")
    return layout.Endpoint.from_json(controller_id, endpoint[0]).address


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class ControlledShutdown:
    def __init__(
        self,
        zk: AsyncZk,
        broker_id: int,
        broker_epoch: Callable[[], int],
        settings: ShutdownSettings,
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self._broker_epoch = broker_epoch
        self.settings = settings

    async def run(self) -> bool:
        """Attempt the controlled shutdown; True when the node leads no replicated partition."""
        s = self.settings
        started = time.monotonic()
        log.info("starting controlled shutdown", broker_id=self.broker_id)
        for attempt in range(1, s.max_retries + 1):
            if not self.zk.connected:
                log.warning(
                    "ZooKeeper is not connected: no controller can move leadership, stopping"
                )
                return False
            try:
                resp = await asyncio.wait_for(self._attempt(), s.request_timeout_ms / 1000)
            except TimeoutError:
                log.warning(
                    "controlled shutdown attempt failed",
                    attempt=attempt,
                    error=f"no answer within {s.request_timeout_ms} ms",
                )
            except (NoController, grpc.aio.AioRpcError, OSError, ValueError) as exc:
                detail = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
                log.warning("controlled shutdown attempt failed", attempt=attempt, error=detail)
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away etc.: the node still stops
                log.warning("controlled shutdown attempt failed", attempt=attempt, error=repr(exc))
            else:
                remaining = [f"{p.topic}-{p.partition}" for p in resp.remaining_partitions]
                if resp.error_code == ErrorCode.NONE and not remaining:
                    log.info(
                        "controlled shutdown succeeded",
                        attempt=attempt,
                        ms=round((time.monotonic() - started) * 1000, 1),
                    )
                    return True
                if resp.error_code != ErrorCode.NONE:
                    log.warning(
                        "controlled shutdown attempt failed",
                        attempt=attempt,
                        error=_code_name(resp.error_code),
                        message=resp.error_message,
                    )
                else:
                    log.warning(
                        "remaining partitions to move",
                        attempt=attempt,
                        partitions=remaining[:20],
                        count=len(remaining),
                    )
                    if not resp.retriable:
                        log.warning(
                            "no other live replica can lead the remaining partitions: "
                            "proceeding to stop"
                        )
                        return False
            if attempt < s.max_retries:
                await asyncio.sleep(s.retry_backoff_ms / 1000)
                log.info("retrying controlled shutdown", retries_left=s.max_retries - attempt)
        log.warning(
            "proceeding to do an unclean shutdown as all the controlled shutdown attempts failed",
            attempts=s.max_retries,
        )
        return False

    async def _attempt(self) -> controller_pb2.ControlledShutdownResponse:
        address = await active_controller_address(self.zk)
        timeout_ms = self.settings.request_timeout_ms
        channel = new_channel(address)
        try:
            stub = controller_pb2_grpc.ControllerStub(channel)
            epoch = self._broker_epoch()
            req = controller_pb2.ControlledShutdownRequest(
                broker_id=self.broker_id,
                broker_epoch=epoch if epoch > 0 else -1,
                timeout_ms=timeout_ms // 2,  # the rest for the controller's own work
            )
            return await stub.ControlledShutdown(req, timeout=timeout_ms / 1000)
        finally:
            await channel.close()
