"""Replica assignment: Kafka's worked examples and properties (seeds checklist section 6)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.errors import ErrorCode, KafkaError
from services.controller.assignment import (
    AssignmentError,
    BrokerMeta,
    assign_replicas,
    rack_alternated_brokers,
)


def brokers(n: int) -> list[BrokerMeta]:
    return [BrokerMeta(i) for i in range(n)]


def test_ra03_five_brokers_rf3_start0_shift0() -> None:
    a = assign_replicas(10, 3, brokers(5), start_index=0, next_replica_shift=0)
    assert a[0] == [0, 1, 2]
    assert a[5] == [0, 2, 3]
    # first replicas walk the broker list
    assert [a[p][0] for p in range(10)] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]


def test_kafka_doc_table_rack_unaware() -> None:
    """The table in AdminUtils' doc comment (5 brokers, 10 partitions, 3 replicas)."""
    a = assign_replicas(10, 3, brokers(5), start_index=0)
    second = {b: sorted(p for p in a if a[p][1] == b) for b in range(5)}
    third = {b: sorted(p for p in a if a[p][2] == b) for b in range(5)}
    assert second == {0: [4, 8], 1: [0, 9], 2: [1, 5], 3: [2, 6], 4: [3, 7]}
    assert third == {0: [3, 7], 1: [4, 8], 2: [0, 9], 3: [1, 5], 4: [2, 6]}


def test_fixed_start_index_is_also_the_shift() -> None:
    """Kafka uses fixedStartIndex for nextReplicaShift too."""
    assert assign_replicas(3, 2, brokers(4), start_index=2) == assign_replicas(
        3, 2, brokers(4), start_index=2, next_replica_shift=2
    )
    assert assign_replicas(1, 2, brokers(4), start_index=2) == {0: [2, 1]}


def test_start_partition_id_continues_numbering() -> None:
    a = assign_replicas(3, 1, brokers(3), start_index=0, start_partition_id=4)
    assert sorted(a) == [4, 5, 6]
    assert a[4] == [1]  # (4 + 0) % 3


def test_random_start_uses_rng() -> None:
    a = assign_replicas(6, 2, brokers(3), rng=random.Random(7))
    b = assign_replicas(6, 2, brokers(3), rng=random.Random(7))
    assert a == b
    starts = {assign_replicas(1, 1, brokers(5), rng=random.Random(s))[0][0] for s in range(40)}
    assert len(starts) > 1


