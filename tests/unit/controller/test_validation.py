"""Kafka's validation messages: topic names, manual assignments, config changes."""

from __future__ import annotations

import pytest

from services.common.errors import ErrorCode, KafkaError
from services.controller.validation import (
    ConfigOp,
    OpType,
    apply_config_ops,
    check_collisions,
    new_partitions_assignment,
    validate_create_assignment,
    validate_topic_name,
)


def _fails(fn, *args) -> KafkaError:  # type: ignore[no-untyped-def]
    with pytest.raises(KafkaError) as info:
        fn(*args)
    return info.value


@pytest.mark.parametrize("name", ["a", "A-b_c.9", "x" * 249, "__consumer_offsets"])
def test_valid_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "the empty string is not allowed"),
        (".", "'.' is not allowed"),
        ("..", "'..' is not allowed"),
        ("x" * 250, f"the length of '{'x' * 250}' is longer than the max allowed length 249"),
        (
            "a b",
            "'a b' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'",
        ),
        (
            "é",
            "'é' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'",
        ),
    ],
)
def test_invalid_topic_names(name: str, reason: str) -> None:
    err = _fails(validate_topic_name, name)
    assert err.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert err.message == f"Topic name is invalid: {reason}"


def test_collisions() -> None:
    check_collisions("a.b", ["c", "a.b"])  # itself is not a collision
    check_collisions("ab", ["a_b"])  # no collision chars in the new name
    err = _fails(check_collisions, "a.b", ["a_b", "x"])
    assert err.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert err.message == "Topic 'a.b' collides with existing topics: a_b"


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ({0: [1], 1: [1, 2]}, "All partitions should have the same number of replicas"),
        ({0: [1, 1]}, "Duplicate replica assignment found: {0: [1, 1]}"),
        ({0: [1], 2: [2]}, "partitions should be a consecutive 0-based integer sequence"),
        ({1: [1]}, "partitions should be a consecutive 0-based integer sequence"),
        (
            {0: [1, 9]},
            "The manual partition assignment includes broker 9, but no such broker is registered.",
        ),
        ({0: []}, "The manual partition assignment includes an empty replica list."),
    ],
)
def test_create_assignment_errors(assignment: dict[int, list[int]], message: str) -> None:
    err = _fails(validate_create_assignment, assignment, {1, 2})
    assert err.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert err.message == message


def test_create_assignment_ok() -> None:
    validate_create_assignment({0: [1, 2], 1: [2, 1]}, {1, 2})


@pytest.mark.parametrize(
    ("assignments", "message"),
    [
        ([[12]], "Unknown broker(s) in replica assignment: 12."),
        ([[1]], "Increasing the number of partitions by 2 but 1 assignments provided."),
        ([[1], []], "Cannot have replication factor of 0 for partition id 4."),
        (
            [[1], [2, 2]],
            "Duplicate brokers not allowed in replica assignment: 2, 2 for partition id 4.",
        ),
        (
            [[1], [1, 2]],
            "Inconsistent replication factor between partitions, partition 0 has 1 while "
            "partitions [4] have replication factors [2], respectively.",
        ),
    ],
)
def test_new_partitions_assignment_errors(assignments: list[list[int]], message: str) -> None:
    err = _fails(new_partitions_assignment, assignments, 3, 5, 1, {1, 2})
    assert err.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert err.message == message


def test_new_partitions_assignment_numbers_from_current_count() -> None:
    assert new_partitions_assignment([[2], [1]], 3, 5, 1, {1, 2}) == {3: [2], 4: [1]}


# ---- config changes ---------------------------------------------------------------------


def test_incremental_set_delete() -> None:
    current = {"retention.ms": "1000", "segment.bytes": "1048576"}
    new = apply_config_ops(
        current,
        [
            ConfigOp("retention.ms", "", OpType.DELETE),
            ConfigOp("min.insync.replicas", "2", OpType.SET),
        ],
        True,
    )
    assert new == {"segment.bytes": "1048576", "min.insync.replicas": "2"}
    assert current == {"retention.ms": "1000", "segment.bytes": "1048576"}  # not mutated


def test_append_and_subtract_on_list_configs() -> None:
    # APPEND starts from the default ("delete") when there is no override.
    new = apply_config_ops({}, [ConfigOp("cleanup.policy", "compact", OpType.APPEND)], True)
    assert new == {"cleanup.policy": "delete,compact"}
    again = apply_config_ops(new, [ConfigOp("cleanup.policy", "compact", OpType.APPEND)], True)
    assert again == {"cleanup.policy": "delete,compact"}
    less = apply_config_ops(new, [ConfigOp("cleanup.policy", "delete", OpType.SUBTRACT)], True)
    assert less == {"cleanup.policy": "compact"}


def test_append_to_non_list_is_invalid_request() -> None:
    err = _fails(apply_config_ops, {}, [ConfigOp("retention.ms", "5", OpType.APPEND)], True)
    assert err.code == ErrorCode.INVALID_REQUEST
    assert err.message == "Config value append is not allowed for config key: retention.ms"


def test_duplicate_keys_are_invalid_request() -> None:
    ops = [ConfigOp("retention.ms", "5"), ConfigOp("retention.ms", "6")]
    err = _fails(apply_config_ops, {}, ops, True)
    assert err.code == ErrorCode.INVALID_REQUEST
    assert err.message == "Error due to duplicate config keys : retention.ms"


def test_invalid_values_and_names_are_invalid_config() -> None:
    err = _fails(apply_config_ops, {}, [ConfigOp("retention.ms", "soon")], True)
    assert err.code == ErrorCode.INVALID_CONFIG
    assert "retention.ms" in err.message
    err = _fails(apply_config_ops, {}, [ConfigOp("no.such.config", "1")], True)
    assert err.code == ErrorCode.INVALID_CONFIG
    assert err.message == "Unknown topic config name: no.such.config"


def test_full_replace_drops_everything_else() -> None:
    new = apply_config_ops({"retention.ms": "1000"}, [ConfigOp("segment.ms", "60000")], False)
    assert new == {"segment.ms": "60000"}
