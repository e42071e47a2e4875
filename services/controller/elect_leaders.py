"""Leader elections on request (Kafka's ElectLeaders, ``kafka-leader-election.sh``).

Preferred election makes each partition's first replica its leader, when that replica is alive
and in the ISR. Unclean election gives a leaderless partition a leader: the first live ISR
member, else the first live replica (which may lose records: the operator asked for it). Each
partition is answered as Kafka's controller answers: ELECTION_NOT_NEEDED when nothing is to be
done, PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica may lead,
UNKNOWN_TOPIC_OR_PARTITION, and REQUEST_TIMED_OUT when the replicas did not acknowledge the new
leader within the request's timeout (the election itself stays).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.controller.core import ControllerCore, Plan
from services.controller.elections import NO_LEADER, offline_leader, preferred_leader
from services.controller.model import Part, Transition

log = get_logger("controller.elect_leaders")

PREFERRED = 0
UNCLEAN = 1
_STRATEGY = {
    PREFERRED: "PreferredReplicaPartitionLeaderElectionStrategy",
    UNCLEAN: "OfflinePartitionLeaderElectionStrategy(true)",
}


@dataclass
class _Outcome:
    results: dict[tuple[str, int], pb.PartitionElection] = field(default_factory=dict)
    acks: list[asyncio.Future[Any]] = field(default_factory=list)
    elected: set[tuple[str, int]] = field(default_factory=set)


def _result(topic: str, p: int, code: ErrorCode, message: str = "") -> pb.PartitionElection:
    return pb.PartitionElection(
        topic=topic, partition=p, error_code=int(code), error_message=message
    )


class LeaderElections:
    def __init__(self, controller: ControllerCore, plan_preferred: Plan) -> None:
        """``plan_preferred``: the leader balancer's plan (preferred replica, if in the ISR)."""
        self.c = controller
        self._plan_preferred = plan_preferred

    async def elect_leaders(self, req: pb.ElectLeadersRequest) -> pb.ElectLeadersResponse:
        if req.election_type not in _STRATEGY:
            return pb.ElectLeadersResponse(
                error_code=int(ErrorCode.INVALID_REQUEST),
                error_message=f"Unknown election type {req.election_type}",
            )
        outcome: _Outcome = await self.c.call("ReplicaLeaderElection", lambda: self._elect(req))
        if outcome.acks and req.timeout_ms > 0:
            await asyncio.wait(outcome.acks, timeout=req.timeout_ms / 1000)
        if outcome.elected and not all(f.done() for f in outcome.acks):
            for key in outcome.elected:
                outcome.results[key] = _result(*key, ErrorCode.REQUEST_TIMED_OUT)
        results = list(outcome.results.values())
        if req.all_partitions:  # Kafka leaves out what needed no election
            results = [r for r in results if r.error_code != ErrorCode.ELECTION_NOT_NEEDED]
        return pb.ElectLeadersResponse(partitions=results)

    async def _elect(self, req: pb.ElectLeadersRequest) -> _Outcome:
        c, outcome = self.c, _Outcome()
        if req.all_partitions:
            wanted = [(t.name, p) for t in c.eligible_topics() for p in sorted(t.assignment)]
        else:
            wanted = list(dict.fromkeys((r.topic, r.partition) for r in req.partitions))
        parts: list[Part] = []
        for name, p in wanted:
            topic = c.ctx.topics.get(name)
            if topic is None or p not in topic.assignment:
                outcome.results[(name, p)] = _result(
                    name, p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
                )
            elif name in c.ctx.topics_to_delete:
                outcome.results[(name, p)] = _result(
                    name,
                    p,
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Deletion of topic {name} is in progress",
                )
            else:
                parts.append((topic, p))
                outcome.results[(name, p)] = self._refusal(req.election_type, topic.name, p)
        plan = self._plan_preferred if req.election_type == PREFERRED else self._plan_unclean
        candidates = [
            (t, p) for t, p in parts if outcome.results[(t.name, p)].error_code == ErrorCode.NONE
        ]
        applied = await c.elect(candidates, plan=plan) if candidates else []
        for tr in applied:
            outcome.elected.add((tr.topic, tr.partition))
        for t, p in candidates:  # changed underneath and no longer electable
            if (t.name, p) not in outcome.elected:
                outcome.results[(t.name, p)] = self._refusal(req.election_type, t.name, p, True)
        if applied:
            log.info(
                "leaders elected on request",
                election_type="preferred" if req.election_type == PREFERRED else "unclean",
                partitions=[f"{t.topic}-{t.partition}:{t.leader}" for t in applied[:20]],
                count=len(applied),
            )
            acks = c.send_states((tr.topic, tr.partition) for tr in applied)
            outcome.acks = list(acks.values())
        return outcome

    def _refusal(
        self, election_type: int, name: str, p: int, stale: bool = False
    ) -> pb.PartitionElection:
        """NONE when the partition can be elected now, else the error Kafka answers."""
        topic = self.c.ctx.topics[name]
        st = topic.states.get(p)
        live = self.c.ctx.live_for(name, p)
        replicas = topic.assignment[p]
        if election_type == PREFERRED:
            if st is not None and replicas and st.leader == replicas[0]:
                return _result(name, p, ErrorCode.ELECTION_NOT_NEEDED, "")
            ok = st is not None and preferred_leader(replicas, st.leader, st.isr, live)
            code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        else:
            if st is not None and st.leader != NO_LEADER and st.leader in live:
                return _result(name, p, ErrorCode.ELECTION_NOT_NEEDED, "")
            ok = st is not None and offline_leader(replicas, st.isr, live, True)
            code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        if ok and not stale:
            return _result(name, p, ErrorCode.NONE)
        return _result(
            name,
            p,
            code,
            f"Failed to elect leader for partition {name}-{p} under strategy "
            f"{_STRATEGY[election_type]}",
        )

    def _plan_unclean(self, parts: Sequence[Part]) -> list[Transition]:
        out: list[Transition] = []
        for topic, p in parts:
            st = topic.states.get(p)
            live = self.c.ctx.live_for(topic.name, p)
            if st is None or (st.leader != NO_LEADER and st.leader in live):
                continue
            li = offline_leader(topic.assignment[p], st.isr, live, True)
            if li is not None:
                out.append(Transition(topic.name, p, li.leader, li.isr, False))
        return out
