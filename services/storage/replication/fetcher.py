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
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import grpc

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.storage_wire import PartitionFetchResult
from services.storage.fetch_sessions import next_epoch
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
class _Sent:
    """A partition as the leader's fetch session holds it: what this follower last told it."""

    state: FetchState
    offset: int
    log_start_offset: int
    leader_epoch: int


class FollowerSession:
    """This follower's half of a KIP-227 fetch session with one leader (Kafka's
    FetchSessionHandler): id 0 means the next fetch is full and opens a new session."""

    __slots__ = ("id", "epoch", "sent", "forgetting", "full_wanted")

    def __init__(self) -> None:
        self.id = 0
        self.epoch = 0  # of the last request answered
        self.sent: dict[TopicPartition, _Sent] = {}
        self.forgetting: set[TopicPartition] = set()  # forgotten by an abandoned request
        self.full_wanted = True

    def reset(self) -> None:
        """After an error or a change of leader: a full fetch comes next."""
        self.id = 0
        self.epoch = 0
        self.sent = {}
        self.forgetting = set()
        self.full_wanted = True

    def abandoned(self, req: pb.FetchRequest) -> list[TopicPartition]:
        """``req`` was abandoned (the partition set changed): the leader may or may not have
        seen it. The next request repeats its epoch (the leader takes it as the same request
        again, and answers again what it answered) and lists again what it listed, or forgets
        it, and forgets again what it forgot. Returns the partitions to look at again."""
        if req.session_id == 0:
            self.reset()
            return []
        listed = [(pf.topic, pf.partition) for pf in req.partitions]
        for key in listed:
            sent = self.sent.get(key)
            if sent is not None:
                sent.offset = -1  # differs from any position: listed (or forgotten) again
        self.forgetting.update((fp.topic, fp.partition) for fp in req.forgotten)
        return listed


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
        # fetch session (KIP-227): an idle fetch lists nothing and the loop visits nothing;
        # what may differ from what the leader's session holds is in ``_dirty``
        self.session = FollowerSession()
        self._dirty: set[TopicPartition] = set()
        self._truncating: set[TopicPartition] = set()
        self._waiting: set[TopicPartition] = set()  # backing off (``not_before``)
        self._held: set[TopicPartition] = set()  # held back by the follower throttle
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._leader_failures = 0
        self._log = log.bind(leader=leader_id)

    # ---- membership -------------------------------------------------------------------
    def add(self, p: Partition) -> None:
        """Follow ``p`` from scratch (truncation first) in its current leader epoch."""
        self.states[p.key] = FetchState(p, p.leader_epoch)
        self._truncating.add(p.key)
        self._dirty.add(p.key)
        self._changed.set()

    def remove(self, key: TopicPartition) -> bool:
        found = self.states.pop(key, None) is not None
        if found:
            self._truncating.discard(key)
            self._dirty.add(key)  # forgotten by the session at the next fetch
            self._changed.set()
        return found

    def touch(self, key: TopicPartition) -> None:
        """``key``'s log start moved here: its next fetch tells the leader (no hurry)."""
        if key in self.states:
            self._dirty.add(key)

    def wake(self) -> None:
        """Retry everything now (e.g. the leader's address changed)."""
        for s in self.states.values():
            s.not_before = 0.0
        self._waiting.clear()
        self.session.reset()  # perhaps a new leader process: open a new session
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
            self._release(now)
            truncating = [
                s
                for key in self._truncating
                if (s := self.states.get(key)) is not None and s.not_before <= now
            ]
            if not truncating and not self._may_fetch(now):
                await self._wait_changed(self._next_wake(now))
                continue
            try:
                endpoint = await self.endpoints.endpoint(self.leader_id)
                if endpoint is None:
                    self._leader_unreachable("leader is not registered")
                    continue
                if truncating:
                    await self._truncate(endpoint, truncating)
                elif not await self._fetch(endpoint):
                    # nothing to fetch: every partition backs off, or is throttled
                    await self._wait_changed(self._next_wake(now))
                self._leader_failures = 0
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as exc:
                self._leader_unreachable(f"{exc.code().name}: {exc.details()}")
            except Exception as exc:  # noqa: BLE001 - ZooKeeper lookups, bugs: keep going
                self._leader_unreachable(repr(exc), error=exc)

    def _may_fetch(self, now: float) -> bool:
        """Something to fetch: a session to poll, a change to tell, or a full fetch due (the
        last check visits every partition, only while the session is being reopened)."""
        session = self.session
        if session.sent or self._dirty or session.forgetting:
            return True
        if session.id == 0 and session.full_wanted:
            if any(s.phase is Phase.FETCHING and s.not_before <= now for s in self.states.values()):
                return True
            session.full_wanted = False  # none: a partition that becomes due brings it back
        return False

    def _release(self, now: float) -> None:
        """Partitions whose backoff ended, and those the throttle held, are looked at again."""
        for key in [
            k for k in self._waiting if (s := self.states.get(k)) is None or s.not_before <= now
        ]:
            self._waiting.discard(key)
            self._dirty.add(key)
        if self._held:
            self._dirty |= self._held
            self._held.clear()

    def _next_wake(self, now: float) -> float | None:
        """Seconds until a backoff ends or the throttle may let a partition go (None: none)."""
        times = [s.not_before - now for k in self._waiting if (s := self.states.get(k))]
        if self._held:
            times.append(self.rm.quotas.follower.bucket.wait_s())
        return max(0.0, min(times)) if times else None

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

    def _leader_unreachable(self, reason: str, error: BaseException | None = None) -> None:
        """Every partition due now backs off; the session starts again with a full fetch."""
        now = asyncio.get_running_loop().time()
        states = [s for s in self.states.values() if s.not_before <= now]
        self.session.reset()
        self._dirty.clear()  # a full fetch follows: it looks at every partition
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
        until = now + delay
        for s in states:
            s.not_before = max(s.not_before, until)
            self._waiting.add(s.key)

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
        self._waiting.add(s.key)
        self._dirty.add(s.key)  # out of the session until then
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
        if self.states.get(s.key) is s:  # not a state replaced since (it truncates anew)
            self._truncating.discard(s.key)
        self._dirty.add(s.key)
        p = s.partition
        self._log.info(
            "fetching",
            topic=p.topic,
            partition=p.partition,
            leader_epoch=s.leader_epoch,
            fetch_offset=p.log.log_end_offset,
        )

    # ---- fetching ---------------------------------------------------------------------
    def _hold_back(self, s: FetchState) -> bool:
        """Kafka's shouldFollowerThrottle: a throttled partition that is not caught up waits
        while the follower's quota is exceeded."""
        p = s.partition
        quota = self.rm.quotas.follower
        return (
            quota.is_throttled(p.topic, p.partition, p.config)
            and not s.caught_up
            and quota.hold_back()
        )

    def _request(self, now: float) -> pb.FetchRequest | None:
        """The next fetch of the session: full (every partition) when it has no id, otherwise
        the partitions added or moved since the last one and the forgotten ones. None when
        there is nothing to fetch."""
        cfg = self.config
        session = self.session
        full = session.id == 0
        if full:
            session.sent = {}
            session.full_wanted = False
            keys: Iterable[TopicPartition] = list(self.states)
            self._dirty = set()
        else:
            keys, self._dirty = self._dirty, set()
        parts: list[pb.PartitionFetch] = []
        forgotten: list[pb.ForgottenPartition] = []
        for key in keys:
            s = self.states.get(key)
            old = session.sent.get(key)
            fetchable = s is not None and s.phase is Phase.FETCHING and s.not_before <= now
            if s is not None and fetchable and self._hold_back(s):
                self._held.add(key)
                fetchable = False
            if s is None or not fetchable:
                if old is not None:
                    del session.sent[key]
                    forgotten.append(pb.ForgottenPartition(topic=key[0], partition=key[1]))
                continue
            p = s.partition
            offset, log_start = p.log.log_end_offset, p.log.log_start_offset
            if (
                old is not None
                and old.state is s
                and (old.offset, old.log_start_offset, old.leader_epoch)
                == (offset, log_start, s.leader_epoch)
            ):
                continue
            session.sent[key] = _Sent(s, offset, log_start, s.leader_epoch)
            parts.append(
                pb.PartitionFetch(
                    topic=p.topic,
                    partition=p.partition,
                    fetch_offset=offset,
                    partition_max_bytes=cfg.max_bytes,
                    current_leader_epoch=s.leader_epoch,
                    log_start_offset=log_start,
                )
            )
        if session.forgetting:  # forgotten by an abandoned request, and not listed since
            forgotten += [
                pb.ForgottenPartition(topic=key[0], partition=key[1])
                for key in session.forgetting
                if key not in session.sent
            ]
            session.forgetting = set()
        if not session.sent and not forgotten:
            return None
        return pb.FetchRequest(
            replica_id=cfg.broker_id,
            max_wait_ms=cfg.max_wait_ms,
            min_bytes=cfg.min_bytes,
            max_bytes=cfg.response_max_bytes,
            isolation_level=0,
            partitions=parts,
            use_session=True,
            session_id=session.id,
            session_epoch=0 if full else next_epoch(session.epoch),
            forgotten=forgotten,
        )

    async def _fetch(self, endpoint: LeaderEndpoint) -> bool:
        """One fetch of the session; False when there was nothing to fetch."""
        req = self._request(asyncio.get_running_loop().time())
        if req is None:
            return False
        session = self.session
        timeout_s = (self.config.max_wait_ms + self.config.request_timeout_ms) / 1000.0
        try:
            resp = await self._interruptible(endpoint.fetch(req, timeout_s))
        except BaseException:
            session.reset()  # did the leader see it? Start again
            raise
        if resp is None:
            self._dirty.update(session.abandoned(req))
            return True
        code = _code(resp.error_code)
        if code != ErrorCode.NONE:
            self._log.info(
                "fetch session refused, starting a new one",
                session_id=req.session_id,
                session_epoch=req.session_epoch,
                error=code.name,
            )
            session.reset()
            return True
        if req.session_id == 0:
            session.id = resp.session_id  # 0: the leader keeps no session, all fetches full
            session.epoch = 0
        else:
            session.epoch = req.session_epoch
        for r in resp.partitions:
            key = (r.topic, r.partition)
            sent = session.sent.get(key)
            if sent is None:
                continue
            self._dirty.add(key)  # the next fetch tells the leader what changed
            s, offset = sent.state, sent.offset
            if r.error_code:
                # the leader visits it again only when told: the next fetch lists it again (or
                # forgets it while it backs off), even if nothing changed here
                sent.offset = -1
            if not self._current(key, s):
                continue
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
                self._truncating.add(key)
                self._retry_later(s, ErrorCode.UNKNOWN_SERVER_ERROR, "append")
            except KafkaError as exc:
                self._retry_later(s, exc.code, "append")
            except OSError as exc:  # the replica's disk failed: its log dir goes offline
                self.rm.report_io_error(r.topic, r.partition, exc)
        return True

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
