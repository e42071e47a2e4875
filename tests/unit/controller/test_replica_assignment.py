"""ReplicaAssignment (Kafka's KIP-455 arithmetic), target validation and the ZooKeeper JSON of
reassignments (topic znode adding/removing_replicas, legacy /admin/reassign_partitions)."""

from __future__ import annotations

import json

import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.zk import layout
from services.controller.replica_assignment import ReplicaAssignment, validate_target


def test_move_keeps_target_first_then_removed() -> None:
    a = ReplicaAssignment((0, 1, 2)).reassign_to([2, 3, 4])
    assert a == ReplicaAssignment((2, 3, 4, 0, 1), adding=(3, 4), removing=(0, 1))
    assert a.origin == (2, 0, 1) and set(a.origin) == {0, 1, 2}
    assert a.target == (2, 3, 4)
    assert a.is_being_reassigned


def test_replication_factor_up_and_down() -> None:
    up = ReplicaAssignment((0, 1)).reassign_to([0, 1, 2])
    assert (up.replicas, up.adding, up.removing) == ((0, 1, 2), (2,), ())
    down = ReplicaAssignment((0, 1, 2)).reassign_to([1, 2])
    assert (down.replicas, down.adding, down.removing) == ((1, 2, 0), (), (0,))


def test_cancel_reverts_to_origin_and_changing_target_drops_unneeded_adds() -> None:
    moving = ReplicaAssignment((0, 1)).reassign_to([2, 3])
    cancelled = moving.reassign_to(moving.origin)
    assert cancelled == ReplicaAssignment((0, 1))
    assert not cancelled.is_being_reassigned
    redirected = moving.reassign_to([3, 4])
    assert redirected == ReplicaAssignment((3, 4, 0, 1), adding=(3, 4), removing=(0, 1))
    assert [r for r in moving.replicas if r not in redirected.replicas] == [2]


def test_same_set_other_order_is_a_plain_reorder() -> None:
    a = ReplicaAssignment((0, 1, 2)).reassign_to([2, 1, 0])
    assert a == ReplicaAssignment((2, 1, 0)) and not a.is_being_reassigned


@pytest.mark.parametrize(
    ("replicas", "live", "fragment"),
    [
        ([], {0, 1, 2}, "Empty replica list"),
        ([1, 1], {0, 1, 2}, "Duplicate replica ids"),
        ([-1, 0], {0, 1, 2}, "Invalid broker id"),
        ([0, 7], {0, 1, 2}, "brokers that are not alive"),
    ],
)
def test_invalid_targets(replicas: list[int], live: set[int], fragment: str) -> None:
    with pytest.raises(KafkaError) as err:
        validate_target(ReplicaAssignment((0, 1)), replicas, live)
    assert err.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert fragment in err.value.message


def test_dead_broker_already_a_replica_is_allowed() -> None:
    # only replicas to add must be alive (Kafka's validateReplicas)
    validate_target(ReplicaAssignment((0, 5)), [5, 1], {0, 1})


def test_topic_znode_round_trip_with_reassignment() -> None:
    data = layout.topic_assignment_json(
        {0: [2, 3, 0, 1], 1: [1, 2]}, "abc", adding={0: [2, 3], 1: []}, removing={0: [0, 1]}
    )
    body = json.loads(data)
    assert body["adding_replicas"] == {"0": [2, 3]}
    assert body["removing_replicas"] == {"0": [0, 1]}
    assert layout.parse_topic_reassignment(data) == ({0: [2, 3]}, {0: [0, 1]})
    assert layout.parse_topic_assignment(data) == ({0: [2, 3, 0, 1], 1: [1, 2]}, "abc")


def test_legacy_znode_json() -> None:
    text = (
        '{"version":1,"partitions":[{"topic":"t","partition":1,"replicas":[3,1],'
        '"log_dirs":["any","any"]},{"topic":"t","partition":0,"replicas":[1,2]}]}'
    )
    moves = layout.parse_reassign_partitions(text.encode())
    assert moves == {("t", 1): [3, 1], ("t", 0): [1, 2]}
    assert layout.parse_reassign_partitions(layout.reassign_partitions_json(moves)) == moves
    for bad in (
        b"{",
        b'{"partitions":[{"topic":"t"}]}',
        b'{"partitions":[{"topic":"t","partition":0,"replicas":"1,2"}]}',
    ):
        with pytest.raises(ValueError):
            layout.parse_reassign_partitions(bad)
