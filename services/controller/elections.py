"""Partition leader election and ISR changes, as Kafka's partition and replica state machines.

Pure functions over (replicas, leader, isr, live brokers); the controller writes the result to
ZooKeeper with leader_epoch + 1.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

NO_LEADER = -1
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class LeaderIsr:
    leader: int
    isr: tuple[int, ...]


def initial_leader_isr(replicas: Sequence[int], live: Collection[int]) -> LeaderIsr | None:
    """NewPartition -> OnlinePartition: leader = first live replica, ISR = live replicas.
    None when no replica is alive (the partition stays new, without a state znode)."""
    alive = tuple(r for r in replicas if r in live)
    return LeaderIsr(alive[0], alive) if alive else None


def offline_leader(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], unclean: bool
) -> LeaderIsr | None:
    """OfflinePartitionLeaderElectionStrategy: the first replica in assignment order that is alive
    and in the ISR; with unclean election, else the first live replica (ISR = just it)."""
    live_isr = tuple(r for r in isr if r in live)
    for r in replicas:
        if r in live and r in isr:
            return LeaderIsr(r, live_isr)
    if unclean:
        for r in replicas:
            if r in live:
                return LeaderIsr(r, (r,))
    return None


def shrink_isr(isr: Sequence[int], live: Collection[int]) -> tuple[int, ...]:
    """Remove dead replicas from the ISR one by one, never removing the last member (Kafka keeps
    it so the partition can be cleanly re-elected when that replica returns)."""
    out = list(isr)
    for r in isr:
        if r not in live and len(out) > 1:
            out.remove(r)
    return tuple(out)


def next_leader_isr(
    replicas: Sequence[int], leader: int, isr: Sequence[int], live: Collection[int], unclean: bool
) -> LeaderIsr | None:
    """The partition's new leader and ISR given the live brokers, or None if nothing changes.

    - leader alive: drop dead replicas from the ISR (OfflineReplica transition);
    - leader dead or none: elect from the live ISR; with no candidate the partition is offline
      (leader -1) and keeps one ISR member.
    """
    if leader != NO_LEADER and leader in live:
        new_isr = tuple(r for r in isr if r in live)
        if not new_isr or new_isr == tuple(isr):
            return None
        return LeaderIsr(leader, new_isr)
    elected = offline_leader(replicas, isr, live, unclean)
    if elected is not None:
        return elected
    shrunk = shrink_isr(isr, live)
    if leader == NO_LEADER and shrunk == tuple(isr):
        return None
    return LeaderIsr(NO_LEADER, shrunk)


def preferred_leader(
    replicas: Sequence[int], leader: int, isr: Sequence[int], live: Collection[int]
) -> LeaderIsr | None:
    """PreferredReplicaPartitionLeaderElectionStrategy: the first replica in assignment order,
    when it is alive, in the ISR and not the leader already (the ISR stays as it is)."""
    if not replicas:
        return None
    preferred = replicas[0]
    if preferred == leader or preferred not in live or preferred not in isr:
        return None
    return LeaderIsr(preferred, tuple(isr))


def imbalanced_partitions(
    leadership: Mapping[K, tuple[Sequence[int], int]], per_broker_percentage: int
) -> list[K]:
    """Kafka's auto leader rebalance check: ``leadership`` maps each partition to (replicas,
    leader). For each broker, the share of the partitions it is the preferred leader of that
    another broker leads is its imbalance; every such partition of a broker whose imbalance is
    above ``leader.imbalance.per.broker.percentage`` is returned (whether its preferred replica
    can lead now is ``preferred_leader``'s question)."""
    by_preferred: dict[int, list[K]] = {}
    for key, (replicas, _) in leadership.items():
        if replicas:
            by_preferred.setdefault(replicas[0], []).append(key)
    out: list[K] = []
    for broker, keys in sorted(by_preferred.items()):
        elsewhere = [k for k in keys if leadership[k][1] != broker]
        if len(elsewhere) / len(keys) > per_broker_percentage / 100:
            out.extend(elsewhere)
    return out
