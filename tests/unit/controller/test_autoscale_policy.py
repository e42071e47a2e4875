"""The autoscaler's policy: scale up past the target, down below target - hysteresis, bounds,
cooldown, and the reasons it gives."""

from __future__ import annotations

from services.controller.autoscale_policy import (
    HOLD,
    SCALE_DOWN,
    SCALE_UP,
    NodeLoad,
    Policy,
    decide,
)

GB = 1_000_000_000
POLICY = Policy(
    disk_target_percent=70, hysteresis_percent=20, min_nodes=3, max_nodes=6, cooldown_ms=60_000
)


def disks(*used_gb: float, cap_gb: int = 100) -> dict[int, NodeLoad]:
    return {i: NodeLoad(int(u * GB), cap_gb * GB) for i, u in enumerate(used_gb)}


def test_scale_up_past_the_disk_target() -> None:
    d = decide(disks(80, 75, 78), POLICY, min_nodes_for_data=3, now_ms=10**9)
    assert d.action == SCALE_UP
    assert d.nodes == 4  # 233 GB / (100 GB x 70%) = 3.33
    assert d.reason == "disk use 77.7% of capacity, above the 70% target: 4 nodes needed"


def test_scale_up_is_bounded_by_max_nodes() -> None:
    d = decide(
        disks(99, 99, 99), Policy(max_nodes=4, min_nodes=3), min_nodes_for_data=3, now_ms=10**9
    )
    assert (d.action, d.nodes) == (SCALE_UP, 4)
    d = decide(
        disks(99, 99, 99, 99), Policy(max_nodes=4, min_nodes=3), min_nodes_for_data=3, now_ms=10**9
    )
    assert d.action == HOLD and d.reason.startswith("at max.nodes 4: disk use 99.0%")


def test_within_target_holds() -> None:
    d = decide(disks(60, 60, 60, 60), POLICY, min_nodes_for_data=3, now_ms=10**9)
    # with 3 nodes: 80% > 50% (70 - 20): keep 4
    assert (d.action, d.nodes) == (HOLD, 4)
    assert d.reason == "within the target at 4 nodes"


def test_scale_down_below_target_minus_hysteresis_drains_the_highest_id() -> None:
    loads = {
        0: NodeLoad(30 * GB, 100 * GB),
        1: NodeLoad(30 * GB, 100 * GB),
        2: NodeLoad(30 * GB, 100 * GB),
        4: NodeLoad(20 * GB, 100 * GB),
        3: NodeLoad(20 * GB, 100 * GB),
    }
    d = decide(loads, POLICY, min_nodes_for_data=3, now_ms=10**9)
    assert (d.action, d.nodes, d.remove) == (SCALE_DOWN, 4, (4,))
    assert d.reason == (
        "disk use 26.0%; with 4 nodes it would be 32.5%, below 50% (target 70% - hysteresis 20%)"
    )


def test_hysteresis_keeps_a_node_that_would_push_the_rest_near_the_target() -> None:
    # 4 nodes at 40%: 3 nodes would be at 53.3%, under 70% but above 50%: stay
    d = decide(disks(40, 40, 40, 40), POLICY, min_nodes_for_data=3, now_ms=10**9)
    assert d.action == HOLD


def test_never_below_min_nodes_nor_the_replication_factor() -> None:
    d = decide(disks(1, 1, 1), POLICY, min_nodes_for_data=3, now_ms=10**9)
    assert d.action == HOLD and "fewest allowed" in d.reason
    d = decide(
        disks(1, 1, 1, 1), Policy(min_nodes=1, cooldown_ms=0), min_nodes_for_data=4, now_ms=10**9
    )
    assert d.action == HOLD
    d = decide(disks(1, 1), POLICY, min_nodes_for_data=3, now_ms=10**9)
    assert (d.action, d.nodes) == (SCALE_UP, 3)
    assert d.reason == (
        "2 storage nodes, fewer than the 3 needed (min.nodes 3, largest replication factor 3)"
    )


def test_cooldown_holds_both_ways() -> None:
    d = decide(
        disks(80, 80, 80), POLICY, min_nodes_for_data=3, last_scale_ms=100_000, now_ms=130_000
    )
    assert d.action == HOLD
    assert d.reason.startswith("cooldown: disk use 80.0% of capacity") and d.reason.endswith(
        "30 s left"
    )
    d = decide(
        disks(1, 1, 1, 1), POLICY, min_nodes_for_data=3, last_scale_ms=100_000, now_ms=159_500
    )
    assert d.action == HOLD and d.reason.endswith("1 s left")
    d = decide(
        disks(1, 1, 1, 1), POLICY, min_nodes_for_data=3, last_scale_ms=100_000, now_ms=160_000
    )
    assert d.action == SCALE_DOWN


def test_busy_holds() -> None:
    d = decide(
        disks(99, 99, 99), POLICY, min_nodes_for_data=3, busy="2 moves in flight", now_ms=10**9
    )
    assert (d.action, d.reason) == (HOLD, "2 moves in flight")


def test_bytes_in_and_partitions_are_signals() -> None:
    loads = {i: NodeLoad(0, 100 * GB, bytes_in_per_sec=40e6, replicas=10) for i in range(3)}
    d = decide(
        loads,
        Policy(bytes_in_per_node_max=30_000_000, cooldown_ms=0),
        min_nodes_for_data=3,
        now_ms=1,
    )
    assert (d.action, d.nodes) == (SCALE_UP, 4)
    assert "bytes in 120000000/s, over 30000000/s per node: 4 nodes needed" in d.reason
    d = decide(
        loads, Policy(partitions_per_node_max=6, cooldown_ms=0), min_nodes_for_data=3, now_ms=1
    )
    assert (d.action, d.nodes) == (SCALE_UP, 5)
    assert "30 replicas, over 6 per node: 5 nodes needed" in d.reason


def test_no_signal_never_scales_down() -> None:
    loads = {i: NodeLoad(0, 0) for i in range(5)}
    d = decide(loads, POLICY, min_nodes_for_data=3, now_ms=10**9)
    assert d.action == HOLD and d.reason.startswith("no signal")
