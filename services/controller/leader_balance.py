"""Automatic preferred-replica leader election (Kafka's auto leader rebalance).

Leadership moves away from a storage node when it fails and stays away when the node comes
back, so one node ends up leading most partitions. Every
``leader.imbalance.check.interval.seconds`` (first 5 s after this controller took over, as
Kafka does) the active controller measures, per node, the share of the partitions it is the
preferred (first) replica of that another node leads. Where that share is above
``leader.imbalance.per.broker.percentage``, those partitions whose preferred replica is alive
and in the ISR get it back as leader: a new leader epoch with the same ISR, ordered like any
other leader change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from services.common.logging import get_logger
from services.controller.core import ControllerCore
from services.controller.elections import imbalanced_partitions, preferred_leader
from services.controller.model import Part, Transition

log = get_logger("controller.leader_balance")

FIRST_CHECK_S = 5.0
EVENT = "AutoPreferredReplicaLeaderElection"


class LeaderBalancer:
    def __init__(self, controller: ControllerCore) -> None:
        self.c = controller

    async def run(self) -> None:
        """Queue a check now and then, until this controller's term ends (cancelled)."""
        interval = self.c.settings.leader_imbalance_check_interval_seconds
        await asyncio.sleep(min(FIRST_CHECK_S, interval))
        while True:
            self.c.enqueue(EVENT, self.check, key=EVENT)
            await asyncio.sleep(interval)

    async def check(self) -> list[Transition]:
        """One check; returns the leader changes it made."""
        c = self.c
        leadership = {
            (topic.name, p): (topic.assignment[p], st.leader)
            for topic in c.eligible_topics()
            for p, st in topic.states.items()
            if p in topic.assignment
        }
        wanted = imbalanced_partitions(
            leadership, c.settings.leader_imbalance_per_broker_percentage
        )
        if not wanted:
            return []
        parts = [(c.ctx.topics[name], p) for name, p in wanted]
        applied = await c.elect(parts, plan=self.plan)
        if applied:
            log.info(
                "preferred replicas elected as leaders",
                partitions=[f"{t.topic}-{t.partition}:{t.leader}" for t in applied[:20]],
                count=len(applied),
            )
            c.send_states((t.topic, t.partition) for t in applied)
        return applied

    def plan(self, parts: Sequence[Part]) -> list[Transition]:
        out: list[Transition] = []
        for topic, p in parts:
            st = topic.states.get(p)
            if st is None:
                continue
            live = self.c.ctx.live_for(topic.name, p) - self.c.ctx.shutting_down
            li = preferred_leader(topic.assignment[p], st.leader, st.isr, live)
            if li is not None:
                out.append(Transition(topic.name, p, li.leader, li.isr, False))
        return out
