"""The active controller's in-memory view of the cluster (Kafka's ControllerContext)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field

from services.common.rpc.kafkapy.v1 import storage_pb2
from services.common.zk import layout
from services.common.zk.layout import BrokerRegistration
from services.controller.elections import NO_LEADER


@functools.lru_cache(maxsize=65536)
def _topic_id_bytes(topic_id: str) -> bytes:
    """A topic id's 16 bytes (every order of a partition carries them: decoded once per topic)."""
    return layout.topic_id_from_str(topic_id)


@dataclass(slots=True)
class PartitionState:
    """Contents of ``/brokers/topics/<t>/partitions/<p>/state`` plus its znode version."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    zk_version: int

    def to_zk(self) -> layout.PartitionStateZk:
        return layout.PartitionStateZk(
            self.leader, self.leader_epoch, list(self.isr), self.controller_epoch
        )


@dataclass(slots=True)
class TopicState:
    name: str
    topic_id: str  # Kafka's string form (base64url, no padding)
    assignment: dict[int, list[int]]
    config: dict[str, str] = field(default_factory=dict)
    # Missing key = NewPartition: no leader elected yet, no state znode.
    states: dict[int, PartitionState] = field(default_factory=dict)
    # partitions being reassigned (KIP-455): replicas being added / removed; ``assignment``
    # then holds the full replica set (target replicas first, then the removed ones)
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)

    def assignment_json(self) -> bytes:
        """The topic znode as Kafka writes it."""
        return layout.topic_assignment_json(
            self.assignment, self.topic_id, self.adding, self.removing
        )

    @property
    def topic_id_bytes(self) -> bytes:
        return _topic_id_bytes(self.topic_id)

    def order(self, partition: int, *, is_new: bool = False) -> storage_pb2.PartitionState:
        """The UpdatePartitions entry of a partition that has a leader/ISR state."""
        st = self.states[partition]
        return storage_pb2.PartitionState(
            topic=self.name,
            partition=partition,
            leader=st.leader,
            leader_epoch=st.leader_epoch,
            isr=list(st.isr),
            replicas=list(self.assignment[partition]),
            partition_epoch=st.zk_version,
            is_new=is_new,
            topic_id=self.topic_id_bytes,
            config=dict(self.config),
        )


@dataclass(slots=True)
class LiveBroker:
    registration: BrokerRegistration
    epoch: int  # czxid of the ephemeral registration (Kafka's broker epoch)


@dataclass(slots=True)
class ControllerContext:
    epoch: int
    epoch_zk_version: int
    brokers: dict[int, LiveBroker] = field(default_factory=dict)
    topics: dict[str, TopicState] = field(default_factory=dict)
    topics_to_delete: set[str] = field(default_factory=set)
    # replicas in a failed log dir of a live broker (KIP-112), until that broker restarts
    offline_replicas: dict[int, set[tuple[str, int]]] = field(default_factory=dict)
    # brokers in a controlled shutdown, until they deregister: never elected leader again
    shutting_down: set[int] = field(default_factory=set)
    # topics whose assignment changed (or that came, went, or were queued for deletion) since
    # services.controller.replica_counts last looked
    changed_topics: set[str] = field(default_factory=set)

    def topic_changed(self, name: str) -> None:
        self.changed_topics.add(name)

    def preferred_imbalance_count(self) -> int:
        """Partitions led by another replica than their preferred (first) one."""
        count = 0
        for name, topic in self.topics.items():
            if name in self.topics_to_delete:
                continue
            for p, st in topic.states.items():
                replicas = topic.assignment.get(p)
                if replicas and st.leader != replicas[0]:
                    count += 1
        return count

    @property
    def live_ids(self) -> set[int]:
        return set(self.brokers)

    def live_for(self, topic: str, partition: int) -> set[int]:
        """The brokers whose replica of the partition can serve: live, its log dir online."""
        key = (topic, partition)
        return {b for b in self.brokers if key not in self.offline_replicas.get(b, ())}

    def partitions_on(self, broker_id: int) -> list[tuple[TopicState, int]]:
        """Every partition with a replica on ``broker_id`` and a leader/ISR state (new partitions
        without one and topics queued for deletion excluded)."""
        return [(t, p) for t, p, replicas in self.partitions_with_state() if broker_id in replicas]

    def partitions_with_state(self) -> Iterator[tuple[TopicState, int, list[int]]]:
        """(topic, partition, replicas) of every partition with a leader/ISR state, topic by
        topic, partitions in order (topics queued for deletion excluded)."""
        for name, topic in self.topics.items():
            if name in self.topics_to_delete:
                continue
            states = topic.states
            for p, replicas in sorted(topic.assignment.items()):
                if p in states:
                    yield topic, p, replicas

    def offline_partition_count(self) -> int:
        live = self.live_ids
        count = 0
        for name, topic in self.topics.items():
            if name in self.topics_to_delete:
                continue
            for p in topic.assignment:
                st = topic.states.get(p)
                if st is None or st.leader == NO_LEADER or st.leader not in live:
                    count += 1
        return count

    def reassigning_count(self) -> int:
        """Partitions with replicas being added or removed (KIP-455)."""
        return sum(len(set(t.adding) | set(t.removing)) for t in self.topics.values())

    def partition_count(self) -> int:
        return sum(len(t.assignment) for t in self.topics.values())


Part = tuple[TopicState, int]


@dataclass(frozen=True, slots=True)
class Transition:
    """A partition's new leader and ISR, as the controller writes it."""

    topic: str
    partition: int
    leader: int
    isr: tuple[int, ...]
    create: bool  # no state znode yet (NewPartition -> OnlinePartition)
