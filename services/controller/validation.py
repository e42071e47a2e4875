"""Request validation with Kafka's error codes and messages: topic names, manual replica
assignments, and topic config changes (AlterConfigs / IncrementalAlterConfigs)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from services.common.errors import ErrorCode, KafkaError
from services.common.topic_config import TOPIC_CONFIGS, ConfigType, format_value, validate_overrides

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


# ---- topic names (org.apache.kafka.common.internals.Topic) ----------------------------


def validate_topic_name(name: str) -> None:
    reason = None
    if not name:
        reason = "the empty string is not allowed"
    elif name == ".":
        reason = "'.' is not allowed"
    elif name == "..":
        reason = "'..' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = (
            f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
        )
    elif not _LEGAL.fullmatch(name):
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if reason:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def collides(a: str, b: str) -> bool:
    """Topics whose names differ only by '.' vs '_' collide in metric names."""
    return a.replace(".", "_") == b.replace(".", "_")


def check_collisions(name: str, existing: Iterable[str]) -> None:
    if not has_collision_chars(name):
        return
    colliding = [t for t in existing if t != name and collides(name, t)]
    if colliding:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topics: {', '.join(colliding)}",
        )


# ---- manual assignments ---------------------------------------------------------------


def _bad_assignment(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


def validate_create_assignment(
    assignment: Mapping[int, Sequence[int]], registered: set[int]
) -> None:
    """CreateTopics with explicit assignments (AdminZkClient.validateTopicCreate, plus KRaft's
    registered-broker and empty-list checks that ZooKeeper-mode Kafka lacks)."""
    if not assignment:
        raise _bad_assignment("partitions should be a consecutive 0-based integer sequence")
    for replicas in assignment.values():
        if not replicas:
            raise _bad_assignment("The manual partition assignment includes an empty replica list.")
    if len({len(r) for r in assignment.values()}) != 1:
        raise _bad_assignment("All partitions should have the same number of replicas")
    for replicas in assignment.values():
        if len(set(replicas)) != len(replicas):
            shown = {p: list(r) for p, r in sorted(assignment.items())}
            raise _bad_assignment(f"Duplicate replica assignment found: {shown}")
    if sorted(assignment) != list(range(len(assignment))):
        raise _bad_assignment("partitions should be a consecutive 0-based integer sequence")
    for _, replicas in sorted(assignment.items()):
        for broker in replicas:
            if broker not in registered:
                raise _bad_assignment(
                    f"The manual partition assignment includes broker {broker}, "
                    "but no such broker is registered."
                )


def new_partitions_assignment(
    assignments: Sequence[Sequence[int]],
    current_count: int,
    new_count: int,
    replication_factor: int,
    registered: set[int],
) -> dict[int, list[int]]:
    """CreatePartitions with explicit assignments for the new partitions, in order
    (ZkAdminManager.createPartitions + AdminZkClient.validateReplicaAssignment)."""
    unknown = sorted({b for replicas in assignments for b in replicas} - registered)
    if unknown:
        raise _bad_assignment(
            f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}."
        )
    increment = new_count - current_count
    if len(assignments) != increment:
        raise _bad_assignment(
            f"Increasing the number of partitions by {increment} "
            f"but {len(assignments)} assignments provided."
        )
    proposed = {current_count + i: list(r) for i, r in enumerate(assignments)}
    for partition, replicas in proposed.items():
        if not replicas:
            raise _bad_assignment(
                f"Cannot have replication factor of 0 for partition id {partition}."
            )
        if len(set(replicas)) != len(replicas):
            raise _bad_assignment(
                "Duplicate brokers not allowed in replica assignment: "
                f"{', '.join(map(str, replicas))} for partition id {partition}."
            )
    bad = [(p, len(r)) for p, r in sorted(proposed.items()) if len(r) != replication_factor]
    if bad:
        raise _bad_assignment(
            "Inconsistent replication factor between partitions, partition 0 has "
            f"{replication_factor} while partitions [{', '.join(str(p) for p, _ in bad)}] have "
            f"replication factors [{', '.join(str(n) for _, n in bad)}], respectively."
        )
    return proposed


# ---- config changes -------------------------------------------------------------------


class OpType(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigOp:
    key: str
    value: str
    op: int = OpType.SET


def topic_list_default(key: str) -> list[str] | None:
    """The default of a LIST topic config (None for other types); unknown names refused."""
    defn = TOPIC_CONFIGS.get(key)
    if defn is None:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {key}")
    if defn.type != ConfigType.LIST:
        return None
    return [s for s in format_value(defn.default).split(",") if s]


def apply_config_ops(
    current: Mapping[str, str],
    ops: Sequence[ConfigOp],
    incremental: bool,
    validate: Callable[[dict[str, str]], object] = validate_overrides,
    list_default: Callable[[str], list[str] | None] = topic_list_default,
) -> dict[str, str]:
    """The new config set of a resource (a topic's overrides by default), checked by
    ``validate``; ``list_default`` gives the default of a LIST config (None: not a list)."""
    if not incremental:
        result = {op.key: op.value for op in ops}
        validate(result)
        return result
    seen: set[str] = set()
    dupes: list[str] = []
    for op in ops:
        if op.key in seen and op.key not in dupes:
            dupes.append(op.key)
        seen.add(op.key)
    if dupes:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys : {','.join(dupes)}"
        )
    result = dict(current)
    for op in ops:
        if op.op == OpType.SET:
            result[op.key] = op.value
        elif op.op == OpType.DELETE:
            result.pop(op.key, None)
        elif op.op in (OpType.APPEND, OpType.SUBTRACT):
            default = list_default(op.key)
            if default is None:
                verb = "append" if op.op == OpType.APPEND else "subtract"
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    f"Config value {verb} is not allowed for config key: {op.key}",
                )
            old = [s for s in result[op.key].split(",") if s] if op.key in result else default
            values = [s for s in op.value.split(",") if s]
            if op.op == OpType.APPEND:
                new = old + [v for v in values if v not in old]
            else:
                new = [v for v in old if v not in values]
            result[op.key] = ",".join(new)
        else:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"Unknown alter config operation type: {op.op}"
            )
    validate(result)
    return result
