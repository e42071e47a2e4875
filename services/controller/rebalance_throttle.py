"""Replication throttles on the rebalancer's moves, set and cleared as kafka-reassign-partitions.sh
does with ``--throttle`` and ``--verify``, when ``kafkapy.rebalance.throttle.bytes.per.sec`` > 0:

- per moving partition, ``leader.replication.throttled.replicas`` of its topic gets
  ``partition:broker`` for each current replica and ``follower.replication.throttled.replicas``
  each replica being added (incremental APPEND);
- ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` = the rate on
  every broker a move involves;
- once the rebalancer has nothing moving any more, both lists are deleted from those topics and
  both rates from those brokers. Which topics and brokers were throttled is kept in the
  autoscaler state, so the next controller clears them.

Only the throttled replicas are slowed (the storage side's rule): ordinary replication is not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.common.zk.elastic import AutoscalerState
from services.controller.planner import Move

log = get_logger("controller.rebalance_throttle")

AlterConfigs = Callable[[pb.AlterConfigsRequest], Awaitable[pb.AlterConfigsResponse]]

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND = 0, 1, 2


def throttle_request(moves: Sequence[Move], rate: int) -> pb.AlterConfigsRequest:
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for m in moves:
        topic, p = m.tp
        leaders.setdefault(topic, []).extend(f"{p}:{b}" for b in m.old)
        if m.adding:
            followers.setdefault(topic, []).extend(f"{p}:{b}" for b in m.adding)
        brokers.update(m.old)
        brokers.update(m.new)
    resources = []
    for topic in sorted(set(leaders) | set(followers)):
        ops = [pb.ConfigOp(key=LEADER_REPLICAS, value=",".join(leaders[topic]), op=APPEND)]
        if topic in followers:
            ops.append(
                pb.ConfigOp(key=FOLLOWER_REPLICAS, value=",".join(followers[topic]), op=APPEND)
            )
        resources.append(
            pb.ConfigResourceChange(resource_type=TOPIC, name=topic, ops=ops, incremental=True)
        )
    for b in sorted(brokers):
        ops = [pb.ConfigOp(key=k, value=str(rate), op=SET) for k in (LEADER_RATE, FOLLOWER_RATE)]
        resources.append(
            pb.ConfigResourceChange(resource_type=BROKER, name=str(b), ops=ops, incremental=True)
        )
    return pb.AlterConfigsRequest(resources=resources)


def clear_request(topics: Sequence[str], brokers: Sequence[int]) -> pb.AlterConfigsRequest:
    resources = [
        pb.ConfigResourceChange(
            resource_type=TOPIC,
            name=t,
            ops=[pb.ConfigOp(key=k, op=DELETE) for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS)],
            incremental=True,
        )
        for t in topics
    ] + [
        pb.ConfigResourceChange(
            resource_type=BROKER,
            name=str(b),
            ops=[pb.ConfigOp(key=k, op=DELETE) for k in (LEADER_RATE, FOLLOWER_RATE)],
            incremental=True,
        )
        for b in brokers
    ]
    return pb.AlterConfigsRequest(resources=resources)


class RebalanceThrottle:
    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.alter: AlterConfigs | None = None  # the controller's AlterConfigs (set by the app)

    @property
    def active(self) -> bool:
        return self.rate > 0 and self.alter is not None

    async def apply(self, moves: Sequence[Move], state: AutoscalerState) -> None:
        """Throttle ``moves`` (before they are submitted); records what to clear in ``state``."""
        if not self.active or not moves:
            return
        assert self.alter is not None
        req = throttle_request(moves, self.rate)
        resp = await self.alter(req)
        failed = [f"{r.name}: {r.error_message}" for r in resp.resources if r.error_code]
        if failed:
            log.warning("rebalance throttle not applied", errors=failed[:10])
        topics = {r.name for r in req.resources if r.resource_type == TOPIC}
        brokers = {int(r.name) for r in req.resources if r.resource_type == BROKER}
        state.throttled_topics = sorted(set(state.throttled_topics) | topics)
        state.throttled_brokers = sorted(set(state.throttled_brokers) | brokers)
        log.info(
            "rebalance moves throttled",
            rate=self.rate,
            topics=sorted(topics),
            brokers=sorted(brokers),
        )

    async def clear(self, state: AutoscalerState, live_topics: set[str]) -> bool:
        """Remove the throttles ``state`` records; True when there were some."""
        if not (state.throttled_topics or state.throttled_brokers) or self.alter is None:
            return False
        topics = [t for t in state.throttled_topics if t in live_topics]
        resp = await self.alter(clear_request(topics, state.throttled_brokers))
        failed = [f"{r.name}: {r.error_message}" for r in resp.resources if r.error_code]
        if failed:
            log.warning("rebalance throttle not cleared", errors=failed[:10])
        log.info(
            "rebalance throttles cleared", topics=topics, brokers=list(state.throttled_brokers)
        )
        state.throttled_topics, state.throttled_brokers = [], []
        return True
