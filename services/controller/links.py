"""Controller -> storage node orders (Kafka's ControllerChannelManager).

One gRPC channel and one sender task per storage node; orders go out in the order they were
issued, each retried with backoff until the node answers, except a full state: it goes once no
other order is queued, and is built when it goes (so an order that overtook it never carries a
newer state than it). A link lives as long as the node's registration (and this controller's
term): closing it drops what is still queued.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from services.common import internal_tls
from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2, storage_pb2_grpc
from services.common.runtime import new_channel

BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 2.0

log = get_logger("controller.links")


class Outcome(enum.Enum):
    ACKED = "acked"  # the node answered (per-partition errors may still be set)
    REJECTED = "rejected"  # the node refused the whole order (e.g. STALE_CONTROLLER_EPOCH)
    DROPPED = "dropped"  # never answered: the node deregistered or this controller resigned


@dataclass(slots=True)
class OrderResult:
    outcome: Outcome
    error_code: int = 0
    partition_errors: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.ACKED and not self.partition_errors


@dataclass(slots=True)
class _Order:
    kind: str
    request: Any
    future: asyncio.Future[OrderResult]
    build: Callable[[], Any] | None = None  # makes ``request`` when the order is sent


class BrokerLink:
    def __init__(
        self,
        broker_id: int,
        address: str,
        controller_id: int,
        controller_epoch: int,
        rpc_timeout_s: float,
        ineligible: Callable[[], Collection[int]] = frozenset,
    ) -> None:
        self.broker_id = broker_id
        self._ineligible = ineligible
        self.address = address
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self._timeout = rpc_timeout_s
        self._queue: deque[_Order] = deque()
        self._when_idle: deque[_Order] = deque()  # sent once ``_queue`` is empty
        self._wake = asyncio.Event()
        self._channel = new_channel(address)
        self._stub = storage_pb2_grpc.StorageStub(self._channel)
        self._tls_generation = internal_tls.generation()
        self._retired: set[asyncio.Task[None]] = set()
        self._current: _Order | None = None
        self._task = asyncio.create_task(self._run(), name=f"link-{broker_id}")
        self._closed = False

    # ---- orders -------------------------------------------------------------------------
    def update_partitions(
        self, states: Sequence[storage_pb2.PartitionState]
    ) -> asyncio.Future[OrderResult]:
        return self._submit("UpdatePartitions", self._update_request(states))

    def update_partitions_when_idle(
        self, states: Callable[[], Sequence[storage_pb2.PartitionState]]
    ) -> asyncio.Future[OrderResult]:
        """An UpdatePartitions of ``states()``, called when the order is sent: after every
        other order queued on this link meanwhile (a full state of thousands of partitions
        must not hold back the order of a topic just created behind it). Built late, it carries
        the controller's state as it is then, never older than the orders that overtook it."""
        order = _Order(
            "UpdatePartitions", None, self._future(), lambda: self._update_request(states())
        )
        if not order.future.done():
            self._when_idle.append(order)
            self._wake.set()
        return order.future

    def _update_request(
        self, states: Sequence[storage_pb2.PartitionState]
    ) -> storage_pb2.UpdatePartitionsRequest:
        return storage_pb2.UpdatePartitionsRequest(
            controller_id=self.controller_id,
            controller_epoch=self.controller_epoch,
            partitions=list(states),
            ineligible_replicas=sorted(self._ineligible()),
        )

    def stop_replicas(
        self, partitions: Sequence[tuple[str, int, int]], delete: bool
    ) -> asyncio.Future[OrderResult]:
        req = storage_pb2.StopReplicasRequest(
            controller_id=self.controller_id,
            controller_epoch=self.controller_epoch,
            delete_partitions=delete,
            partitions=[
                storage_pb2.StopReplica(topic=t, partition=p, leader_epoch=e)
                for t, p, e in partitions
            ],
        )
        return self._submit("StopReplicas", req)

    async def describe_log_dirs(self) -> storage_pb2.DescribeLogDirsResponse:
        """Every replica on this node with its size: a query, answered now (not an order queued
        behind the others); grpc.aio.AioRpcError when the node does not answer."""
        req = storage_pb2.DescribeLogDirsRequest(all_topics=True)
        resp: storage_pb2.DescribeLogDirsResponse = await self._stub.DescribeLogDirs(
            req, timeout=self._timeout
        )
        return resp

    def _future(self) -> asyncio.Future[OrderResult]:
        """A new order's future; already answered DROPPED when the link is closed."""
        fut: asyncio.Future[OrderResult] = asyncio.get_running_loop().create_future()
        if self._closed:
            fut.set_result(OrderResult(Outcome.DROPPED))
        return fut

    def _submit(self, kind: str, request: Any) -> asyncio.Future[OrderResult]:
        fut = self._future()
        if not fut.done():
            self._queue.append(_Order(kind, request, fut))
            self._wake.set()
        return fut

    # ---- sender -------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            while not (self._queue or self._when_idle):
                self._wake.clear()
                await self._wake.wait()
            order = self._current = (self._queue or self._when_idle).popleft()
            try:
                if order.build is not None:
                    order.request = order.build()
            except Exception:  # noqa: BLE001 - the link must go on sending the others
                log.exception("building an order failed", broker=self.broker_id, order=order.kind)
                result = OrderResult(Outcome.DROPPED)
            else:
                result = await self._deliver(order)
            self._current = None
            if not order.future.done():
                order.future.set_result(result)

    def _renew_channel_if_rotated(self) -> None:
        """A new channel with this process's rotated certificates (internal_tls); calls under
        way finish on the old one."""
        if self._tls_generation == internal_tls.generation():
            return
        old = self._channel
        self._channel = new_channel(self.address)
        self._stub = storage_pb2_grpc.StorageStub(self._channel)
        self._tls_generation = internal_tls.generation()
        task = asyncio.get_running_loop().create_task(old.close(grace=5.0))
        self._retired.add(task)
        task.add_done_callback(self._retired.discard)

    async def _deliver(self, order: _Order) -> OrderResult:
        backoff = BACKOFF_MIN_S
        attempt = 0
        while True:
            attempt += 1
            self._renew_channel_if_rotated()
            method = getattr(self._stub, order.kind)
            try:
                resp = await method(order.request, timeout=self._timeout)
            except grpc.aio.AioRpcError as exc:
                if attempt == 1 or attempt % 20 == 0:
                    log.warning(
                        "order not delivered, retrying",
                        broker=self.broker_id,
                        order=order.kind,
                        code=exc.code().name,
                        attempt=attempt,
                    )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            if resp.error_code != ErrorCode.NONE:
                log.warning(
                    "order rejected",
                    broker=self.broker_id,
                    order=order.kind,
                    error=_name(resp.error_code),
                    controller_epoch=self.controller_epoch,
                )
                return OrderResult(Outcome.REJECTED, resp.error_code)
            errors = [
                (e.topic, e.partition, e.error_code)
                for e in resp.partitions
                if e.error_code != ErrorCode.NONE
            ]
            return OrderResult(Outcome.ACKED, 0, errors)

    async def close(self) -> None:
        self._closed = True
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        pending = [self._current] if self._current is not None else []
        pending += [*self._queue, *self._when_idle]
        self._queue.clear()
        self._when_idle.clear()
        for order in pending:
            if not order.future.done():
                order.future.set_result(OrderResult(Outcome.DROPPED))
        await asyncio.gather(self._channel.close(), *self._retired, return_exceptions=True)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class BrokerLinks:
    """The links of one controller term, keyed by broker id. ``ineligible`` gives the storage
    nodes no leader may add to an ISR (those shutting down); every UpdatePartitions carries it."""

    def __init__(
        self,
        controller_id: int,
        controller_epoch: int,
        rpc_timeout_s: float,
        ineligible: Callable[[], Collection[int]] = frozenset,
    ) -> None:
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self.rpc_timeout_s = rpc_timeout_s
        self._ineligible = ineligible
        self._links: dict[int, BrokerLink] = {}

    def get(self, broker_id: int) -> BrokerLink | None:
        return self._links.get(broker_id)

    def add(self, broker_id: int, address: str) -> BrokerLink:
        link = BrokerLink(
            broker_id,
            address,
            self.controller_id,
            self.controller_epoch,
            self.rpc_timeout_s,
            self._ineligible,
        )
        self._links[broker_id] = link
        return link

    def announce_ineligible(self) -> list[asyncio.Future[OrderResult]]:
        """Tell every node the current ineligible set (an UpdatePartitions without partitions),
        queued ahead of the orders issued after it on each link."""
        return [link.update_partitions(()) for link in self._links.values()]

    async def remove(self, broker_id: int) -> None:
        link = self._links.pop(broker_id, None)
        if link is not None:
            await link.close()

    async def close_all(self) -> None:
        links, self._links = list(self._links.values()), {}
        await asyncio.gather(*(link.close() for link in links), return_exceptions=True)
