"""Partition leader election and ISR changes, as Kafka's partition and replica state machines.

Pure functions over (replicas, leader, isr, live brokers); the controller writes the result to
ZooKeeper with leader_epoch + 1.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

NO_LEADER = -1


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
