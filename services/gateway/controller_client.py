"""Calls to the active controller: resolve it from ZooKeeper, retry until the deadline.

The active controller is ``/controller`` -> ``/kafka-py/controllers/<id>`` (both watched by the
metadata cache). A standby answers NOT_CONTROLLER per item; those items are re-sent once the
controller changes. Unreachable controllers are retried with a short backoff.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import grpc

from services.common import internal_tls
from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.metadata_cache import MetadataCache
from services.common.rpc.kafkapy.v1 import controller_pb2, controller_pb2_grpc
from services.common.rpc_status import connection_broke
from services.common.runtime import new_channel

log = get_logger("gateway.controller")

T = TypeVar("T")
R = TypeVar("R")
K = TypeVar("K", bound=Hashable)

_RETRIABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ABORTED,
    }
)
_BACKOFF_S = 0.1


class ControllerError(Exception):
    """The controller call failed in a way retrying will not fix."""


class ControllerClient:
    def __init__(self, cache: MetadataCache) -> None:
        self._cache = cache
        # (address, internal TLS generation): a rotation re-creates the channel
        self._entry: tuple[tuple[str, int], grpc.aio.Channel, Any] | None = None
        self._closing: set[asyncio.Task[None]] = set()

    def _stub(self) -> Any | None:
        cid = self._cache.controller_id
        ep = self._cache.controllers.get(cid) if cid >= 0 else None
        if ep is None:
            return None
        key = (ep.address, internal_tls.generation())
        if self._entry is not None and self._entry[0] == key:
            return self._entry[2]
        if self._entry is not None:
            old = self._entry[1]
            task = asyncio.get_running_loop().create_task(old.close(grace=5.0))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        channel = new_channel(ep.address)
        self._entry = (key, channel, controller_pb2_grpc.ControllerStub(channel))
        return self._entry[2]

    def _resolvable(self) -> bool:
        cid = self._cache.controller_id
        return cid >= 0 and cid in self._cache.controllers

    async def call(self, method: str, request: Any, deadline: float) -> Any:
        """One call to the active controller; raises TimeoutError at ``deadline`` (loop time)."""
        loop = asyncio.get_running_loop()
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError
            stub = self._stub()
            if stub is None:
                await self._cache.wait_for(self._resolvable, min(remaining, 1.0))
                continue
            try:
                return await getattr(stub, method)(request, timeout=remaining)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise TimeoutError from None
                if code not in _RETRIABLE and not connection_broke(code, exc.details()):
                    raise ControllerError(f"{method}: {code.name} {exc.details()}") from None
                log.info("controller_retry", method=method, code=code.name)
            await asyncio.sleep(min(_BACKOFF_S, max(deadline - loop.time(), 0)))

    async def call_items(
        self,
        method: str,
        items: Sequence[T],
        build: Callable[[Sequence[T]], Any],
        item_key: Callable[[T], K],
        results: Callable[[Any], Iterable[R]],
        result_key: Callable[[R], K],
        deadline: float,
    ) -> dict[K, R]:
        """Send ``items``; re-send those answered NOT_CONTROLLER until the deadline.

        Returns the final result per key; keys missing from the result timed out.
        """
        out: dict[K, R] = {}
        pending = list(items)
        loop = asyncio.get_running_loop()
        while pending:
            controller = self._cache.controller_id
            try:
                resp = await self.call(method, build(pending), deadline)
            except TimeoutError:
                return out
            retry: set[K] = set()
            for r in results(resp):
                key = result_key(r)
                if getattr(r, "error_code", 0) == ErrorCode.NOT_CONTROLLER:
                    retry.add(key)
                else:
                    out[key] = r
            pending = [i for i in pending if item_key(i) in retry]
            if pending:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return out

                def moved(previous: int = controller) -> bool:
                    return self._cache.controller_id != previous

                changed = await self._cache.wait_for(moved, min(remaining, 0.5))
                if not changed:
                    await asyncio.sleep(min(_BACKOFF_S, max(deadline - loop.time(), 0)))
        return out

    async def create_internal_topic(
        self, name: str, deadline: float
    ) -> controller_pb2.CreateInternalTopicResponse:
        """Have the active controller create internal topic ``name`` (an existing one is no
        error); a NOT_CONTROLLER answer is re-sent once the controller changes. Raises
        TimeoutError at ``deadline``, ControllerError on a non-retriable failure."""
        answers = await self.call_items(
            "CreateInternalTopic",
            [name],
            lambda names: controller_pb2.CreateInternalTopicRequest(name=names[0]),
            lambda n: n,
            lambda resp: [resp],
            lambda _resp: name,
            deadline,
        )
        if name not in answers:
            raise TimeoutError
        return answers[name]

    async def close(self) -> None:
        entry, self._entry = self._entry, None
        await asyncio.gather(
            *([entry[1].close()] if entry else []), *self._closing, return_exceptions=True
        )
