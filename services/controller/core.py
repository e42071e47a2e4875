"""What the active controller's collaborators use of it.

Topic deletion, the leader balancer, elections on request and partition reassignment act on the
controller's context and queue; they are handed an object of this shape (the
:class:`~services.controller.active.ActiveController`) instead of importing the controller, so
no module of the controller depends on ``active`` but the process that creates it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from typing import Any, Protocol

from services.common.zk.client import AsyncZk
from services.controller.links import BrokerLinks, OrderResult
from services.controller.metrics import ControllerMetrics
from services.controller.model import ControllerContext, Part, TopicState, Transition
from services.controller.settings import ControllerSettings
from services.controller.zkstore import EpochGuard, Op

AckMap = dict[int, asyncio.Future[OrderResult]]
Plan = Callable[[Sequence[Part]], list[Transition]]


class NotControllerError(Exception):
    """This controller's term ended before the request was handled."""


class ControllerCore(Protocol):
    zk: AsyncZk
    settings: ControllerSettings
    ctx: ControllerContext
    guard: EpochGuard
    links: BrokerLinks
    metrics: ControllerMetrics
    running: bool

    def spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        """Run a task for as long as this term lasts."""
        ...

    def enqueue(
        self,
        name: str,
        run: Callable[[], Awaitable[Any]],
        *,
        key: Any = None,
        want_result: bool = False,
        early: bool = False,
    ) -> asyncio.Future[Any] | None:
        """Queue an event on the controller's single event loop."""
        ...

    async def call(
        self,
        name: str,
        run: Callable[[], Awaitable[Any]],
        *,
        early: bool = False,
        read_only: bool = False,
    ) -> Any:
        """Queue an event and wait for its result (``read_only``: it changes nothing, the
        gauges are not refreshed after it)."""
        ...

    def eligible_topics(self) -> list[TopicState]:
        """Topics not queued for deletion, by name."""
        ...

    async def elect(self, parts: Sequence[Part], plan: Plan | None = None) -> list[Transition]:
        """Bring partitions to the leader/ISR ``plan`` wants and write it (epoch-guarded)."""
        ...

    async def write_transitions(
        self, transitions: Sequence[Transition], extra_ops: Sequence[Op] = ()
    ) -> None:
        """Write new leader/ISR states (plus ``extra_ops``) in one guarded multi."""
        ...

    async def reload_states(self, parts: Sequence[Part]) -> None:
        """Re-read partitions' state znodes into the context."""
        ...

    def send_states(
        self, parts: Iterable[tuple[str, int]], *, is_new: bool = False, skip: Collection[int] = ()
    ) -> AckMap:
        """UpdatePartitions with the partitions' current state to their live replicas."""
        ...

    async def place_shards(self) -> None:
        """Place the ``__consumer_offsets`` shards on the live group coordinators."""
        ...
