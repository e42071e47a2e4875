"""Leader election and ISR changes (Kafka's partition/replica state machines)."""

from __future__ import annotations

from services.controller.elections import (
    NO_LEADER,
    LeaderIsr,
    imbalanced_partitions,
    initial_leader_isr,
    next_leader_isr,
    offline_leader,
    preferred_leader,
)


def test_new_partition_gets_first_live_replica() -> None:
    assert initial_leader_isr([3, 1, 2], {1, 2, 3}) == LeaderIsr(3, (3, 1, 2))
    assert initial_leader_isr([3, 1, 2], {1, 2}) == LeaderIsr(1, (1, 2))
    assert initial_leader_isr([3], set()) is None


def test_rf1_leader_death_goes_offline_keeping_isr() -> None:
    assert next_leader_isr([1], 1, [1], set(), unclean=False) == LeaderIsr(NO_LEADER, (1,))
    # already offline: nothing to write
    assert next_leader_isr([1], NO_LEADER, [1], set(), unclean=False) is None
    # the broker returns: clean election (it is in the ISR)
    assert next_leader_isr([1], NO_LEADER, [1], {1}, unclean=False) == LeaderIsr(1, (1,))


def test_leader_death_elects_first_live_isr_replica_in_assignment_order() -> None:
    assert next_leader_isr([1, 2, 3], 1, [1, 3, 2], {2, 3}, False) == LeaderIsr(2, (3, 2))
    assert next_leader_isr([1, 2, 3], 1, [1, 3], {2, 3}, False) == LeaderIsr(3, (3,))


def test_follower_death_shrinks_isr() -> None:
    assert next_leader_isr([1, 2, 3], 1, [1, 2, 3], {1, 2}, False) == LeaderIsr(1, (1, 2))
    assert next_leader_isr([1, 2, 3], 1, [1, 2], {1, 2}, False) is None


def test_no_live_isr_replica_clean_vs_unclean() -> None:
    # 2 is alive but out of sync: clean election leaves the partition offline
    assert next_leader_isr([1, 2], 1, [1], {2}, unclean=False) == LeaderIsr(NO_LEADER, (1,))
    assert next_leader_isr([1, 2], 1, [1], {2}, unclean=True) == LeaderIsr(2, (2,))
    assert offline_leader([1, 2], [1], set(), unclean=True) is None


def test_all_isr_dead_keeps_one_member() -> None:
    assert next_leader_isr([1, 2, 3], 1, [1, 2], {3}, False) == LeaderIsr(NO_LEADER, (2,))


def test_the_preferred_replica_leads_again_when_it_is_alive_and_in_sync() -> None:
    assert preferred_leader([1, 2, 3], 2, [2, 3, 1], {1, 2, 3}) == LeaderIsr(1, (2, 3, 1))
    assert preferred_leader([1, 2, 3], 1, [1, 2, 3], {1, 2, 3}) is None  # leads already
    assert preferred_leader([1, 2, 3], 2, [2, 3], {1, 2, 3}) is None  # not in sync yet
    assert preferred_leader([1, 2, 3], 2, [2, 3, 1], {2, 3}) is None  # not alive
    assert preferred_leader([], NO_LEADER, [], {1}) is None


def test_imbalance_is_measured_per_preferred_broker_against_the_percentage() -> None:
    # broker 1 is preferred for 10 partitions and leads 8 of them (20% elsewhere);
    # broker 2 is preferred for 10 and leads 9 (10% elsewhere: not above 10%)
    leadership = {("a", p): ([1, 2], 1 if p < 8 else 2) for p in range(10)}
    leadership |= {("b", p): ([2, 1], 2 if p < 9 else 1) for p in range(10)}
    assert imbalanced_partitions(leadership, 10) == [("a", 8), ("a", 9)]
    assert imbalanced_partitions(leadership, 20) == []
    assert sorted(imbalanced_partitions(leadership, 0)) == [("a", 8), ("a", 9), ("b", 9)]
    # a leaderless partition counts as led elsewhere
    assert imbalanced_partitions({("c", 0): ([3, 1], NO_LEADER)}, 10) == [("c", 0)]


def test_a_replica_in_a_failed_log_dir_is_not_live_for_its_partition() -> None:
    """KIP-112: an offline replica leaves the ISR and cannot lead; the broker's other replicas
    are unaffected."""
    from services.common.zk.layout import BrokerRegistration
    from services.controller.model import ControllerContext, LiveBroker

    ctx = ControllerContext(1, 0)
    ctx.brokers = {b: LiveBroker(BrokerRegistration(b, "h", 1, None), b) for b in (0, 1, 2)}
    ctx.offline_replicas[0] = {("t", 1)}
    assert ctx.live_for("t", 0) == {0, 1, 2}
    assert ctx.live_for("t", 1) == {1, 2}
    assert next_leader_isr([0, 1, 2], 0, [0, 1, 2], ctx.live_for("t", 1), False) == LeaderIsr(
        1, (1, 2)
    )
    assert next_leader_isr([1, 0, 2], 1, [1, 0, 2], ctx.live_for("t", 1), False) == LeaderIsr(
        1, (1, 2)
    )