@pytest.mark.parametrize(
    ("parts", "rf", "n", "code", "message"),
    [
        (0, 1, 3, ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."),
        (-2, 1, 3, ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."),
        (
            1,
            0,
            3,
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0.",
        ),
        (
            1,
            3,
            1,
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor: 3 larger than available brokers: 1.",
        ),
        (
            1,
            1,
            0,
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor: 1 larger than available brokers: 0.",
        ),
    ],
)
def test_invalid_arguments(parts: int, rf: int, n: int, code: ErrorCode, message: str) -> None:
    with pytest.raises(KafkaError) as info:
        assign_replicas(parts, rf, brokers(n))
    assert info.value.code == code
    assert info.value.message == message


def test_mixed_rack_information_is_refused() -> None:
    mixed = [BrokerMeta(0, "a"), BrokerMeta(1, None), BrokerMeta(2, "b")]
    with pytest.raises(AssignmentError) as info:
        assign_replicas(3, 2, mixed)
    assert (
        info.value.message
        == "Not all brokers have rack information for replica rack aware assignment."
    )
    assert info.value.code == ErrorCode.UNKNOWN_SERVER_ERROR  # AdminOperationException


def test_ra06_rack_alternated_order_two_racks() -> None:
    racks = {0: "rack1", 1: "rack1", 2: "rack1", 3: "rack2", 4: "rack2", 5: "rack2"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 4, 2, 5]


def test_rack_alternated_order_single_broker_racks() -> None:
    """0,1,2 in rack1 and 3,4,5 each in a rack of its own: one pass over the four racks takes
    0,3,4,5, then rack1 alone gives 1,2 (the seeds' "0,3,1,4,2,5" is the two-rack case)."""
    racks = {0: "rack1", 1: "rack1", 2: "rack1", 3: "rack2", 4: "rack3", 5: "rack4"}
    assert rack_alternated_brokers(racks) == [0, 3, 4, 5, 1, 2]


def test_kafka_doc_example_rack_aware() -> None:
    """AdminUtils' doc comment: 0->rack1 1->rack3 2->rack3 3->rack2 4->rack2 5->rack1."""
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]
    metas = [BrokerMeta(b, r) for b, r in racks.items()]
    a = assign_replicas(7, 3, metas, start_index=0)
    assert a == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


def _racked(layout: list[int]) -> list[BrokerMeta]:
    out, b = [], 0
    for rack, count in enumerate(layout):
        for _ in range(count):
            out.append(BrokerMeta(b, f"rack{rack}"))
            b += 1
    return out


def test_ra07_rack_spread_and_leader_balance() -> None:
    metas = _racked([2, 2, 2])  # 3 racks of 2 brokers
    rack_of = {m.id: m.rack for m in metas}
    a = assign_replicas(12, 3, metas, rng=random.Random(1))
    for replicas in a.values():
        assert len({rack_of[r] for r in replicas}) == 3
    leaders = Counter(r[0] for r in a.values())
    assert set(leaders.values()) == {2}
    replicas = Counter(b for r in a.values() for b in r)
    assert set(replicas.values()) == {6}
    a2 = assign_replicas(6, 2, metas, rng=random.Random(2))
    for replicas2 in a2.values():
        assert len({rack_of[r] for r in replicas2}) == 2  # min(#racks, RF)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 12), data=st.data())
def test_property_rack_unaware(n: int, data: st.DataObject) -> None:
    rf = data.draw(st.integers(1, n))
    parts = data.draw(st.integers(1, 60))
    start = data.draw(st.integers(0, n - 1))
    shift = data.draw(st.integers(0, n - 1))
    a = assign_replicas(parts, rf, brokers(n), start_index=start, next_replica_shift=shift)
    assert sorted(a) == list(range(parts))
    for replicas in a.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
    leaders = Counter(r[0] for r in a.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in range(n)) <= 1
    counts = Counter(b for r in a.values() for b in r)
    if parts % n == 0:
        assert {counts[b] for b in range(n)} == {parts * rf // n}
    else:
        assert max(counts.values()) - min(counts.get(b, 0) for b in range(n)) <= rf


@settings(max_examples=200, deadline=None)
@given(layout=st.lists(st.integers(1, 4), min_size=1, max_size=5), data=st.data())
def test_property_rack_aware(layout: list[int], data: st.DataObject) -> None:
    metas = _racked(layout)
    n, num_racks = len(metas), len(layout)
    rack_of = {m.id: m.rack for m in metas}
    rf = data.draw(st.integers(1, n))
    parts = data.draw(st.integers(1, 40))
    a = assign_replicas(parts, rf, metas, rng=random.Random(data.draw(st.integers(0, 1000))))
    for replicas in a.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert len({rack_of[r] for r in replicas}) == min(num_racks, rf)
    leaders = Counter(r[0] for r in a.values())
    assert max(leaders.values()) - min(leaders.get(m.id, 0) for m in metas) <= 1


@settings(max_examples=50, deadline=None)
@given(racks=st.integers(2, 4), per_rack=st.integers(1, 3), passes=st.integers(1, 3))
def test_property_rack_aware_even_when_racks_are_equal(
    racks: int, per_rack: int, passes: int
) -> None:
    """RF = #racks and equal racks: replicas and leaders exactly even over the brokers."""
    metas = _racked([per_rack] * racks)
    n = len(metas)
    a = assign_replicas(n * passes, racks, metas, start_index=0)
    counts = Counter(b for r in a.values() for b in r)
    assert set(counts.values()) == {passes * racks}
    assert set(Counter(r[0] for r in a.values()).values()) == {passes}
