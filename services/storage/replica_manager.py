"""The replica manager: hosted partitions, controller orders, checkpoints and log maintenance.

Controller orders (UpdatePartitions = LeaderAndIsr, StopReplicas) are fenced by controller
epoch (the highest seen is kept in memory; equal is accepted) and per partition by leader epoch,
as Kafka's ``ReplicaManager.becomeLeaderOrFollower`` / ``stopReplicas`` do. The data path
(append, fetch, list offsets) lives in ``appends``, ``fetches`` and ``offsets``.

Replication plugs in through two hooks (``attach_replication``): the follower side
(``FollowerControl``: the replica fetchers, started and stopped by the orders) and the leader's
ISR changes (``IsrControl``: expansion checked on every follower fetch). Without them the node
serves as before (RF 1, or tests of the leader side alone).

Everything that touches partition state runs on the event loop. Slow disk work (opening and
recovering logs, fsync, retention, deleting, checkpoint writes) runs in worker threads; the log
engine serialises a log's mutations with its own lock.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.topic_config import LONG_MAX, effective_config
from services.storage import order_io
from services.storage.backend import EngineBackend, LogBackend, ManagedLog
from services.storage.changes import (
    FLUSH,
    HIGH_WATERMARKS,
    LOG_STARTS,
    RECOVERY_POINTS,
    RETENTION,
    USAGE,
    LogChanges,
)
from services.storage.delayed import DelayedOperations
from services.storage.fetch_sessions import FetchSession, FetchSessions, SessionPartition
from services.storage.log import checkpoint as ckpt
from services.storage.log.files import parse_partition_dir, partition_dir_name
from services.storage.log_dirs import LogDirs
from services.storage.metrics import PartitionGauges, ReplicaGauges, StorageMetrics
from services.storage.offset_checkpoints import OffsetCheckpoint
from services.storage.partition import (
    EPOCH_DURING_DELETE,
    NO_EPOCH,
    EpochCacheLike,
    Partition,
    PartitionOrder,
    Role,
    TopicPartition,
)
from services.storage.replication.quota import ReplicationQuotas
from services.storage.retention_schedule import RetentionSchedule

log = get_logger("storage.replica_manager")


class FollowerControl(Protocol):
    """The replica fetchers, as the replica manager drives them."""

    def follow(self, p: Partition) -> None:
        """(Re)start replicating ``p`` from its leader: truncation first, then fetching."""
        ...

    def unfollow(self, keys: Iterable[TopicPartition]) -> None: ...

    def is_following(self, key: TopicPartition) -> bool: ...

    def max_lag(self) -> int: ...

    def log_start_moved(self, keys: Iterable[TopicPartition]) -> None:
        """Followed replicas whose log start moved here: their leaders learn it (sessions)."""
        ...

    def leader_log_end_offset(self, key: TopicPartition) -> int:
        """The leader's log end offset as its last fetch answer said (-1: not known)."""
        ...


class IsrControl(Protocol):
    """The leader's ISR changes, as the fetch path triggers them."""

    def maybe_expand(self, p: Partition, replica_id: int) -> None: ...


@dataclass(slots=True)
class Hosted:
    """A hosted partition and its log (typed for the maintenance calls)."""

    partition: Partition
    log: ManagedLog


