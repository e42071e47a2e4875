"""Controlled shutdown of a storage node (Kafka's ``KafkaController.doControlledShutdown``).

A storage node asked to stop sends ``ControlledShutdown(broker_id, broker_epoch)``. In one
controller event the node is marked shutting down (no automatic or requested preferred election
gives it leadership any more) and, for each of its partitions with more than one replica:

- those it leads get a new leader, the first replica in assignment order that is alive, in the
  ISR and not shutting down, with the shutting-down nodes left out of the ISR and a new leader
  epoch (``ControlledShutdownPartitionLeaderElectionStrategy``); with no such replica it keeps
  leading, and the partition is answered as remaining;
- those it follows lose it from their ISR (a new leader epoch), unless it is the last member.

The other replicas get their new states; the stopping node gets StopReplicas (without delete)
for every partition it no longer leads, so it stops fetching and cannot rejoin an ISR before
it deregisters. Other shutting-down nodes still follow (they get the new states like any
replica), so, as Kafka 3.3+ refuses ISR expansions with a shutting-down broker (KIP-841,
INELIGIBLE_REPLICA), every UpdatePartitions carries the shutting-down set and leaders, which
write ISR changes themselves here, never add one of them; the set is announced to every node
before the node's partitions change. The answer waits for the other
replicas' acknowledgements, bounded by the request's timeout, so clients re-routed by the new
metadata find leaders that already lead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.controller.core import ControllerCore
from services.controller.elections import NO_LEADER
from services.controller.model import Part, Transition

log = get_logger("controller.controlled_shutdown")


@dataclass
class _Outcome:
    error: tuple[ErrorCode, str] | None = None
    remaining: list[tuple[str, int]] = field(default_factory=list)
    retriable: bool = False
    acks: list[asyncio.Future[Any]] = field(default_factory=list)


def _error(code: ErrorCode, message: str) -> pb.ControlledShutdownResponse:
    return pb.ControlledShutdownResponse(error_code=int(code), error_message=message)


class ControlledShutdowns:
    def __init__(self, controller: ControllerCore) -> None:
        self.c = controller

    async def handle(self, req: pb.ControlledShutdownRequest) -> pb.ControlledShutdownResponse:
        started = time.monotonic()
        outcome: _Outcome = await self.c.call(
            f"ControlledShutdown({req.broker_id})",
            lambda: self._shut_down(req.broker_id, req.broker_epoch),
        )
        if outcome.error is not None:
            return _error(*outcome.error)
        if outcome.acks and req.timeout_ms > 0:
            await asyncio.wait(outcome.acks, timeout=req.timeout_ms / 1000)
        self.c.metrics.controlled_shutdown_ms.observe((time.monotonic() - started) * 1000)
        log.info(
            "controlled shutdown handled",
            broker=req.broker_id,
            remaining=[f"{t}-{p}" for t, p in outcome.remaining[:20]],
            remaining_count=len(outcome.remaining),
            acknowledged=all(f.done() for f in outcome.acks),
            ms=round((time.monotonic() - started) * 1000, 1),
        )
        return pb.ControlledShutdownResponse(
            remaining_partitions=[
                pb.PartitionRef(topic=t, partition=p) for t, p in outcome.remaining
            ],
            retriable=outcome.retriable,
        )

    async def _shut_down(self, broker_id: int, broker_epoch: int) -> _Outcome:
        c = self.c
        broker = c.ctx.brokers.get(broker_id)
        if broker is None:
            return _Outcome(
                error=(ErrorCode.BROKER_NOT_AVAILABLE, f"Broker id {broker_id} does not exist.")
            )
        if broker_epoch >= 0 and broker_epoch < broker.epoch:
            msg = (
                f"Received controlled shutdown request from an old broker epoch {broker_epoch} "
                f"for broker {broker_id}. Current broker epoch is {broker.epoch}."
            )
            log.info(msg)
            return _Outcome(error=(ErrorCode.STALE_BROKER_EPOCH, msg))
        log.info("shutting down broker", broker=broker_id)
        if broker_id not in c.ctx.shutting_down:
            c.ctx.shutting_down.add(broker_id)
            c.links.announce_ineligible()
        parts = [(t, p) for t, p in c.ctx.partitions_on(broker_id) if len(t.assignment[p]) > 1]
        led = [(t, p) for t, p in parts if t.states[p].leader == broker_id]
        followed = [(t, p) for t, p in parts if t.states[p].leader != broker_id]
        moved = await c.elect(led, plan=self._plan(self._new_leader)) if led else []
        shrunk = await c.elect(followed, plan=self._plan(self._without)) if followed else []
        applied = [(tr.topic, tr.partition) for tr in [*moved, *shrunk]]
        outcome = _Outcome()
        outcome.acks = list(c.send_states(applied, skip={broker_id}).values())
        stop = [
            (t.name, p, t.states[p].leader_epoch)
            for t, p in parts
            if t.states[p].leader != broker_id
        ]
        link = c.links.get(broker_id)
        if link is not None and stop:
            link.stop_replicas(stop, delete=False)
        for t, p in parts:
            if t.states[p].leader == broker_id:
                outcome.remaining.append((t.name, p))
                others = set(t.assignment[p]) - {broker_id} - c.ctx.shutting_down
                outcome.retriable |= bool(others & c.ctx.live_for(t.name, p))
        if moved or shrunk:
            log.info(
                "leadership moved off a shutting-down broker",
                broker=broker_id,
                leaders=[f"{tr.topic}-{tr.partition}:{tr.leader}" for tr in moved[:20]],
                leaders_moved=len(moved),
                isr_shrunk=len(shrunk),
            )
        return outcome

    def _plan(
        self, step: Callable[[Part], Transition | None]
    ) -> Callable[[Sequence[Part]], list[Transition]]:
        def plan(parts: Sequence[Part]) -> list[Transition]:
            return [tr for part in parts if (tr := step(part)) is not None]

        return plan

    def _new_leader(self, part: Part) -> Transition | None:
        """ControlledShutdownPartitionLeaderElectionStrategy for a partition a shutting-down
        node leads (re-checked on each planning: the state may have changed underneath)."""
        topic, p = part
        st = topic.states.get(p)
        down = self.c.ctx.shutting_down
        if st is None or st.leader not in down:
            return None
        live = self.c.ctx.live_for(topic.name, p)
        for r in topic.assignment[p]:
            if r in live and r in st.isr and r not in down:
                isr = tuple(i for i in st.isr if i not in down)
                return Transition(topic.name, p, r, isr, False)
        return None

    def _without(self, part: Part) -> Transition | None:
        """Kafka's OfflineReplica transition for the shutting-down followers: out of the ISR,
        never emptying it (a leaderless partition is left to the failover election)."""
        topic, p = part
        st = topic.states.get(p)
        down = self.c.ctx.shutting_down
        if st is None or st.leader == NO_LEADER or st.leader in down:
            return None
        isr = tuple(i for i in st.isr if i not in down)
        if isr == tuple(st.isr) or not isr:
            return None
        return Transition(topic.name, p, st.leader, isr, False)
