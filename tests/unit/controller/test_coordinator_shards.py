"""Placement of the __consumer_offsets shards on group coordinators (pure rules)."""

from __future__ import annotations

import itertools
from collections import Counter

from services.common.zk.layout import ShardMap, ShardOwner
from services.controller.coordinator_shards import MAX_EPOCH, place_shards, released


def ids() -> itertools.count[int]:
    return itertools.count(1000)


def owners(m: ShardMap) -> Counter[int]:
    return Counter(s.owner for s in m.shards.values())


def test_fresh_placement_is_balanced_with_epoch_0_and_one_producer_id_per_shard() -> None:
    m = place_shards(None, {1: 11, 2: 22}, 50, ids().__next__)
    assert m is not None and m.partitions == 50
    assert owners(m) == {1: 25, 2: 25}
    assert all(s.epoch == 0 for s in m.shards.values())
    assert len({s.producer_id for s in m.shards.values()}) == 50
    assert all(s.session == {1: 11, 2: 22}[s.owner] for s in m.shards.values())


def test_nothing_changes_while_owners_live() -> None:
    m = place_shards(None, {1: 11, 2: 22}, 10, ids().__next__)
    assert place_shards(m, {1: 11, 2: 22}, 10, ids().__next__) == m


def test_dead_owner_moves_everything_to_the_survivor_with_new_epochs() -> None:
    m = place_shards(None, {1: 11, 2: 22}, 10, ids().__next__)
    assert m is not None
    after = place_shards(m, {2: 22}, 10, ids().__next__)
    assert after is not None and owners(after) == {2: 10}
    for p, s in after.shards.items():
        before = m.shards[p]
        if before.owner == 2:
            assert s == before  # kept: same epoch
        else:
            assert s.epoch == before.epoch + 1 and s.producer_id == before.producer_id


def test_a_new_coordinator_takes_its_fair_share_only() -> None:
    m = place_shards(None, {1: 11}, 9, ids().__next__)
    after = place_shards(m, {1: 11, 2: 22, 3: 33}, 9, ids().__next__)
    assert after is not None and owners(after) == {1: 3, 2: 3, 3: 3}
    assert m is not None
    moved = [p for p in range(9) if after.shards[p] != m.shards[p]]
    assert len(moved) == 6
    assert all(after.shards[p].epoch == 1 for p in moved)


def test_a_reregistered_owner_is_a_new_owner() -> None:
    m = place_shards(None, {1: 11}, 4, ids().__next__)
    after = place_shards(m, {1: 99}, 4, ids().__next__)
    assert after is not None
    assert all(s.owner == 1 and s.epoch == 1 and s.session == 99 for s in after.shards.values())


def test_no_live_coordinator_leaves_the_map_alone() -> None:
    m = place_shards(None, {1: 11}, 4, ids().__next__)
    assert place_shards(m, {}, 4, ids().__next__) is None


def test_partition_growth_places_only_the_new_shards() -> None:
    m = place_shards(None, {1: 11, 2: 22}, 4, ids().__next__)
    after = place_shards(m, {1: 11, 2: 22}, 6, ids().__next__)
    assert after is not None and m is not None
    assert all(after.shards[p] == m.shards[p] for p in range(4))
    assert {after.shards[4].epoch, after.shards[5].epoch} == {0}
    assert owners(after) == {1: 3, 2: 3}


def test_epoch_overflow_takes_a_new_producer_id() -> None:
    m = ShardMap(1, {0: ShardOwner(1, MAX_EPOCH, 5, 11)})
    after = place_shards(m, {2: 22}, 1, iter([77]).__next__)
    assert after is not None and after.shards[0] == ShardOwner(2, 0, 77, 22)


