"""A replica fetcher: replicates the partitions this node follows from one leader broker.

Kafka's ``ReplicaFetcherThread`` in the KIP-101/279 style. Each partition first *truncates*: the
fetcher asks the leader (OffsetForLeaderEpoch) where the follower's latest epoch ends and cuts
the log there (``truncation.decide_truncation``); then it *fetches*: one long-poll Fetch for all
its partitions (replica_id = this broker, fetch_offset = the LEO, current_leader_epoch set),
appends what comes back as it is (``Log.append_as_follower``) and sets its high watermark to
min(leader HW, own LEO). The leader learns the follower's LEO from the next fetch's offset.

Errors are per partition: OFFSET_OUT_OF_RANGE truncates (to the leader's LEO, or fully to the
leader's log start offset when the leader deleted what we need); fenced/unknown leader epoch,
NOT_LEADER_OR_FOLLOWER and the like back the partition off until the controller's next order
(which restarts it) or the leader catches up with its own order. An unreachable leader backs
off every partition with jitter and keeps trying.

Everything runs on the event loop: between an await and the next, nothing else touches the
partitions, and every response is checked against the partition's current role and epoch
before it is applied (the partition may have changed leader while the request was out).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

import grpc

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.storage_wire import PartitionFetchResult
from services.storage.log.log import UnexpectedAppendOffsetError
from services.storage.metrics import StorageMetrics
from services.storage.partition import Partition, Role, TopicPartition
from services.storage.replica_manager import ReplicaManager
from services.storage.replication.batches import follower_batches
from services.storage.replication.endpoints import EndpointProvider, LeaderEndpoint
from services.storage.replication.truncation import decide_truncation

FetchResult = pb.PartitionFetchResult | PartitionFetchResult  # generated, or read by storage_wire

log = get_logger("storage.replication.fetcher")

T = TypeVar("T")

RETRY_MIN_MS = 50  # first retry of a partition error; doubles up to replica.fetch.backoff.ms
JITTER = 0.2
LOG_EVERY = 20  # repeated failures of one partition are logged once in this many


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """The replica.* settings of Kafka's fetcher."""

    broker_id: int
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 1048576  # replica.fetch.max.bytes (per partition)
    response_max_bytes: int = 10485760  # replica.fetch.response.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    request_timeout_ms: int = 30000  # replica.socket.timeout.ms


