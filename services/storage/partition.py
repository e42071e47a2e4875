"""One partition replica hosted by this node: its log, its role and the leader's view of ISR.

Leader bookkeeping follows Kafka's ``Partition``: the leader tracks each follower's log end
offset (learned from the ``fetch_offset`` of its fetches) and when it last caught up; the high
watermark is the smallest log end offset over the (maximal) ISR and the followers that caught
up recently, and only moves forward.

ISR changes made by the leader (expand/shrink) are written to ZooKeeper by
``services.storage.replication.isr``; while a write is in flight the change is *pending* and
the high watermark uses the maximal ISR (current plus pending members), as Kafka does with
AlterPartition, so it never moves past what a replica that may be in the ISR has.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from services.common.errors import ErrorCode, KafkaError
from services.common.records.batch import BatchHeader
from services.storage.producer_state import AppendOrigin, ProducerStateManager
from services.storage.refused_batches import RefusedBatches

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

    def assign_unwritten(self, epoch: int, start_offset: int) -> bool: ...

    def write(self) -> None: ...

    def epoch_for_offset(self, offset: int) -> int | None: ...

    def end_offset_for(
        self, requested_epoch: int, log_end_offset: int | None = None
    ) -> tuple[int, int]: ...

    def truncate_from_end(self, end_offset: int) -> None: ...


class LogLike(Protocol):
    """What the service needs from ``services.storage.log.Log``."""

    log_start_offset: int
    high_watermark: int
    recovery_point: int
    producer_state: ProducerStateManager

    @property
    def log_end_offset(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[Any]: ...

    @property
    def leader_epoch_cache(self) -> EpochCacheLike: ...

    def append_as_leader(
        self,
        records: bytearray,
        headers: list[BatchHeader],
        leader_epoch: int,
        now_ms: int | None = None,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
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

    # follower side (replication)
    def append_as_follower(
        self,
        records: bytes | bytearray | memoryview,
        headers: Sequence[BatchHeader],
        now_ms: int | None = None,
    ) -> Any: ...

    def truncate_to(self, offset: int) -> bool: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def maybe_increment_log_start_offset(self, offset: int) -> bool: ...


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

    def reset(self, now_ms: int, in_sync: bool, *, forget_position: bool = True) -> None:
        """Kafka's ``resetReplicaState`` at a new leader epoch: the position is forgotten only
        when this broker just became leader (a follower's old position is still true when the
        same leader starts a new epoch)."""
        if forget_position:
            self.log_end_offset = UNKNOWN_OFFSET
            self.log_start_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_time_ms = 0
        self.last_caught_up_time_ms = now_ms if in_sync else 0

    def is_caught_up(self, leader_leo: int, now_ms: int, max_lag_ms: int) -> bool:
        """At the leader's LEO, or caught up within ``max_lag_ms`` (Kafka's ``isCaughtUp``)."""
        if self.log_end_offset == leader_leo:
            return True
        return now_ms - self.last_caught_up_time_ms <= max_lag_ms

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
        *,
        replica_lag_time_max_ms: int = 30000,
        clock: Callable[[], int] | None = None,
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
        self.pending_isr: tuple[int, ...] | None = None  # ISR change being written to ZooKeeper
        self.replicas: tuple[int, ...] = ()
        self.remote: dict[int, RemoteReplica] = {}
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.clock: Callable[[], int] = clock or _wall_clock_ms
        self.refused = RefusedBatches()  # idempotent batches refused unwritten (appends.py)

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
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR plus the members of a pending change (what the high watermark must wait for)."""
        if self.pending_isr is None:
            return self.isr
        return tuple(dict.fromkeys(self.isr + self.pending_isr))

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
        self.pending_isr = None  # the controller's word replaces any change of ours in flight
        self.replicas = tuple(order.replicas)
        return new_epoch

    def make_leader(
        self,
        order: PartitionOrder,
        now_ms: int,
        unwritten: list[EpochCacheLike] | None = None,
    ) -> bool:
        """Become (or stay) leader. Returns True if the high watermark moved.

        At a new epoch the epoch starts at this replica's own LEO (written to the epoch cache,
        so followers truncating with OffsetForLeaderEpoch find where the old epoch ended).
        With ``unwritten`` the checkpoint file is not written here: its cache is appended for
        the caller to write (with the other partitions of the same order, off the event loop).
        """
        was_leader = self.is_leader
        new_epoch = self._apply_order(order)
        self.role = Role.LEADER
        followers = [r for r in self.replicas if r != self.local_broker_id]
        old_remote = self.remote if was_leader else {}
        self.remote = {b: old_remote.get(b) or RemoteReplica(b) for b in followers}
        if new_epoch or not was_leader:
            leo = self.log.log_end_offset
            if order.leader_epoch >= 0:
                cache = self.log.leader_epoch_cache
                if unwritten is None:
                    cache.assign(order.leader_epoch, leo)
                elif cache.assign_unwritten(order.leader_epoch, leo):
                    unwritten.append(cache)
            self.leader_epoch_start_offset = leo
            for b, replica in self.remote.items():
                replica.reset(now_ms, in_sync=b in self.isr, forget_position=not was_leader)
            self._clamp_high_watermark()
        return self.maybe_increment_high_watermark(now_ms)

    def make_follower(self, order: PartitionOrder) -> bool:
        """Become (or stay) follower. Returns True if the leader or its epoch changed."""
        changed = order.leader != self.leader_id or order.leader_epoch != self.leader_epoch
        self._apply_order(order)
        self.role = Role.FOLLOWER
        self.remote = {}
        self.pending_isr = None
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self._clamp_high_watermark()
        return changed

    def stop(self) -> None:
        """Stop serving (StopReplica without delete): the log stays, the role goes."""
        self.role = Role.NONE
        self.remote = {}
        self.pending_isr = None
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
        self,
        records: bytearray,
        headers: list[BatchHeader],
        acks: int,
        now_ms: int,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendInfoLike:
        if acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"the ISR of {self.topic}-{self.partition} has {len(self.isr)} replicas, "
                f"min.insync.replicas is {self.min_insync_replicas}",
            )
        info: AppendInfoLike = self.log.append_as_leader(
            records, headers, self.leader_epoch, now_ms, origin=origin
        )
        return info

    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        """Kafka's ``maybeIncrementLeaderHW``: HW = min LEO over the leader, the maximal ISR
        and the followers caught up within replica.lag.time.max.ms; never moves back. A member
        of the ISR whose position is unknown (no fetch yet in this leadership) holds it."""
        if not self.is_leader:
            return False
        now = self.clock() if now_ms is None else now_ms
        log = self.log
        new_hw = log.log_end_offset
        maximal = self.maximal_isr
        for broker_id, replica in self.remote.items():
            recently = now - replica.last_caught_up_time_ms <= self.replica_lag_time_max_ms
            if broker_id in maximal or (recently and replica.log_end_offset >= 0):
                if replica.log_end_offset < 0:
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
        return self.maybe_increment_high_watermark(now_ms)

    # ---- ISR changes by the leader (Kafka's maybeExpandIsr / maybeShrinkIsr) -----------
    def is_follower_in_sync(self, replica: RemoteReplica) -> bool:
        """Eligible to join the ISR: has everything below the HW and has reached the start of
        the current leader epoch (so it truncated to this leader's log)."""
        leo = replica.log_end_offset
        return (
            leo >= 0
            and leo >= self.high_watermark
            and self.leader_epoch_start_offset >= 0
            and leo >= self.leader_epoch_start_offset
        )

    def isr_to_expand(self, replica_id: int) -> tuple[int, ...] | None:
        """The ISR with ``replica_id`` added if it is a caught-up follower outside of it; None
        if there is nothing to do (or an ISR change is already in flight)."""
        if not self.is_leader or self.pending_isr is not None or replica_id in self.isr:
            return None
        replica = self.remote.get(replica_id)
        if replica is None or not self.is_follower_in_sync(replica):
            return None
        return (*self.isr, replica_id)

    def out_of_sync_replicas(self, now_ms: int) -> list[int]:
        """ISR followers that have not caught up within replica.lag.time.max.ms."""
        leo = self.log.log_end_offset
        out: list[int] = []
        for broker_id in self.isr:
            if broker_id == self.local_broker_id:
                continue
            replica = self.remote.get(broker_id)
            if replica is None or not replica.is_caught_up(
                leo, now_ms, self.replica_lag_time_max_ms
            ):
                out.append(broker_id)
        return out

    def isr_to_shrink(self, now_ms: int) -> tuple[int, ...] | None:
        """The ISR without its lagging followers; None if none lag (or a change is in flight)."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        lagging = self.out_of_sync_replicas(now_ms)
        if not lagging:
            return None
        new_isr = tuple(b for b in self.isr if b not in lagging)
        return new_isr if new_isr else None

    def begin_isr_change(self, new_isr: Sequence[int]) -> None:
        """An ISR change is being written: count its members for the HW until it settles."""
        self.pending_isr = tuple(new_isr)

    def complete_isr_change(
        self, leader_epoch: int, expected_version: int, isr: Sequence[int], new_version: int
    ) -> bool:
        """ZooKeeper holds ``isr`` at ``new_version`` (written over ``expected_version`` in
        ``leader_epoch``): adopt it unless an order from the controller came in between."""
        if (
            not self.is_leader
            or self.leader_epoch != leader_epoch
            or self.partition_epoch != expected_version
        ):
            return False
        self.isr = tuple(isr)
        self.partition_epoch = new_version
        self.pending_isr = None
        return True

    def abort_isr_change(self, leader_epoch: int) -> None:
        if self.leader_epoch == leader_epoch:
            self.pending_isr = None

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

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) of the largest epoch <= ``leader_epoch`` in this replica's log:
        the start of the next epoch, or the LEO for the latest one; (-1, -1) when unknown."""
        return self.log.leader_epoch_cache.end_offset_for(leader_epoch, self.log.log_end_offset)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)
