"""The rebalance planner: worked examples (grow 3->5 in zones a, b, c, a, b; shrink back; refusals)
and seeded random clusters checked for its invariants."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from services.controller.planner import Move, Node, Plan, PlanError, next_moves, plan

TP = tuple[str, int]


def rotated(partitions: int, brokers: list[int], rf: int, topic: str = "t") -> dict[TP, list[int]]:
    n = len(brokers)
    return {(topic, p): [brokers[(p + j) % n] for j in range(rf)] for p in range(partitions)}


def counts(target: dict[TP, list[int]]) -> Counter[int]:
    return Counter(b for r in target.values() for b in r)


def leaders(target: dict[TP, list[int]]) -> Counter[int]:
    return Counter(r[0] for r in target.values())


ZONES_5 = [Node(0, "a"), Node(1, "b"), Node(2, "c"), Node(3, "a"), Node(4, "b")]


def test_grow_three_to_five_in_zones_a_b_c_a_b() -> None:
    before = rotated(12, [0, 1, 2], 3)
    got = plan(before, ZONES_5)
    after = got.target
    # zones respected: one replica per zone
    zone = {n.id: n.zone for n in ZONES_5}
    assert all(len({zone[b] for b in r}) == 3 for r in after.values())
    # zone c has one node: it holds every partition; the others share the rest evenly
    assert counts(after) == {0: 6, 1: 6, 2: 12, 3: 6, 4: 6}
    lead = leaders(after)
    assert max(lead.values()) - min(lead.values()) <= 1
    assert sum(lead.values()) == 12
    # minimal: the 12 replicas the new nodes need are copied, nothing else
    assert sum(len(m.adding) for m in got.moves) == 12
    assert all(set(m.adding) <= {3, 4} for m in got.moves)
    # a plan of the target changes nothing
    assert plan(after, ZONES_5).moves == []


def test_shrink_five_to_three_drains_the_highest_ids() -> None:
    grown = plan(rotated(12, [0, 1, 2], 3), ZONES_5).target
    got = plan(grown, ZONES_5, excluded={3, 4})
    assert counts(got.target) == {0: 12, 1: 12, 2: 12}
    assert all(not ({3, 4} & set(r)) for r in got.target.values())
    lead = leaders(got.target)
    assert max(lead.values()) - min(lead.values()) <= 1
    # every move only removes 3 or 4 (and reorders for leadership)
    for m in got.moves:
        assert set(m.removing) <= {3, 4}


def test_shrink_that_loses_a_zone_is_refused() -> None:
    grown = plan(rotated(12, [0, 1, 2], 3), ZONES_5).target
    with pytest.raises(PlanError) as err:
        plan(grown, ZONES_5, excluded={2})
    assert str(err.value) == (
        "replication factor 3 needs 3 zones but only 2 (a, b) would remain once node 2 is drained"
    )


def test_shrink_below_replication_factor_is_refused() -> None:
    nodes = [Node(i) for i in range(4)]
    with pytest.raises(
        PlanError,
        match="replication factor 3 needs 3 storage nodes but only 2 "
        "would remain once nodes 2, 3 are drained",
    ):
        plan(rotated(8, [0, 1, 2, 3], 3), nodes, excluded={2, 3})


def test_shrink_the_data_cannot_fit_is_refused() -> None:
    nodes = [Node(i, capacity_bytes=1000) for i in range(4)]
    sizes = {("t", p): 200 for p in range(8)}  # 8 x 2 replicas x 200 = 3200 bytes
    plan(rotated(8, [0, 1, 2, 3], 2), nodes, sizes)  # fits in 4 x 950
    with pytest.raises(PlanError) as err:
        plan(rotated(8, [0, 1, 2, 3], 2), nodes, sizes, excluded={3})
    assert (
        "the data does not fit: 3200 bytes of replicas, the remaining nodes hold 2850 bytes"
        in str(err.value)
    )


def test_zone_violation_is_repaired() -> None:
    nodes = [Node(0, "a"), Node(1, "a"), Node(2, "b"), Node(3, "c")]
    got = plan({("t", 0): [0, 1, 2]}, nodes)
    assert sorted(got.target[("t", 0)]) in ([0, 2, 3], [1, 2, 3])
    assert got.target[("t", 0)][0] == 0  # the preferred leader stays


def test_fewer_zones_than_replicas_spread_as_evenly_as_possible() -> None:
    nodes = [Node(0, "a"), Node(1, "a"), Node(2, "b"), Node(3, "b")]
    got = plan(rotated(6, [0, 1, 2, 3], 3), nodes)
    zone = {n.id: n.zone for n in nodes}
    for r in got.target.values():
        assert max(Counter(zone[b] for b in r).values()) == 2  # ceil(3 / 2)


def test_bytes_balanced_within_tolerance() -> None:
    nodes = [Node(i) for i in range(4)]
    # the big partitions all start on nodes 0 and 1
    before = {("big", p): [0, 1] for p in range(4)} | {("small", p): [2, 3] for p in range(4)}
    sizes = {("big", p): 1000 for p in range(4)} | {("small", p): 10 for p in range(4)}
    got = plan(before, nodes, sizes, disk_tolerance=0.1)
    loads = got.bytes
    mean = sum(loads.values()) / len(loads)
    assert max(loads.values()) - min(loads.values()) <= 0.1 * mean
    assert all(v == 4 for v in got.replicas.values())


def test_in_sync_layout_needs_no_moves() -> None:
    nodes = [Node(i, "abc"[i % 3]) for i in range(6)]
    got = plan(rotated(30, list(range(6)), 3), nodes)
    assert plan(got.target, nodes).moves == []


def test_next_moves_bounds_concurrency() -> None:
    moves = [Move(("t", p), (0,), (1,), 10) for p in range(5)]
    assert [m.tp for m in next_moves(moves, [], 2)] == [("t", 0), ("t", 1)]
    assert [m.tp for m in next_moves(moves, [("t", 0)], 2)] == [("t", 1)]
    assert next_moves(moves, [("t", 0), ("x", 1)], 2) == []


def test_moves_start_with_the_cheapest() -> None:
    nodes = [Node(i) for i in range(3)]
    before = {("t", 0): [0, 1], ("t", 1): [0, 1], ("t", 2): [0, 1]}
    sizes = {("t", 0): 30, ("t", 1): 10, ("t", 2): 20}
    got = plan(before, nodes, sizes)
    copies = [m.bytes_to_copy for m in got.moves]
    assert copies == sorted(copies)


# ---- seeded random clusters -------------------------------------------------------------------


def random_cluster(
    rng: random.Random,
) -> tuple[dict[TP, list[int]], list[Node], dict[TP, int], set[int]]:
    n = rng.randint(1, 9)
    zoned = rng.random() < 0.7
    zone_names = "abcd"[: rng.randint(1, 4)]
    nodes = [Node(i, rng.choice(zone_names) if zoned else None) for i in range(n)]
    # ids not contiguous sometimes (a removed node)
    if n > 3 and rng.random() < 0.3:
        nodes = [Node(b.id + (10 if b.id >= 2 else 0), b.zone) for b in nodes]
    ids = [b.id for b in nodes]
    assignment: dict[TP, list[int]] = {}
    sizes: dict[TP, int] = {}
    for t in range(rng.randint(1, 4)):
        rf = rng.randint(1, min(3, n))
        # existing replicas on a random subset of nodes (as if nodes were added later)
        hosts = rng.sample(ids, rng.randint(rf, n))
        for p in range(rng.randint(1, 25)):
            assignment[(f"t{t}", p)] = rng.sample(hosts, rf)
            sizes[(f"t{t}", p)] = rng.choice([0, rng.randint(1, 10_000)])
    excluded = set(rng.sample(ids, rng.randint(0, max(0, n - 3))))
    return assignment, nodes, sizes, excluded


def check_invariants(
    got: Plan, assignment: dict[TP, list[int]], nodes: list[Node], excluded: set[int]
) -> None:
    zone = {b.id: b.zone for b in nodes}
    eligible = [b.id for b in nodes if b.id not in excluded]
    zones = {zone[b] for b in eligible}
    zoned = any(z is not None for z in zone.values())
    assert set(got.target) == set(assignment)
    for tp, r in got.target.items():
        assert len(r) == len(assignment[tp]) == len(set(r))
        assert not excluded & set(r), "a drained node still hosts a replica"
        assert set(r) <= set(eligible)
        if zoned:
            cap = math.ceil(len(r) / len(zones))
            assert max(Counter(zone[b] for b in r).values()) <= cap
    moved = {m.tp: m for m in got.moves}
    for tp, r in assignment.items():
        if tp in moved:
            assert list(moved[tp].old) == r and list(moved[tp].new) == got.target[tp]
        else:
            assert got.target[tp] == r
    # no single replica move left that evens two nodes out
    c = counts(got.target)
    for x in eligible:
        for y in eligible:
            if c[x] - c[y] < 2:
                continue
            for tp, r in got.target.items():
                if x in r and y not in r:
                    if zoned:
                        others = Counter(zone[b] for b in r if b != x)
                        if others[zone[y]] + 1 > math.ceil(len(r) / len(zones)):
                            continue
                    raise AssertionError(f"{tp}: moving {x}->{y} would even {c[x]} vs {c[y]}")
    if not zoned:
        assert max(c[b] for b in eligible) - min(c[b] for b in eligible) <= 1
    # no leadership handoff left that evens two nodes out
    lead = Counter({b: 0 for b in eligible}) + leaders(got.target)
    for tp, r in got.target.items():
        for y in r[1:]:
            assert lead[r[0]] - lead.get(y, 0) < 2, f"{tp}: leadership {r[0]}->{y} would even"


@pytest.mark.parametrize("seed", range(300))
def test_random_clusters_keep_the_invariants(seed: int) -> None:
    rng = random.Random(seed)
    assignment, nodes, sizes, excluded = random_cluster(rng)
    try:
        got = plan(assignment, nodes, sizes, excluded=excluded)
    except PlanError as exc:
        message = str(exc)
        assert "\n" not in message
        eligible = [b for b in nodes if b.id not in excluded]
        rf = max(len(r) for r in assignment.values())
        zones_left = {b.zone for b in eligible}
        zones_all = {b.zone for b in nodes}
        assert (
            len(eligible) < rf
            or len(zones_left) < min(rf, len(zones_all))
            or ("cannot be spread" in message)
        ), message
        return
    check_invariants(got, assignment, nodes, excluded)
    # deterministic, whatever the order of the input
    shuffled = dict(rng.sample(sorted(assignment.items()), len(assignment)))
    again = plan(shuffled, list(reversed(nodes)), sizes, excluded=set(excluded))
    assert again.target == got.target and again.moves == got.moves
    # planning from the target moves nothing more (minimal movement: no churn)
    live = [b for b in nodes if b.id not in excluded]
    assert plan(got.target, live, sizes).moves == []