def test_map_json_round_trip_keeps_sessions_and_reads_old_maps() -> None:
    m = ShardMap(2, {0: ShardOwner(1, 3, 7, 11), 1: ShardOwner(2, 0, 8, 22)})
    assert ShardMap.from_json(m.to_json()) == m
    old = b'{"version":1,"partitions":1,"shards":{"0":{"owner":1,"epoch":2,"producer_id":9}}}'
    assert ShardMap.from_json(old).shards[0] == ShardOwner(1, 2, 9, 0)


def no_ids() -> int:
    raise AssertionError("no shard is new: no producer id may be allocated")


def test_existing_shards_never_take_a_new_producer_id() -> None:
    m = place_shards(None, {1: 11, 2: 22}, 6, ids().__next__)
    assert m is not None
    for live in ({1: 11}, {1: 11, 2: 22, 3: 33}, {1: 12, 3: 33}):
        after = place_shards(m, live, 6, no_ids)
        assert after is not None
        assert [after.shards[p].producer_id for p in range(6)] == [
            m.shards[p].producer_id for p in range(6)
        ]
        m = after


def test_excess_goes_to_the_least_loaded_lowest_id_first() -> None:
    m = ShardMap(4, {p: ShardOwner(1, 5, 100 + p, 11) for p in range(4)})
    after = place_shards(m, {3: 33, 1: 11, 2: 22}, 4, no_ids)
    assert after is not None
    # fair share ceil(4/3) = 2: owner 1 keeps its lowest two; 2 then 3 take one each
    assert [after.shards[p].owner for p in range(4)] == [1, 1, 2, 3]
    assert [after.shards[p].epoch for p in range(4)] == [5, 5, 6, 6]


def test_a_shard_of_a_stale_map_beyond_the_partition_count_is_dropped() -> None:
    m = ShardMap(3, {p: ShardOwner(1, 0, 100 + p, 11) for p in range(3)})
    after = place_shards(m, {1: 11}, 2, no_ids)
    assert after is not None and sorted(after.shards) == [0, 1] and after.partitions == 2


def test_the_epoch_stays_below_32767() -> None:
    m = ShardMap(2, {0: ShardOwner(1, 32765, 5, 11), 1: ShardOwner(1, 32766, 6, 11)})
    after = place_shards(m, {2: 22}, 2, iter([77]).__next__)
    assert after is not None
    assert after.shards[0] == ShardOwner(2, 32766, 5, 22)
    assert after.shards[1] == ShardOwner(2, 0, 77, 22)


def test_the_topic_id_is_recorded_and_a_map_without_one_is_adopted() -> None:
    m = place_shards(None, {1: 11, 2: 22}, 4, ids().__next__)
    assert m is not None and m.topic_id == ""
    after = place_shards(m, {1: 11, 2: 22}, 4, no_ids, "T1")
    assert after is not None and after.topic_id == "T1" and after.shards == m.shards
    assert place_shards(after, {1: 11, 2: 22}, 4, no_ids, "T1") == after


def test_a_map_of_a_deleted_and_recreated_topic_starts_over() -> None:
    m = place_shards(None, {1: 11, 2: 22}, 4, ids().__next__, "OLD")
    after = place_shards(m, {1: 11, 2: 22}, 4, itertools.count(5000).__next__, "NEW")
    assert after is not None and m is not None and after.topic_id == "NEW"
    assert owners(after) == {1: 2, 2: 2}
    assert all(s.epoch == 0 and s.producer_id >= 5000 for s in after.shards.values())
    assert all(after.shards[p] != m.shards[p] for p in range(4))  # every owner resigns


def test_released_empties_the_map_once() -> None:
    m = place_shards(None, {1: 11}, 3, ids().__next__, "T1")
    assert released(m) == ShardMap(0, {})
    assert released(ShardMap(0, {})) is None
    assert released(None) is None


def test_map_json_keeps_the_topic_id() -> None:
    m = ShardMap(1, {0: ShardOwner(1, 3, 7, 11)}, "T1")
    assert b'"topic_id":"T1"' in m.to_json()
    assert ShardMap.from_json(m.to_json()) == m
    assert b"topic_id" not in ShardMap(0, {}).to_json()