class Phase(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"


@dataclass(slots=True)
class FetchState:
    partition: Partition
    leader_epoch: int
    phase: Phase = Phase.TRUNCATING
    not_before: float = 0.0  # loop time before which the partition is not retried
    failures: int = 0
    leader_high_watermark: int = -1
    leader_log_end_offset: int = -1  # as the last fetch answer said

    @property
    def key(self) -> TopicPartition:
        return self.partition.key

    @property
    def caught_up(self) -> bool:
        """At the leader's high watermark (Kafka's ``isReplicaInSync`` of a fetch state): a
        throttle never holds such a replica back."""
        hw = self.leader_high_watermark
        return hw >= 0 and self.partition.log.log_end_offset >= hw


def backoff_s(failures: int, max_ms: int) -> float:
    """Exponential from RETRY_MIN_MS to ``max_ms``, +/- 20 % jitter."""
    base = min(float(max_ms), RETRY_MIN_MS * 2.0 ** max(failures - 1, 0))
    return base * random.uniform(1 - JITTER, 1 + JITTER) / 1000.0


class ReplicaFetcher:
    """Fetches the followed partitions of one leader broker (start with :meth:`start`)."""

    def __init__(
        self,
        leader_id: int,
        rm: ReplicaManager,
        endpoints: EndpointProvider,
        config: FetcherConfig,
    ) -> None:
        self.leader_id = leader_id
        self.rm = rm
        self.endpoints = endpoints
        self.config = config
        self.metrics: StorageMetrics = rm.metrics
        self.states: dict[TopicPartition, FetchState] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._leader_failures = 0
        self._log = log.bind(leader=leader_id)

    # ---- membership -------------------------------------------------------------------
    def add(self, p: Partition) -> None:
        """Follow ``p`` from scratch (truncation first) in its current leader epoch."""
        self.states[p.key] = FetchState(p, p.leader_epoch)
        self._changed.set()

    def remove(self, key: TopicPartition) -> bool:
        found = self.states.pop(key, None) is not None
        if found:
            self._changed.set()
        return found

    def wake(self) -> None:
        """Retry everything now (e.g. the leader's address changed)."""
        for s in self.states.values():
            s.not_before = 0.0
        self._leader_failures = 0
        self._changed.set()

    @property
    def empty(self) -> bool:
        return not self.states

    def max_lag(self) -> int:
        lag = 0
        for s in self.states.values():
            if s.leader_high_watermark >= 0:
                lag = max(lag, s.leader_high_watermark - s.partition.log.log_end_offset)
        return lag

    # ---- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def cancel(self) -> asyncio.Task[None] | None:
        """Stop (at the next await); returns the task to await, if any."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        return task

    async def stop(self) -> None:
        task = self.cancel()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    # ---- the loop ---------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._changed.clear()
            now = loop.time()
            due = [s for s in self.states.values() if s.not_before <= now]
            if not due:
                wake_at = min((s.not_before for s in self.states.values()), default=None)
                await self._wait_changed(None if wake_at is None else wake_at - now)
                continue
            try:
                endpoint = await self.endpoints.endpoint(self.leader_id)
                if endpoint is None:
                    self._leader_unreachable(due, "leader is not registered")
                    continue
                truncating = [s for s in due if s.phase is Phase.TRUNCATING]
                if truncating:
                    await self._truncate(endpoint, truncating)
                else:
                    await self._fetch(endpoint, due)
                self._leader_failures = 0
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as exc:
                self._leader_unreachable(due, f"{exc.code().name}: {exc.details()}")
            except Exception as exc:  # noqa: BLE001 - ZooKeeper lookups, bugs: keep going
                self._leader_unreachable(due, repr(exc), error=exc)

    async def _wait_changed(self, timeout_s: float | None) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._changed.wait()

    async def _interruptible(self, call: Awaitable[T]) -> T | None:
        """Await an RPC, abandoning it (None) when the partition set changes meanwhile, so a
        newly followed partition does not wait for a long poll of the others to end."""
        rpc = asyncio.ensure_future(call)
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({rpc, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            if not rpc.done():
                rpc.cancel()
                await asyncio.gather(rpc, return_exceptions=True)
        if rpc.cancelled():
            return None
        return rpc.result()

    def _leader_unreachable(
        self, states: list[FetchState], reason: str, error: BaseException | None = None
    ) -> None:
        self._leader_failures += 1
        delay = backoff_s(self._leader_failures, self.config.backoff_ms)
        if self._leader_failures == 1 or self._leader_failures % LOG_EVERY == 0:
            self._log.warning(
                "cannot reach leader, backing off",
                reason=reason,
                partitions=len(states),
                attempt=self._leader_failures,
                backoff_ms=round(delay * 1000),
                exc_info=error,
            )
        until = asyncio.get_running_loop().time() + delay
        for s in states:
            s.not_before = max(s.not_before, until)

    def _current(self, key: TopicPartition, sent: FetchState) -> bool:
        """``sent`` is still how ``key`` is followed, and the partition still follows us."""
        if self.states.get(key) is not sent:
            return False
        p = sent.partition
        return (
            self.rm.get(*key) is p
            and p.role is Role.FOLLOWER
            and p.leader_id == self.leader_id
            and p.leader_epoch == sent.leader_epoch
        )

    def _retry_later(self, s: FetchState, code: ErrorCode, what: str) -> None:
        s.failures += 1
        delay = backoff_s(s.failures, self.config.backoff_ms)
        s.not_before = asyncio.get_running_loop().time() + delay
        if s.failures == 1 or s.failures % LOG_EVERY == 0:
            self._log.info(
                f"{what} failed, retrying",
                topic=s.partition.topic,
                partition=s.partition.partition,
                error=code.name,
                leader_epoch=s.leader_epoch,
                attempt=s.failures,
                backoff_ms=round(delay * 1000),
            )

    # ---- truncation -------------------------------------------------------------------
    async def _truncate(self, endpoint: LeaderEndpoint, states: list[FetchState]) -> None:
        asks: list[pb.OffsetForLeaderEpochPartition] = []
        sent: dict[TopicPartition, FetchState] = {}
        for s in states:
            p = s.partition
            latest = p.log.leader_epoch_cache.latest_epoch
            if latest is None:
                # no epoch history (an empty log): keep what was committed
                self._truncate_to(s, min(p.high_watermark, p.log.log_end_offset), "no epochs")
                self._start_fetching(s)
                continue
            asks.append(
                pb.OffsetForLeaderEpochPartition(
                    topic=p.topic,
                    partition=p.partition,
                    current_leader_epoch=s.leader_epoch,
                    leader_epoch=latest,
                )
            )
            sent[s.key] = s
        if not asks:
            return
        req = pb.OffsetForLeaderEpochRequest(replica_id=self.config.broker_id, partitions=asks)
        timeout_s = self.config.request_timeout_ms / 1000.0
        resp = await self._interruptible(endpoint.offset_for_leader_epoch(req, timeout_s))
        if resp is None:
            return
        for r in resp.partitions:
            key = (r.topic, r.partition)
            asked = sent.get(key)
            if asked is None or not self._current(key, asked):
                continue
            s = asked
            code = _code(r.error_code)
            if code != ErrorCode.NONE:
                self._retry_later(s, code, "offset for leader epoch")
                continue
            p = s.partition
            decision = decide_truncation(
                r.leader_epoch,
                r.end_offset,
                log_end_offset=p.log.log_end_offset,
                high_watermark=p.high_watermark,
                local_end_offset_for=p.end_offset_for_epoch,
            )
            self._truncate_to(
                s, decision.offset, f"leader epoch {r.leader_epoch} ends at {r.end_offset}"
            )
            if decision.completed:
                self._start_fetching(s)

    def _truncate_to(self, s: FetchState, offset: int, reason: str) -> None:
        p = s.partition
        before = p.log.log_end_offset
        if offset >= before:
            # No data to cut, but epochs starting at or after the offset (a leadership that
            # wrote nothing) must go too, or the next OffsetForLeaderEpoch would ask for them
            # again and never converge.
            p.log.leader_epoch_cache.truncate_from_end(offset)
            return
        if p.log.truncate_to(offset):
            self.rm.mark_changed(p.key)
            self._log.info(
                "truncated follower log",
                topic=p.topic,
                partition=p.partition,
                offset=offset,
                previous_log_end_offset=before,
                leader_epoch=s.leader_epoch,
                reason=reason,
            )

    def _start_fetching(self, s: FetchState) -> None:
        s.phase = Phase.FETCHING
        s.failures = 0
        s.not_before = 0.0
        p = s.partition
        self._log.info(
            "fetching",
            topic=p.topic,
            partition=p.partition,
            leader_epoch=s.leader_epoch,
            fetch_offset=p.log.log_end_offset,
        )

    # ---- fetching ---------------------------------------------------------------------
    async def _fetch(self, endpoint: LeaderEndpoint, states: list[FetchState]) -> None:
        cfg = self.config
        sent: dict[TopicPartition, tuple[FetchState, int]] = {}
        parts: list[pb.PartitionFetch] = []
        quota = self.rm.quotas.follower
        for s in states:
            p = s.partition
            if (
                quota.is_throttled(p.topic, p.partition, p.config)
                and not s.caught_up
                and quota.hold_back()
            ):
                continue  # Kafka's shouldFollowerThrottle: not this time
            offset = p.log.log_end_offset
            sent[s.key] = (s, offset)
            parts.append(
                pb.PartitionFetch(
                    topic=p.topic,
                    partition=p.partition,
                    fetch_offset=offset,
                    partition_max_bytes=cfg.max_bytes,
                    current_leader_epoch=s.leader_epoch,
                    log_start_offset=p.log.log_start_offset,
                )
            )
        if not parts:  # every due partition is throttled: wait for the quota (or a change)
            await self._wait_changed(quota.bucket.wait_s())
            return
        req = pb.FetchRequest(
            replica_id=cfg.broker_id,
            max_wait_ms=cfg.max_wait_ms,
            min_bytes=cfg.min_bytes,
            max_bytes=cfg.response_max_bytes,
            isolation_level=0,
            partitions=parts,
        )
        timeout_s = (cfg.max_wait_ms + cfg.request_timeout_ms) / 1000.0
        resp = await self._interruptible(endpoint.fetch(req, timeout_s))
        if resp is None:
            return
        for r in resp.partitions:
            key = (r.topic, r.partition)
            got = sent.get(key)
            if got is None or not self._current(key, got[0]):
                continue
            s, offset = got
            if s.partition.log.log_end_offset != offset:
                continue  # truncated meanwhile (a new order): the data no longer fits
            try:
                self._apply(s, r)
            except UnexpectedAppendOffsetError as exc:
                self._log.warning(
                    "leader sent unexpected offsets, truncating again",
                    topic=r.topic,
                    partition=r.partition,
                    error=exc.message,
                )
                s.phase = Phase.TRUNCATING
                self._retry_later(s, ErrorCode.UNKNOWN_SERVER_ERROR, "append")
            except KafkaError as exc:
                self._retry_later(s, exc.code, "append")
            except OSError as exc:  # the replica's disk failed: its log dir goes offline
                self.rm.report_io_error(r.topic, r.partition, exc)

    def _apply(self, s: FetchState, r: FetchResult) -> None:
        code = _code(r.error_code)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._out_of_range(s, r)
            return
        if code != ErrorCode.NONE:
            self._retry_later(s, code, "fetch")
            return
        p = s.partition
        lg = p.log
        before = (lg.log_end_offset, lg.high_watermark, lg.log_start_offset)
        records = r.records  # a view of the leader's answer
        if records:
            headers = follower_batches(records)
            if headers:
                lg.append_as_follower(records, headers, self.rm.clock())
                self.metrics.replication_bytes_in.labels(p.topic).inc(len(records))
                quota = self.rm.quotas.follower
                if quota.is_throttled(p.topic, p.partition, p.config):
                    quota.record(p.topic, len(records))
        # follower HW = min(leader HW, own LEO) (the log clamps it)
        lg.high_watermark = r.high_watermark
        if lg.log_start_offset < r.log_start_offset <= lg.high_watermark:
            lg.maybe_increment_log_start_offset(r.log_start_offset)
        if (lg.log_end_offset, lg.high_watermark, lg.log_start_offset) != before:
            self.rm.mark_changed(p.key)  # flush, usage report, HW checkpoint
        s.leader_high_watermark = r.high_watermark
        s.leader_log_end_offset = r.log_end_offset
        s.failures = 0

    def _out_of_range(self, s: FetchState, r: FetchResult) -> None:
        """Kafka's ``fetchOffsetAndTruncate``: behind the leader's log start, or beyond its end."""
        p = s.partition
        leo = p.log.log_end_offset
        if r.log_end_offset < leo:
            self._log.warning(
                "follower is ahead of the leader: truncating to the leader's log end offset",
                topic=p.topic,
                partition=p.partition,
                log_end_offset=leo,
                leader_log_end_offset=r.log_end_offset,
            )
            self._truncate_to(s, max(r.log_end_offset, 0), "beyond the leader's log end")
        elif r.log_start_offset > leo:
            self._log.info(
                "leader deleted what the follower needs: restarting the log at its log start",
                topic=p.topic,
                partition=p.partition,
                log_end_offset=leo,
                leader_log_start_offset=r.log_start_offset,
            )
            p.log.truncate_fully_and_start_at(r.log_start_offset)
            self.rm.mark_changed(p.key)
        # otherwise the offset is in range again (the leader moved meanwhile): fetch again


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
