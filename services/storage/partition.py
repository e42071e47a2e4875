"""One partition replica hosted by this node: its log, its role and the leader's view of ISR.

Leader bookkeeping follows Kafka's ``Partition``: the leader tracks each follower's log end
offset (learned from the ``fetch_offset`` of its fetches) and when it last caught up; the high
watermark is the smallest log end offset over the ISR and only moves forward.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import BatchHeader

NO_EPOCH = -1  # "not checked" in requests; "unknown" for a replica's state
EPOCH_DURING_DELETE = -2  # Kafka's LeaderAndIsr.EpochDuringDelete
UNKNOWN_OFFSET = -1

TopicPartition = tuple[str, int]


class AppendInfoLike(Protocol):
    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    duplicate: bool


class ReadInfoLike(Protocol):
    records: bytes
    first_offset: int
    log_start_offset: int
    log_end_offset: int


class EpochCacheLike(Protocol):
    @property
    def latest_epoch(self) -> int | None: ...

    def assign(self, epoch: int, start_offset: int) -> None: ...

    def epoch_for_offset(self, offset: int) -> int | None: ...


class LogLike(Protocol):
    """What the service needs from ``services.storage.log.Log``."""

    log_start_offset: int
    high_watermark: int
    recovery_point: int

    @property
    def log_end_offset(self) -> int: ...

    @property
    def leader_epoch_cache(self) -> EpochCacheLike: ...

    def append_as_leader(
        self,
        records: bytearray,
        headers: list[BatchHeader],
        leader_epoch: int,
        now_ms: int | None = None,
    ) -> Any: ...

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> Any: ...

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None: ...

    def max_timestamp_offset(self) -> tuple[int, int] | None: ...


class Role(enum.Enum):
    NONE = "none"  # log loaded, no order from the controller yet (or stopped)
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(slots=True)
class PartitionOrder:
    """The fields of a LeaderAndIsr partition state this module uses."""

    leader: int
    leader_epoch: int
    isr: Sequence[int]
    replicas: Sequence[int]
    partition_epoch: int = 0


@dataclass(slots=True)
class RemoteReplica:
    """The leader's view of one follower."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0

    def reset(self, now_ms: int, in_sync: bool) -> None:
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_time_ms = 0
        self.last_caught_up_time_ms = now_ms if in_sync else 0

    def on_fetch(
        self, fetch_offset: int, log_start_offset: int, leader_leo: int, now_ms: int
    ) -> None:
        """Kafka's ``Replica.updateFetchState``: caught up if it reached the leader's LEO now,
        or the LEO the leader had at its previous fetch."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_leo
        self.last_fetch_time_ms = now_ms


class Partition:
    """A hosted replica. All methods run on the event loop (no locking needed)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        log: LogLike,
        local_broker_id: int,
        config: Mapping[str, Any],
        topic_id: bytes | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.local_broker_id = local_broker_id
        self.config: dict[str, Any] = dict(config)
        self.topic_id = topic_id
        self.role = Role.NONE
        self.leader_id = -1
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = -1
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.remote: dict[int, RemoteReplica] = {}

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.partition} {self.role.value} epoch={self.leader_epoch}"
            f" isr={list(self.isr)})"
        )

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def min_insync_replicas(self) -> int:
        return int(self.config.get("min.insync.replicas", 1))

    @property
    def is_under_replicated(self) -> bool:
        return self.is_leader and len(self.isr) < len(self.replicas)

    @property
    def is_under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.min_insync_replicas

    # ---- role changes (LeaderAndIsr) ---------------------------------------------------
    def _apply_order(self, order: PartitionOrder) -> bool:
        """Record leader/ISR/assignment; True if the leader epoch is new."""
        new_epoch = order.leader_epoch != self.leader_epoch
        self.leader_id = order.leader
        self.leader_epoch = order.leader_epoch
        self.partition_epoch = order.partition_epoch
        self.isr = tuple(order.isr)
        self.replicas = tuple(order.replicas)
        return new_epoch

    def make_leader(self, order: PartitionOrder, now_ms: int) -> bool:
        """Become (or stay) leader. Returns True if the high watermark moved."""
        was_leader = self.is_leader
        new_epoch = self._apply_order(order)
        self.role = Role.LEADER
        followers = [r for r in self.replicas if r != self.local_broker_id]
        if new_epoch or not was_leader:
            leo = self.log.log_end_offset
            if order.leader_epoch >= 0:
                self.log.leader_epoch_cache.assign(order.leader_epoch, leo)
            self.leader_epoch_start_offset = leo
            self.remote = {b: RemoteReplica(b) for b in followers}
            for b, replica in self.remote.items():
                replica.reset(now_ms, in_sync=b in self.isr)
            self._clamp_high_watermark()
        else:
            self.remote = {b: self.remote.get(b) or RemoteReplica(b) for b in followers}
        return self.maybe_increment_high_watermark()

    def make_follower(self, order: PartitionOrder) -> bool:
        """Become (or stay) follower. Returns True if the leader or its epoch changed."""
        changed = order.leader != self.leader_id or order.leader_epoch != self.leader_epoch
        self._apply_order(order)
        self.role = Role.FOLLOWER
        self.remote = {}
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self._clamp_high_watermark()
        return changed

    def stop(self) -> None:
        """Stop serving (StopReplica without delete): the log stays, the role goes."""
        self.role = Role.NONE
        self.remote = {}
        self.leader_id = -1

    def _clamp_high_watermark(self) -> None:
        log = self.log
        log.high_watermark = min(max(log.high_watermark, log.log_start_offset), log.log_end_offset)

    # ---- checks ---------------------------------------------------------------------
    def check_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's ``checkCurrentLeaderEpoch``: the client's view of the epoch must match."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"leader epoch {current_leader_epoch} is older than {self.leader_epoch}",
            )
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(
                ErrorCode.UNKNOWN_LEADER_EPOCH,
                f"leader epoch {current_leader_epoch} is newer than {self.leader_epoch}",
            )

    def check_leader(self, current_leader_epoch: int = NO_EPOCH) -> None:
        self.check_epoch(current_leader_epoch)
        if not self.is_leader:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {self.local_broker_id} is not the leader of {self.topic}-{self.partition}",
            )

    def check_follower(self, replica_id: int) -> None:
        if replica_id not in self.remote:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {replica_id} is not a follower of {self.topic}-{self.partition}",
            )

    # ---- leader operations ------------------------------------------------------------
    def append_as_leader(
        self, records: bytearray, headers: list[BatchHeader], acks: int, now_ms: int
    ) -> AppendInfoLike:
        if acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"the ISR of {self.topic}-{self.partition} has {len(self.isr)} replicas, "
                f"min.insync.replicas is {self.min_insync_replicas}",
            )
        info: AppendInfoLike = self.log.append_as_leader(
            records, headers, self.leader_epoch, now_ms
        )
        return info

    def maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the ISR (the leader's own LEO included); never moves back."""
        if not self.is_leader:
            return False
        log = self.log
        new_hw = log.log_end_offset
        for broker_id in self.isr:
            if broker_id == self.local_broker_id:
                continue
            replica = self.remote.get(broker_id)
            if replica is None or replica.log_end_offset < 0:
                return False
            new_hw = min(new_hw, replica.log_end_offset)
        if new_hw > log.high_watermark:
            log.high_watermark = new_hw
            return True
        return False

    def update_follower_fetch(
        self, replica_id: int, fetch_offset: int, log_start_offset: int, now_ms: int
    ) -> bool:
        """Record a follower's fetch position; True if the high watermark moved."""
        replica = self.remote[replica_id]
        replica.on_fetch(fetch_offset, log_start_offset, self.log.log_end_offset, now_ms)
        return self.maybe_increment_high_watermark()

    def replication_error(self, required_offset: int) -> ErrorCode | None:
        """acks=all status of an append ending before ``required_offset``: None while pending."""
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            if len(self.isr) < self.min_insync_replicas:
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return ErrorCode.NONE
        return None

    def epoch_for_offset(self, offset: int) -> int:
        epoch = self.log.leader_epoch_cache.epoch_for_offset(offset)
        return NO_EPOCH if epoch is None else epoch