def now_ms() -> int:
    return int(time.time() * 1000)


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        log_dir: Path | Sequence[Path],
        broker_defaults: Mapping[str, Any] | None = None,
        *,
        backend: LogBackend | None = None,
        metrics: StorageMetrics | None = None,
        replica_lag_time_max_ms: int = 30000,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.broker_id = broker_id
        dirs = [Path(log_dir)] if isinstance(log_dir, str | Path) else [Path(d) for d in log_dir]
        self.log_dirs = LogDirs(dirs)
        # the offset checkpoint files, kept up to date from the marks (``self.changes``)
        self.checkpoints: dict[str, OffsetCheckpoint] = {
            RECOVERY_POINTS: OffsetCheckpoint(
                ckpt.RECOVERY_POINT_CHECKPOINT, lambda lg: lg.recovery_point
            ),
            HIGH_WATERMARKS: OffsetCheckpoint(
                ckpt.REPLICATION_OFFSET_CHECKPOINT, lambda lg: lg.high_watermark
            ),
            LOG_STARTS: OffsetCheckpoint(
                ckpt.LOG_START_OFFSET_CHECKPOINT, lambda lg: lg.log_start_offset, lambda v: v > 0
            ),
        }
        self.log_dir = dirs[0]
        # called (on the event loop) when a log dir fails: the node tells the controller
        self.on_log_dir_failure: Callable[[Path, str], None] | None = None
        self.broker_defaults = dict(broker_defaults or {})
        # topic -> config overrides, as last read from ZooKeeper or sent by the controller
        # (kept to recompute partition configs when a broker default changes)
        self._topic_overrides: dict[str, dict[str, str]] = {}
        self.backend: LogBackend = backend if backend is not None else EngineBackend()
        self.metrics = metrics if metrics is not None else StorageMetrics()
        # replication throttles (rates from the dynamic broker configs: StorageBrokerConfig)
        self.quotas = ReplicationQuotas(
            broker_id,
            self.metrics.replication_throttled_bytes,
            self.metrics.replication_throttled_holds,
        )
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.clock = clock
        self.hosted: dict[TopicPartition, Hosted] = {}
        self.controller_epoch = -1  # highest controller epoch seen
        # storage nodes in controlled shutdown, from the controller's last order: never added
        # to an ISR (KIP-841)
        self.ineligible_replicas: frozenset[int] = frozenset()
        self.produce_waiters = DelayedOperations("produce")  # woken when the HW moves
        self.fetch_waiters = DelayedOperations("fetch")  # woken by appends and HW moves
        # DeleteRecords: woken by follower fetches (they report their log start offsets)
        self.delete_records_waiters = DelayedOperations("delete_records")
        self.fetchers: FollowerControl | None = None
        self.isr_control: IsrControl | None = None
        self._orders_lock = asyncio.Lock()
        # what the periodic jobs visit (services.storage.changes): the logs marked since
        self.changes = LogChanges()
        self._unflushed: set[TopicPartition] = set()  # appended to and not flushed since
        self.retention_schedule = RetentionSchedule()  # when idle logs are due by time
        self._sizes: dict[TopicPartition, int] = {}  # the usage report's bytes per log
        self._size_total = 0
        # partitions led here with other replicas: the only ones an ISR shrink check visits
        self.led_with_followers: set[TopicPartition] = set()
        # followers' fetch sessions (KIP-227): marked with the periodic jobs' marks
        self.fetch_sessions = FetchSessions(self._catch_up_quiet_follower)
        self.metrics.bind_state(self.gauges)

    def attach_replication(
        self, fetchers: FollowerControl | None, isr_control: IsrControl | None
    ) -> None:
        self.fetchers = fetchers
        self.isr_control = isr_control

    def _new_partition(
        self,
        topic: str,
        partition: int,
        lg: ManagedLog,
        config: dict[str, Any],
        topic_id: bytes | None,
    ) -> Partition:
        return Partition(
            topic,
            partition,
            lg,
            self.broker_id,
            config,
            topic_id=topic_id,
            replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            clock=self.clock,
        )

    # ---- lookups ------------------------------------------------------------------------
    def get(self, topic: str, partition: int) -> Partition | None:
        h = self.hosted.get((topic, partition))
        return h.partition if h is not None else None

    def partition_or_error(self, topic: str, partition: int) -> Partition:
        p = self.get(topic, partition)
        if p is None and self.log_dirs.is_offline((topic, partition)):
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"the log dir of {topic}-{partition} on broker {self.broker_id} is offline",
            )
        if p is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"partition {topic}-{partition} is not hosted on broker {self.broker_id}",
            )
        return p

    def leader_or_error(self, topic: str, partition: int, current_leader_epoch: int) -> Partition:
        p = self.partition_or_error(topic, partition)
        p.check_leader(current_leader_epoch)
        return p

    # ---- notifications --------------------------------------------------------------------
    def mark_changed(self, key: TopicPartition) -> None:
        """The log's end, size, high watermark, log start or config may have moved: the periodic
        jobs (flush, usage report, checkpoints, retention, cleaner) visit it at their next run,
        and the followers' fetch sessions holding it at their next fetch."""
        self.changes.mark(key)
        self.fetch_sessions.mark(key)

    def on_append(self, p: Partition) -> None:
        """New data in the log: wake follower fetches; HW may move (RF 1) and wake the rest."""
        self.mark_changed(p.key)  # first: quiet followers' states are brought up (sessions)
        hw_moved = p.maybe_increment_high_watermark()
        self.fetch_waiters.notify(p.key)
        if hw_moved:
            self.produce_waiters.notify(p.key)

    def on_high_watermark(self, p: Partition) -> None:
        self.mark_changed(p.key)
        self.produce_waiters.notify(p.key)
        self.fetch_waiters.notify(p.key)

    def on_follower_fetch(
        self, p: Partition, replica_id: int, fetch_offset: int, log_start_offset: int
    ) -> None:
        """A follower fetched from ``fetch_offset`` (its LEO): record it, move the HW, and see
        whether it may join the ISR (Kafka's ``updateFollowerFetchState``)."""
        if p.update_follower_fetch(replica_id, fetch_offset, log_start_offset, self.clock()):
            self.on_high_watermark(p)
        self.delete_records_waiters.notify(p.key)
        if self.isr_control is not None:
            self.isr_control.maybe_expand(p, replica_id)

    def _catch_up_quiet_follower(self, session: FetchSession, sp: SessionPartition) -> None:
        """A quiet session partition is marked: its follower, at the log end when it went quiet
        and fetching since, is recorded as fetched at the session's last fetch at the log end
        offset the leader had then (``sp.fetch_offset``: nothing moved it while quiet), before
        the change is counted (see fetch_sessions).

        Not when the follower's fetch state was reset since its last fetch (a new leader epoch:
        ``RemoteReplica.reset`` zeroes ``last_fetch_time_ms``): that fetch belongs to the
        previous leadership, and counting it would bring back a follower the controller just
        dropped from the ISR (e.g. a dead one) as caught up, and the high watermark would wait
        for it for replica.lag.time.max.ms (acks=all writes timed out: D78)."""
        h = self.hosted.get(sp.key)
        if h is None or not h.partition.is_leader:
            return
        replica = h.partition.remote.get(session.replica_id)
        if (
            replica is None
            or replica.log_end_offset != sp.fetch_offset
            or replica.last_fetch_time_ms <= 0
            or replica.last_fetch_time_ms >= session.last_fetch_ms
        ):
            return
        leo_then = sp.fetch_offset
        replica.on_fetch(leo_then, replica.log_start_offset, leo_then, session.last_fetch_ms)

    def on_isr_changed(self, p: Partition) -> None:
        """The ISR changed: the HW may move (a shrink), and acks=all waiters re-check
        min.insync.replicas (NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
        p.maybe_increment_high_watermark(self.clock())
        self.on_high_watermark(p)
        self.delete_records_waiters.notify(p.key)

    def on_state_change(self, key: TopicPartition) -> None:
        """Leadership changed or the partition went away: parked requests re-check at once."""
        self.mark_changed(key)
        h = self.hosted.get(key)
        if h is not None and h.partition.is_leader and len(h.partition.replicas) > 1:
            self.led_with_followers.add(key)
        else:
            self.led_with_followers.discard(key)
        self.produce_waiters.notify(key)
        self.fetch_waiters.notify(key)
        self.delete_records_waiters.notify(key)

    # ---- start-up -------------------------------------------------------------------------
    def scan_log_dir(self) -> list[TopicPartition]:
        """Partition directories on disk, in every online log dir."""
        return [tp for found in self.scan_log_dirs().values() for tp in found]

    def scan_log_dirs(self) -> dict[Path, list[TopicPartition]]:
        """Partition directories (``<topic>-<n>``; ``-delete``/``-future`` skipped) of each
        online log dir; a dir that cannot be read goes offline. The same partition in two
        dirs refuses the start, as Kafka does."""
        out: dict[Path, list[TopicPartition]] = {}
        seen: dict[TopicPartition, Path] = {}
        for d in self.log_dirs.online:
            try:
                entries = sorted(d.iterdir()) if d.is_dir() else []
                found = [
                    tp
                    for entry in entries
                    if entry.is_dir() and (tp := parse_partition_dir(entry.name)) is not None
                ]
            except OSError as exc:
                self.handle_log_dir_failure(d, f"cannot read the log dir: {exc}")
                continue
            for tp in found:
                if tp in seen:
                    raise KafkaError(
                        ErrorCode.KAFKA_STORAGE_ERROR,
                        f"Duplicate log directories for {tp[0]}-{tp[1]} are found in both "
                        f"{seen[tp]} and {d}. It is likely because a log directory failure "
                        "happened while the broker was replacing current replica with future "
                        "replica. Recover the broker from this failure by manually deleting one "
                        "of the two directories for this partition.",
                    )
                seen[tp] = d
            out[d] = found
        return out

    def _read_checkpoint(self, name: str, log_dir: Path | None = None) -> dict[TopicPartition, int]:
        """A log dir's checkpoint; a corrupt one is reset (as Kafka: recovery from 0)."""
        try:
            return ckpt.read_offset_checkpoint((log_dir or self.log_dir) / name)
        except ckpt.CorruptCheckpointError as exc:
            log.warning("corrupt checkpoint file ignored", file=name, error=str(exc))
            return {}

    async def load_logs(
        self,
        topic_overrides: Mapping[str, Mapping[str, str]],
        clean_shutdown: bool,
        clean_dirs: Collection[Path] | None = None,
    ) -> int:
        """Open every partition found in the online log dirs, each dir with its own checkpoints
        (recovering unless the shutdown was clean: ``clean_dirs`` says it per dir, else
        ``clean_shutdown`` for all). A dir whose logs cannot be read goes offline.

        ``topic_overrides``: the topic config overrides from ZooKeeper, by topic. The logs
        get no role until the controller sends UpdatePartitions.
        """
        count = 0
        for d, found in self.scan_log_dirs().items():
            clean = clean_shutdown if clean_dirs is None else d in clean_dirs
            try:
                count += await self._load_dir(d, found, topic_overrides, clean)
            except OSError as exc:
                self.handle_log_dir_failure(d, f"cannot load its logs: {exc}")
        return count

    async def _load_dir(
        self,
        log_dir: Path,
        found: list[TopicPartition],
        topic_overrides: Mapping[str, Mapping[str, str]],
        clean_shutdown: bool,
    ) -> int:
        recovery_points = self._read_checkpoint(ckpt.RECOVERY_POINT_CHECKPOINT, log_dir)
        high_watermarks = self._read_checkpoint(ckpt.REPLICATION_OFFSET_CHECKPOINT, log_dir)
        log_starts = self._read_checkpoint(ckpt.LOG_START_OFFSET_CHECKPOINT, log_dir)

        self._topic_overrides.update({t: dict(o) for t, o in topic_overrides.items()})

        async def load(tp: TopicPartition) -> None:
            topic, partition = tp
            try:
                config = effective_config(topic_overrides.get(topic, {}), self.broker_defaults)
            except KafkaError as exc:
                log.warning(
                    "invalid topic config in ZooKeeper, using defaults",
                    topic=topic,
                    error=exc.message,
                )
                config = effective_config({}, self.broker_defaults)
            started = time.monotonic()
            opened = await asyncio.to_thread(
                self.backend.open,
                log_dir / partition_dir_name(topic, partition),
                topic,
                partition,
                config,
                topic_id=None,
                recovery_point=recovery_points.get(tp, 0),
                clean_shutdown=clean_shutdown,
                log_start_offset=log_starts.get(tp),
            )
            if log_dir in self.log_dirs.offline:  # another log of the dir failed meanwhile
                await asyncio.to_thread(_close_quietly, [opened])
                return
            hw = high_watermarks.get(tp, 0)
            opened.high_watermark = min(max(hw, opened.log_start_offset), opened.log_end_offset)
            p = self._new_partition(topic, partition, opened, config, self.backend.topic_id(opened))
            self.hosted[tp] = Hosted(p, opened)
            self.log_dirs.assign(tp, log_dir)
            self.changes.mark(tp)
            log.info(
                "loaded log",
                topic=topic,
                partition=partition,
                log_start_offset=opened.log_start_offset,
                log_end_offset=opened.log_end_offset,
                high_watermark=opened.high_watermark,
                clean_shutdown=clean_shutdown,
                ms=round((time.monotonic() - started) * 1000, 1),
            )

        await asyncio.gather(*(load(tp) for tp in found))
        return len(found)

    # ---- controller orders ----------------------------------------------------------------
    def _fenced_controller(self, epoch: int, controller_id: int, what: str) -> bool:
        if epoch < self.controller_epoch:
            log.warning(
                f"ignoring {what} from an old controller epoch",
                controller_id=controller_id,
                controller_epoch=epoch,
                latest_controller_epoch=self.controller_epoch,
            )
            return True
        self.controller_epoch = epoch
        return False

    async def update_partitions(
        self, req: pb.UpdatePartitionsRequest
    ) -> pb.UpdatePartitionsResponse:
        """LeaderAndIsr: become leader or follower for the partitions addressed to this node."""
        async with self._orders_lock:
            if self._fenced_controller(req.controller_epoch, req.controller_id, "UpdatePartitions"):
                return pb.UpdatePartitionsResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
            self._set_ineligible(frozenset(req.ineligible_replicas))
            await self._create_new_logs(req.partitions)
            errors: list[pb.PartitionError] = []
            unwritten: list[EpochCacheLike] = []
            owner: list[int] = []  # index in ``errors`` of each unwritten cache's partition
            for state in req.partitions:
                before = len(unwritten)
                try:
                    code = await self._apply_state(
                        state, req.controller_id, req.controller_epoch, unwritten
                    )
                except KafkaError as exc:
                    log.warning(
                        "partition state rejected",
                        topic=state.topic,
                        partition=state.partition,
                        error=exc.code.name,
                        reason=exc.message,
                    )
                    code = exc.code
                except Exception:
                    log.exception(
                        "failed to apply partition state",
                        topic=state.topic,
                        partition=state.partition,
                    )
                    code = ErrorCode.UNKNOWN_SERVER_ERROR
                owner += [len(errors)] * (len(unwritten) - before)
                errors.append(
                    pb.PartitionError(topic=state.topic, partition=state.partition, error_code=code)
                )
            for i, err in enumerate(await order_io.write_checkpoints(unwritten)):
                if err is not None:
                    failed = errors[owner[i]]
                    log.error(
                        "failed to apply partition state",
                        topic=failed.topic,
                        partition=failed.partition,
                        error=repr(err),
                    )
                    failed.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
            return pb.UpdatePartitionsResponse(error_code=ErrorCode.NONE, partitions=errors)

    def _set_ineligible(self, ineligible: frozenset[int]) -> None:
        if ineligible != self.ineligible_replicas:
            log.info(
                "replicas ineligible for the ISR (shutting down)",
                replicas=sorted(ineligible),
                previous=sorted(self.ineligible_replicas),
            )
            self.ineligible_replicas = ineligible

    async def _create_new_logs(self, states: Sequence[pb.PartitionState]) -> None:
        """Create the logs this order adds to the node, all at once (their files are written on
        worker threads together). One that fails is left to ``_apply_state``, which tries
        again and answers its error."""
        todo: dict[TopicPartition, pb.PartitionState] = {}
        for state in states:
            key = (state.topic, state.partition)
            if self.broker_id in state.replicas and key not in self.hosted:
                todo.setdefault(key, state)
        if len(todo) < 2:
            return

        async def create(st: pb.PartitionState) -> Hosted:
            config = effective_config(dict(st.config), self.broker_defaults)
            return await self._create(
                st.topic, st.partition, config, bytes(st.topic_id) or None, st.is_new
            )

        results = await asyncio.gather(
            *(create(st) for st in todo.values()), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, Exception):
                raise r  # cancellation: not a partition's failure

    async def _apply_state(
        self,
        state: pb.PartitionState,
        controller_id: int,
        controller_epoch: int,
        unwritten: list[EpochCacheLike],
    ) -> ErrorCode:
        """Apply one partition's order; leader-epoch caches whose file must be written before
        the answer are appended to ``unwritten``."""
        key = (state.topic, state.partition)
        if self.broker_id not in state.replicas:
            log.warning(
                "ignoring partition state: partition not assigned to this broker",
                topic=state.topic,
                partition=state.partition,
                replicas=list(state.replicas),
            )
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        hosted = self.hosted.get(key)
        if (
            hosted is not None
            and state.leader_epoch not in (NO_EPOCH, EPOCH_DURING_DELETE)
            and state.leader_epoch < hosted.partition.leader_epoch
        ):
            log.warning(
                "ignoring partition state with an older leader epoch",
                topic=state.topic,
                partition=state.partition,
                controller_id=controller_id,
                controller_epoch=controller_epoch,
                leader_epoch=state.leader_epoch,
                current_leader_epoch=hosted.partition.leader_epoch,
            )
            return ErrorCode.STALE_CONTROLLER_EPOCH
        config = effective_config(dict(state.config), self.broker_defaults)
        self._topic_overrides[state.topic] = dict(state.config)
        topic_id = bytes(state.topic_id) or None
        if hosted is None:
            hosted = await self._create(
                state.topic, state.partition, config, topic_id, state.is_new
            )
        else:
            self._refresh(hosted, config, topic_id)
        p = hosted.partition
        if (
            p.role is not Role.NONE
            and state.leader_epoch == p.leader_epoch
            and state.partition_epoch < p.partition_epoch
        ):
            # Same leader epoch but an older version of the state znode than ours: the leader
            # changed the ISR since (the controller always bumps the leader epoch itself).
            log.info(
                "ignoring partition state older than the ISR change already applied",
                topic=state.topic,
                partition=state.partition,
                leader_epoch=state.leader_epoch,
                partition_epoch=state.partition_epoch,
                current_partition_epoch=p.partition_epoch,
            )
            return ErrorCode.STALE_CONTROLLER_EPOCH
        order = PartitionOrder(
            state.leader,
            state.leader_epoch,
            list(state.isr),
            list(state.replicas),
            state.partition_epoch,
        )
        if state.leader == self.broker_id:
            was = p.role
            if self.fetchers is not None:
                self.fetchers.unfollow([key])  # stop fetching before taking over
            if p.make_leader(order, self.clock(), unwritten):
                self.on_high_watermark(p)
            if was is not Role.LEADER:
                log.info(
                    "became leader",
                    topic=p.topic,
                    partition=p.partition,
                    leader_epoch=p.leader_epoch,
                    isr=list(p.isr),
                    log_end_offset=p.log.log_end_offset,
                    high_watermark=p.high_watermark,
                )
        else:
            changed = p.make_follower(order)
            if changed:
                log.info(
                    "became follower",
                    topic=p.topic,
                    partition=p.partition,
                    leader=p.leader_id,
                    leader_epoch=p.leader_epoch,
                    log_end_offset=p.log.log_end_offset,
                )
            if self.fetchers is not None and (changed or not self.fetchers.is_following(key)):
                # a new leader or leader epoch: truncate against it, then fetch (KIP-101)
                self.fetchers.follow(p)
        self.on_state_change(key)
        return ErrorCode.NONE

    async def _create(
        self,
        topic: str,
        partition: int,
        config: dict[str, Any],
        topic_id: bytes | None,
        is_new: bool = True,
    ) -> Hosted:
        key = (topic, partition)
        log_dir = self._dir_for_new_replica(key, is_new)
        # the dir is taken now: logs of one order created concurrently spread as if one by one
        self.log_dirs.assign(key, log_dir)
        try:
            opened = await order_io.run(
                functools.partial(
                    self.backend.open,
                    log_dir / partition_dir_name(topic, partition),
                    topic,
                    partition,
                    config,
                    topic_id=topic_id,
                    recovery_point=0,
                    clean_shutdown=False,
                    log_start_offset=None,
                )
            )
        except OSError as exc:
            self.log_dirs.forget(key)
            self.handle_log_dir_failure(log_dir, f"cannot create {topic}-{partition}: {exc}")
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot create {topic}-{partition}: {exc}"
            ) from None
        except BaseException:
            self.log_dirs.forget(key)
            raise
        p = self._new_partition(
            topic, partition, opened, config, self.backend.topic_id(opened) or topic_id
        )
        hosted = Hosted(p, opened)
        self.hosted[(topic, partition)] = hosted
        self.changes.mark(key)
        log.info(
            "created log", topic=topic, partition=partition, log_end_offset=opened.log_end_offset
        )
        return hosted

    def _dir_for_new_replica(self, key: TopicPartition, is_new: bool) -> Path:
        """Kafka's getOrCreateLog: a replica of an offline dir is not created elsewhere, nor a
        replica the controller does not call new while a dir is offline (it may be there)."""
        if self.log_dirs.is_offline(key) or (self.log_dirs.offline and not is_new):
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"cannot create the log of {key[0]}-{key[1]}: log dir(s) "
                f"{', '.join(map(str, self.log_dirs.offline))} offline",
            )
        return self.log_dirs.next_dir()

    # ---- log dir failures (KIP-112) -------------------------------------------------------
    def report_io_error(self, topic: str, partition: int, exc: OSError) -> None:
        """An I/O error on a partition's log: its whole log dir goes offline."""
        d = self.log_dirs.dir_of.get((topic, partition))
        if d is not None:
            self.handle_log_dir_failure(d, f"I/O error on {topic}-{partition}: {exc}")

    def handle_log_dir_failure(self, log_dir: Path, reason: str) -> None:
        """Kafka's ReplicaManager.handleLogDirFailure: every replica of ``log_dir`` stops being
        served (requests get KAFKA_STORAGE_ERROR), fetchers stop, logs are closed; the node
        reports it (``on_log_dir_failure``) so the controller re-leads them elsewhere."""
        gone = self.log_dirs.mark_offline(log_dir, reason)
        if gone is None:
            return
        log.error(
            f"Stopping serving replicas in dir {log_dir}",
            log_dir=str(log_dir),
            reason=reason,
            partitions=[f"{t}-{p}" for t, p in gone[:50]],
            count=len(gone),
        )
        if self.fetchers is not None:
            self.fetchers.unfollow(gone)
        logs: list[ManagedLog] = []
        for key in gone:
            hosted = self.hosted.pop(key, None)
            if hosted is not None:
                hosted.partition.stop()
                logs.append(hosted.log)
            self.on_state_change(key)
        if logs:
            asyncio.get_running_loop().run_in_executor(None, _close_quietly, logs)
        if self.on_log_dir_failure is not None:
            self.on_log_dir_failure(log_dir, reason)

    def _refresh(self, hosted: Hosted, config: dict[str, Any], topic_id: bytes | None) -> None:
        p = hosted.partition
        if topic_id is not None:
            if p.topic_id is not None and p.topic_id != topic_id:
                raise KafkaError(
                    ErrorCode.INCONSISTENT_TOPIC_ID,
                    f"topic id of {p.topic}-{p.partition} differs from its log directory's",
                )
            if p.topic_id is None:
                self.backend.set_topic_id(hosted.log, topic_id)
                p.topic_id = topic_id
        if config != p.config:
            hosted.log.update_config(self.backend.make_config(config))
            p.config = config
            self.changes.mark(p.key)  # retention and the cleaner look at it again
            log.info("topic config updated", topic=p.topic, partition=p.partition)

    def set_broker_defaults(self, defaults: Mapping[str, Any]) -> None:
        """New broker-level topic defaults (dynamic broker configs): every hosted partition's
        configuration is recomputed and applied without a restart."""
        if dict(defaults) == self.broker_defaults:
            return
        self.broker_defaults = dict(defaults)
        for (topic, _), hosted in list(self.hosted.items()):
            overrides = self._topic_overrides.get(topic, {})
            try:
                config = effective_config(overrides, self.broker_defaults)
            except KafkaError:
                config = effective_config({}, self.broker_defaults)
            self._refresh(hosted, config, None)
        log.info("broker topic defaults updated", partitions=len(self.hosted))

    async def stop_replicas(self, req: pb.StopReplicasRequest) -> pb.StopReplicasResponse:
        """StopReplica: stop serving the partitions, and delete their logs if asked."""
        async with self._orders_lock:
            if self._fenced_controller(req.controller_epoch, req.controller_id, "StopReplicas"):
                return pb.StopReplicasResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
            errors: list[pb.PartitionError] = []
            for sr in req.partitions:
                try:
                    code = await self._stop_one(sr, req.delete_partitions)
                except Exception:
                    log.exception("failed to stop replica", topic=sr.topic, partition=sr.partition)
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                errors.append(
                    pb.PartitionError(topic=sr.topic, partition=sr.partition, error_code=code)
                )
            return pb.StopReplicasResponse(error_code=ErrorCode.NONE, partitions=errors)

    async def _stop_one(self, sr: pb.StopReplica, delete: bool) -> ErrorCode:
        key = (sr.topic, sr.partition)
        hosted = self.hosted.get(key)
        if hosted is None:
            if delete:  # an offline replica's files stay on the failed disk
                self.log_dirs.offline_partitions.discard(key)
            return ErrorCode.NONE
        p = hosted.partition
        if (
            sr.leader_epoch not in (NO_EPOCH, EPOCH_DURING_DELETE)
            and sr.leader_epoch < p.leader_epoch
        ):
            log.warning(
                "ignoring StopReplicas with an older leader epoch",
                topic=sr.topic,
                partition=sr.partition,
                leader_epoch=sr.leader_epoch,
                current_leader_epoch=p.leader_epoch,
            )
            return ErrorCode.FENCED_LEADER_EPOCH
        if self.fetchers is not None:
            self.fetchers.unfollow([key])
        p.stop()
        if delete:
            del self.hosted[key]
            self.log_dirs.forget(key)
            if not any(t == sr.topic for t, _ in self.hosted):
                self._topic_overrides.pop(sr.topic, None)
            self.on_state_change(key)
            await asyncio.to_thread(hosted.log.delete)
            log.info("deleted replica", topic=sr.topic, partition=sr.partition)
        else:
            self.on_state_change(key)
            log.info("stopped replica", topic=sr.topic, partition=sr.partition)
        return ErrorCode.NONE

    # ---- maintenance ------------------------------------------------------------------------
    async def _each_log(
        self,
        job: Callable[[ManagedLog], Any],
        what: str,
        keys: Iterable[TopicPartition] | None = None,
    ) -> list[TopicPartition]:
        """Run ``job`` over every hosted log (or those of ``keys``) in one worker thread; returns
        the keys for which it returned a true value."""
        results = await self._map_logs(job, what, keys)
        return [key for key, r in results.items() if r]

    async def _map_logs(
        self,
        job: Callable[[ManagedLog], Any],
        what: str,
        keys: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, Any]:
        """Run ``job`` over every hosted log (or those of ``keys``) in one worker thread (a log
        deleted meanwhile is closed: the engine refuses the job and it is skipped); returns what
        it returned, by partition, for the logs where it did not fail."""
        if keys is None:
            logs = [(key, h.log) for key, h in self.hosted.items()]
        else:
            logs = [(key, h.log) for key in keys if (h := self.hosted.get(key)) is not None]
        if not logs:
            return {}
        io_errors: list[tuple[TopicPartition, OSError]] = []
        results: dict[TopicPartition, Any] = {}

        def run_all() -> None:
            for (topic, partition), lg in logs:
                try:
                    results[(topic, partition)] = job(lg)
                except OSError as exc:
                    io_errors.append(((topic, partition), exc))
                except KafkaError as exc:
                    if exc.code != ErrorCode.KAFKA_STORAGE_ERROR:
                        log.warning(
                            f"{what} failed", topic=topic, partition=partition, error=exc.message
                        )
                except Exception:
                    log.exception(f"{what} failed", topic=topic, partition=partition)

        await asyncio.to_thread(run_all)
        for (topic, partition), exc in io_errors:
            self.report_io_error(topic, partition, exc)
        return results

    async def run_retention(self) -> None:
        """Kafka's ``cleanupLogs`` (log.retention.check.interval.ms): deletes what retention.ms,
        retention.bytes and the log start offset no longer keep. Visits the logs marked since
        the last pass and those due by time (``services.storage.retention_schedule``)."""
        now = self.clock()
        schedule = self.retention_schedule
        keys = self.changes.take(RETENTION) | schedule.take_due(now)
        if not keys:
            return

        def retain(lg: ManagedLog) -> tuple[int, int | None]:
            return lg.delete_retained_segments(now), lg.retention_due_ms()

        results = await self._map_logs(retain, "retention", keys)
        shrunk: list[TopicPartition] = []
        for key in keys:
            deleted, due = results.get(key, (0, None))
            if key in self.hosted:
                schedule.schedule(key, due)
            else:
                schedule.forget(key)
            if deleted:
                shrunk.append(key)
        for key in shrunk:  # the log start moved: the jobs and the followers' sessions learn it
            self.mark_changed(key)
        if shrunk and self.fetchers is not None:  # and leaders, of the replicas following them
            self.fetchers.log_start_moved(shrunk)

    async def run_flush(self, max_unflushed_ms: int = LONG_MAX) -> None:
        """The background flush (``Log.maybe_flush``): rolled segments, flush.ms /
        flush.messages, and logs unflushed for ``max_unflushed_ms``. Only logs appended to
        (or truncated, created...) since they were last fully flushed are visited."""
        self._unflushed |= self.changes.take(FLUSH)
        if not self._unflushed:
            return
        now = self.clock()

        def flush(lg: ManagedLog) -> bool:
            lg.maybe_flush(now, max_unflushed_ms)
            return lg.log_end_offset > lg.recovery_point  # still something to flush later

        keys, self._unflushed = self._unflushed, set()
        self._unflushed.update(await self._each_log(flush, "flush", keys))
        # their recovery points may have moved (after the fact: a checkpoint reads them later)
        self.changes.mark_for(RECOVERY_POINTS, keys)

    def rebuild_checkpoint(self, job: str) -> dict[Path, dict[TopicPartition, int]]:
        """A checkpoint's content per online dir built from every hosted log (what the
        incremental one must equal)."""
        logs = {key: h.log for key, h in self.hosted.items()}
        return self.checkpoints[job].rebuild(logs, self.log_dirs.dir_of, self.log_dirs.online)

    async def _checkpoint(self, job: str, force: bool = False) -> None:
        """Bring the checkpoint up to date with the partitions marked for ``job`` (all of them
        when ``force``: shutdown) and write it in each online dir where it changed; a dir where
        it cannot be written goes offline (Kafka's checkpoint failure handling)."""
        cp = self.checkpoints[job]
        marked = self.changes.take(job)
        if force:
            cp.reset(self.rebuild_checkpoint(job))
        elif marked:
            logs = {key: h.log for key in marked if (h := self.hosted.get(key)) is not None}
            cp.update(marked, logs, self.log_dirs.dir_of)
        for d, offsets in cp.to_write(self.log_dirs.online):
            try:
                await asyncio.to_thread(ckpt.write_offset_checkpoint, d / cp.name, offsets)
            except OSError as exc:
                cp.failed(d)
                self.handle_log_dir_failure(d, f"cannot write {cp.name}: {exc}")

    async def checkpoint_recovery_points(self, force: bool = False) -> None:
        await self._checkpoint(RECOVERY_POINTS, force)

    async def checkpoint_high_watermarks(self, force: bool = False) -> None:
        await self._checkpoint(HIGH_WATERMARKS, force)

    async def checkpoint_log_start_offsets(self, force: bool = False) -> None:
        await self._checkpoint(LOG_STARTS, force)

    async def checkpoint_all(self) -> None:
        """Every checkpoint rebuilt from every log (shutdown: the logs were just flushed)."""
        for job in self.checkpoints:
            await self._checkpoint(job, force=True)

    async def close(self) -> bool:
        """Stop serving, flush and close every log, write the checkpoints. True if all went well.

        The replica fetchers must be stopped first (the node does it)."""
        if self.fetchers is not None:
            self.fetchers.unfollow(list(self.hosted))
        for key, hosted in self.hosted.items():
            hosted.partition.stop()
            self.on_state_change(key)
        logs = [(key, h.log) for key, h in self.hosted.items()]

        def close_all() -> bool:
            ok = True
            for (topic, partition), lg in logs:
                try:
                    lg.close()
                except Exception:
                    ok = False
                    log.exception("failed to close log", topic=topic, partition=partition)
            return ok

        ok = await asyncio.to_thread(close_all)
        try:
            await self.checkpoint_all()
        except Exception:
            ok = False
            log.exception("failed to write checkpoints")
        return ok

    def usage_bytes(self) -> int:
        """Bytes of every hosted log, re-measuring only the logs marked since the last call."""
        for key in self.changes.take(USAGE):
            h = self.hosted.get(key)
            try:
                size = h.log.size_bytes() if h is not None else 0
            except Exception:  # noqa: BLE001 - a log being deleted: counted when marked again
                size = 0
            self._size_total += size - self._sizes.pop(key, 0)
            if h is not None:
                self._sizes[key] = size
        return self._size_total

    # ---- metrics ------------------------------------------------------------------------------
    def gauges(self) -> ReplicaGauges:
        g = ReplicaGauges(
            partition_count=len(self.hosted),
            log_dirs={str(d): d in self.log_dirs.offline for d in self.log_dirs.all},
        )
        if self.fetchers is not None:
            g.replica_max_lag = self.fetchers.max_lag()
        for (topic, partition), h in list(self.hosted.items()):
            p = h.partition
            if p.is_leader:
                g.leader_count += 1
                g.under_replicated += p.is_under_replicated
                g.under_min_isr += p.is_under_min_isr
            try:
                size = self.backend.size(h.log)
                segments = self.backend.segment_count(h.log)
            except Exception:  # a log being deleted
                continue
            g.partitions.append(
                PartitionGauges(
                    topic, partition, size, h.log.log_start_offset, h.log.log_end_offset, segments
                )
            )
        return g

    def partitions(self) -> Iterable[Partition]:
        return [h.partition for h in self.hosted.values()]

    def logs(self) -> Mapping[TopicPartition, ManagedLog]:
        """The hosted logs by partition: a live view, nothing copied."""
        return _HostedLogs(self.hosted)


class _HostedLogs(Mapping[TopicPartition, ManagedLog]):
    def __init__(self, hosted: Mapping[TopicPartition, Hosted]) -> None:
        self._hosted = hosted

    def __getitem__(self, key: TopicPartition) -> ManagedLog:
        return self._hosted[key].log

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(list(self._hosted))

    def __len__(self) -> int:
        return len(self._hosted)


def _close_quietly(logs: list[ManagedLog]) -> None:
    """Close the logs of a failed dir (their files may be gone: errors are expected)."""
    for lg in logs:
        try:
            lg.close()
        except Exception as exc:  # noqa: BLE001
            log.debug("closing a log of a failed dir", error=repr(exc))
