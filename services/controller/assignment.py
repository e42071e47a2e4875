"""Replica assignment: Kafka's ``AdminUtils.assignReplicasToBrokers``, rack-unaware and rack-aware.

Pure functions. Goals (as Kafka): spread replicas evenly, spread the followers of the partitions
led by one broker over the other brokers, and when every broker has a rack, put the replicas of a
partition on different racks.

Rack-unaware, 5 brokers, start index 0, shift 0::

    broker-0  broker-1  broker-2  broker-3  broker-4
    p0        p1        p2        p3        p4       (1st replica)
    p5        p6        p7        p8        p9       (1st replica)
    p4        p0        p1        p2        p3       (2nd replica)
    p8        p9        p5        p6        p7       (2nd replica)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from services.common.errors import ErrorCode, KafkaError


@dataclass(frozen=True, slots=True)
class BrokerMeta:
    id: int
    rack: str | None = None


class AssignmentError(KafkaError):
    """Kafka's ``AdminOperationException``: not an API exception, so Kafka answers it with
    UNKNOWN_SERVER_ERROR."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)


MIXED_RACKS = "Not all brokers have rack information for replica rack aware assignment."


def assign_replicas(
    num_partitions: int,
    replication_factor: int,
    brokers: Sequence[BrokerMeta],
    *,
    start_index: int = -1,
    start_partition_id: int = -1,
    next_replica_shift: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Partition id -> replica broker ids (first = preferred leader).

    ``brokers`` is used in the given order (callers sort by id). ``start_index`` < 0 picks a
    random start; ``next_replica_shift`` < 0 means "same as start_index when that is fixed, else
    random" (Kafka uses the fixed start index for both). Partition ids start at
    ``max(0, start_partition_id)``.
    """
    if num_partitions <= 0:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
        )
    if replication_factor <= 0:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
        )
    if replication_factor > len(brokers):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
        )
    rng = rng or random.Random()
    n = len(brokers)
    start = start_index if start_index >= 0 else rng.randrange(n)
    if next_replica_shift >= 0:
        shift = next_replica_shift
    else:
        shift = start_index if start_index >= 0 else rng.randrange(n)
    if all(b.rack is None for b in brokers):
        return _rack_unaware(
            num_partitions,
            replication_factor,
            [b.id for b in brokers],
            start,
            start_partition_id,
            shift,
        )
    if any(b.rack is None for b in brokers):
        raise AssignmentError(MIXED_RACKS)
    return _rack_aware(
        num_partitions,
        replication_factor,
        {b.id: b.rack or "" for b in brokers},
        start,
        start_partition_id,
        shift,
    )


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    """Index of the (j+2)-th replica: ``shift`` positions after the first, skipping the first."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_unaware(
    num_partitions: int,
    rf: int,
    broker_ids: list[int],
    start: int,
    start_partition_id: int,
    shift: int,
) -> dict[int, list[int]]:
    n = len(broker_ids)
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition_id)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [broker_ids[first]]
        replicas += [broker_ids[_replica_index(first, shift, j, n)] for j in range(rf - 1)]
        out[partition] = replicas
        partition += 1
    return out


def rack_alternated_brokers(broker_racks: dict[int, str]) -> list[int]:
    """Brokers ordered by taking one from each rack in turn (racks sorted, brokers sorted).

    rack1: 0,1,2 / rack2: 3,4,5 / rack3: 6,7,8 -> 0,3,6,1,4,7,2,5,8.
    """
    by_rack: dict[str, list[int]] = {}
    for broker, rack in broker_racks.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = {rack: sorted(ids) for rack, ids in by_rack.items()}
    racks = sorted(queues)
    out: list[int] = []
    i = 0
    while len(out) < len(broker_racks):
        queue = queues[racks[i]]
        if queue:
            out.append(queue.pop(0))
        i = (i + 1) % len(racks)
    return out


def _rack_aware(
    num_partitions: int,
    rf: int,
    broker_racks: dict[int, str],
    start: int,
    start_partition_id: int,
    shift: int,
) -> dict[int, list[int]]:
    num_racks = len(set(broker_racks.values()))
    arranged = rack_alternated_brokers(broker_racks)
    n = len(arranged)
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition_id)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {broker_racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                rack = broker_racks[broker]
                k += 1
                # Skip a broker whose rack already has a replica while some rack has none, and a
                # broker that already has one while some broker has none.
                if (rack not in racks_used or len(racks_used) == num_racks) and (
                    broker not in brokers_used or len(brokers_used) == n
                ):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        out[partition] = replicas
        partition += 1
    return out
