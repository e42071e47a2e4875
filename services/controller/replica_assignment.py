"""A partition's replica assignment during a reassignment (Kafka's ``ReplicaAssignment``, KIP-455).

``replicas`` is the full set RS = target + (origin - target), ``adding`` AR = RS - origin and
``removing`` RR = RS - target, exactly as stored in the topic znode; origin and target are
derived from them. Pure values and validation, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from services.common.errors import ErrorCode, KafkaError


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def origin(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """The assignment while moving from this one's origin to ``target`` (a cancel is
        ``reassign_to(origin)``: nothing added or removed any more)."""
        origin = self.origin
        full = tuple(dict.fromkeys([*target, *origin]))
        return ReplicaAssignment(
            full,
            tuple(r for r in full if r not in origin),
            tuple(r for r in full if r not in target),
        )


def validate_target(
    current: ReplicaAssignment, replicas: Sequence[int], live: Collection[int]
) -> None:
    """Kafka's ``validateReplicas``: INVALID_REPLICA_ASSIGNMENT for an empty list, duplicates,
    negative ids or a replica to add on a broker that is not alive."""
    if not replicas:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Empty replica list specified in partition reassignment.",
        )
    if len(set(replicas)) != len(replicas):
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Duplicate replica ids in partition reassignment replica list: {list(replicas)}",
        )
    if any(r < 0 for r in replicas):
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Invalid broker id in replica list: {list(replicas)}",
        )
    adding = current.reassign_to(replicas).adding
    if not set(adding) <= set(live):
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, "
            f"live broker list: {sorted(live)}",
        )
