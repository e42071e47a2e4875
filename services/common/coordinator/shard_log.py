"""One coordinator shard - a partition of ``__consumer_offsets`` or ``__transaction_state`` - as
its owning coordinator writes and reads it, through the partition's leader storage node.

Writes are idempotent-producer batches: ``producer_id`` of the shard and ``producer_epoch`` =
the shard epoch (``layout.ShardOwner``). The first write of a new owner (``fence``) makes
storage reject every later write of a former owner (INVALID_PRODUCER_EPOCH); the shard is
loaded only after it, so nothing a former owner wrote can be missed. Appends are serialized
(one batch in flight, sequences in order); a batch whose outcome is unknown (timeout, lost
connection) is sent again, with the same sequence, before any new one, so storage's
duplicate detection settles it.

Group commit: ``append``s that arrive while a batch is in flight wait in a queue, and the
next batch carries all of them (in arrival order, up to ``max.message.bytes``), as Kafka's
coordinator runtime writes the records of many requests in one batch. Each caller is
answered once that batch is acknowledged (acks=all) or failed: it is one batch, so it is
written whole or not at all, and no caller waits for more than its own deadline. A combined
batch storage refuses as too large is sent again one caller at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc

from services.common.errors import ErrorCode, KafkaError
from services.common.internal_topics.schema import build_records_batch
from services.common.logging import get_logger
from services.common.metadata_cache import MetadataCache
from services.common.records.batch import iter_headers
from services.common.records.record import build_keyed_batch
from services.common.rpc.kafkapy.v1 import storage_pb2
from services.common.storage_client import StorageClients
from services.common.storage_wire import PartitionAppend, append_request
from services.common.zk.layout import ShardOwner

log = get_logger("coordinator.shard_log")

# Storage answers after which the same batch may be sent again once metadata has moved on.
_RETRY_ON_NEW_LEADER = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)
# This owner has been fenced (a newer epoch wrote) or its producer state is gone.
_FENCED = frozenset(
    {
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.UNKNOWN_PRODUCER_ID,
    }
)
# Storage refused the batch itself: nothing of it was appended (its sequence is not used).
_BATCH_REFUSED = frozenset(
    {
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.INVALID_RECORD,
    }
)
_TOO_LARGE = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE})
_NEW_LEADER_WAIT_S = 0.5
# Kafka's default message.max.bytes, used when the topic has no max.message.bytes override.
DEFAULT_MAX_MESSAGE_BYTES = 1048588
# Bytes a record may take in a batch besides its key and value (length, attributes,
# timestamp and offset deltas, key and value lengths, header count: varints at their widest).
_RECORD_OVERHEAD = 40
_BATCH_OVERHEAD = 61


class Replay(Protocol):
    def apply(self, records: memoryview) -> int:
        """Apply every whole batch of ``records``; the offset after the last one applied (-1
        when none was whole)."""
        ...


@dataclass(slots=True)
class _Queued:
    """One ``append`` waiting for the batch that will carry it."""

    records: Sequence[tuple[bytes, bytes | None]]
    deadline: float  # loop time
    size: int  # upper bound of its bytes in a batch
    done: asyncio.Future[None]


def _size_bound(records: Sequence[tuple[bytes, bytes | None]]) -> int:
    return sum(len(k) + len(v or b"") + _RECORD_OVERHEAD for k, v in records)


@dataclass(slots=True)
class _ForeignProducer:
    epoch: int
    next_sequence: int = 0
    in_doubt: tuple[bytes, int] | None = None


class ShardFencedError(KafkaError):
    """A newer owner of the shard has written: this coordinator must resign it."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.NOT_COORDINATOR, message)


class ShardLog:
    """The store of one owned shard (``group_coordinator.shard_store.ShardStore``).

    ``fence_key`` is the key of the fence record (a tombstone): one no real record has (the
    group "" / the transactional id "")."""

    def __init__(
        self,
        topic: str,
        partition: int,
        owner: ShardOwner,
        cache: MetadataCache,
        storage: StorageClients,
        *,
        commit_timeout_ms: int,
        request_timeout_ms: int,
        load_buffer_bytes: int,
        on_fenced: Callable[[int], None],
        fence_key: bytes,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self._fence_key = fence_key
        self.owner = owner
        self._cache = cache
        self._storage = storage
        self._commit_timeout_s = commit_timeout_ms / 1000.0
        self._request_timeout_s = request_timeout_ms / 1000.0
        self._load_buffer = load_buffer_bytes
        self._on_fenced = on_fenced
        self._lock = asyncio.Lock()
        self._next_sequence = 0
        self._in_doubt: bytes | None = None  # a batch whose outcome is not known yet
        self._in_doubt_count = 0
        self.fenced = False
        self._foreign: dict[int, _ForeignProducer] = {}  # TxnOffsetCommit producers
        self._queue: deque[_Queued] = deque()  # appends waiting for the next batch
        self._writer: asyncio.Task[None] | None = None

    # ---- loading ------------------------------------------------------------------------
    async def load(self, replay: Replay) -> None:
        """Replay the whole partition into ``replay``, then fence: write once with this owner's
        epoch (a tombstone of ``fence_key``), so storage refuses any later write of a former
        owner, and replay what was written up to that fence.

        The fence's sequence continues this epoch's last batch in the log (0 for a new epoch),
        so a restarted owner whose epoch did not change writes on where it left off."""
        end = await self._replay_range(replay, 0, None)
        fence_offset = await self._append([(self._fence_key, None)], self._request_timeout_s)
        await self._replay_range(replay, end, fence_offset + 1)

    async def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Persist ``records`` (acks=all) within ``offsets.commit.timeout.ms``, in one batch
        with the other appends queued meanwhile (group commit, module docstring)."""
        if self.fenced:
            raise ShardFencedError(f"{self.topic}-{self.partition}: this owner was fenced")
        loop = asyncio.get_running_loop()
        queued = _Queued(
            records,
            loop.time() + self._commit_timeout_s,
            _size_bound(records),
            loop.create_future(),
        )
        self._queue.append(queued)
        if self._writer is None:
            self._writer = loop.create_task(
                self._write_queue(), name=f"append-{self.topic}-{self.partition}"
            )
        await queued.done

    async def _write_queue(self) -> None:
        """Write the queue, a batch at a time, until it is empty."""
        try:
            while self._queue:
                async with self._lock:
                    group = self._take_group()
                    if group:
                        await self._write_group(group)
        finally:
            self._writer = None
            while self._queue:  # only when this task was cancelled (shutdown)
                _fail(self._queue.popleft(), KafkaError(ErrorCode.NOT_COORDINATOR, "shut down"))

    def _take_group(self) -> list[_Queued]:
        """The queued appends of the next batch: in arrival order, as many as fit in the
        topic's ``max.message.bytes`` (at least one). Callers that went away are dropped, and
        those whose deadline passed while queued are answered REQUEST_TIMED_OUT unwritten."""
        limit = self._max_batch_bytes() - _BATCH_OVERHEAD
        now = asyncio.get_running_loop().time()
        group: list[_Queued] = []
        size = 0
        while self._queue:
            head = self._queue[0]
            if head.done.done():  # its caller was cancelled before it was written
                self._queue.popleft()
                continue
            if head.deadline <= now:
                _fail(self._queue.popleft(), _timed_out(self.topic))
                continue
            if group and size + head.size > limit:
                break
            group.append(self._queue.popleft())
            size += head.size
        return group

    def _max_batch_bytes(self) -> int:
        topic = self._cache.topic(self.topic)
        value = topic.config.get("max.message.bytes") if topic is not None else None
        try:
            return int(value) if value is not None else DEFAULT_MAX_MESSAGE_BYTES
        except ValueError:
            return DEFAULT_MAX_MESSAGE_BYTES

    async def _write_group(self, group: list[_Queued]) -> None:
        """One batch for ``group`` (lock held); every member answered with its outcome. A
        combined batch refused as too large (a smaller ``message.max.bytes`` of the storage
        nodes) is written again one member at a time."""
        records = [r for q in group for r in q.records] if len(group) > 1 else group[0].records
        try:
            await self._write(records, min(q.deadline for q in group))
        except KafkaError as exc:
            if exc.code not in _TOO_LARGE or len(group) == 1:
                for q in group:
                    _fail(q, exc)
                return
            for q in group:
                await self._write_group([q])
            return
        except Exception as exc:  # noqa: BLE001 - each caller gets it, as it would alone
            for q in group:
                _fail(q, exc)
            return
        except asyncio.CancelledError:
            for q in group:
                _fail(q, KafkaError(ErrorCode.NOT_COORDINATOR, "append interrupted: shut down"))
            raise
        for q in group:
            if not q.done.done():
                q.done.set_result(None)

    async def _append(self, records: Sequence[tuple[bytes, bytes | None]], timeout_s: float) -> int:
        """Append ``records`` alone (the fence); their base offset."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with self._lock:
            return await self._write(records, deadline)

    async def _write(self, records: Sequence[tuple[bytes, bytes | None]], deadline: float) -> int:
        """One batch of ``records`` after any batch still in doubt (lock held); its base
        offset."""
        if self.fenced:
            raise ShardFencedError(f"{self.topic}-{self.partition}: this owner was fenced")
        if self._in_doubt is not None:
            await self._send(self._in_doubt, deadline)
            self._next_sequence += self._in_doubt_count
            self._in_doubt = None
        batch = build_records_batch(
            records,
            producer_id=self.owner.producer_id,
            producer_epoch=self.owner.epoch,
            base_sequence=self._next_sequence,
            timestamp_ms=int(time.time() * 1000),
        )
        self._in_doubt, self._in_doubt_count = batch, len(records)
        try:
            offset = await self._send(batch, deadline)
        except KafkaError as exc:
            if exc.code in _BATCH_REFUSED:
                self._in_doubt = None  # not appended: its sequence is free again
            raise
        self._in_doubt = None
        self._next_sequence += len(records)
        return offset

    async def append_transactional(
        self, records: Sequence[tuple[bytes, bytes | None]], producer_id: int, epoch: int
    ) -> None:
        """Append ``records`` as a transactional batch of a client's producer (TxnOffsetCommit:
        its transaction's marker commits or aborts them). Sequences of that producer continue
        per epoch; a batch whose outcome is unknown is sent again first. Storage refusing the
        client's epoch raises KafkaError (it does not fence this owner)."""
        if self.fenced:
            raise ShardFencedError(f"{self.topic}-{self.partition}: this owner was fenced")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._commit_timeout_s
        async with self._lock:
            state = self._foreign.get(producer_id)
            if state is None or state.epoch != epoch:
                state = self._foreign[producer_id] = _ForeignProducer(epoch)
            if state.in_doubt is not None:
                await self._send(state.in_doubt[0], deadline, own=False)
                state.next_sequence += state.in_doubt[1]
                state.in_doubt = None
            batch = build_keyed_batch(
                records,
                timestamp_ms=int(time.time() * 1000),
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=state.next_sequence,
                is_transactional=True,
            )
            state.in_doubt = (batch, len(records))
            try:
                await self._send(batch, deadline, own=False)
            except KafkaError as exc:
                if exc.code != ErrorCode.REQUEST_TIMED_OUT:
                    state.in_doubt = None  # refused: nothing was appended
                raise
            state.in_doubt = None
            state.next_sequence += len(records)

    async def _send(self, batch: bytes, deadline: float, own: bool = True) -> int:
        """Append ``batch`` (acks=all) until storage answers definitely; its base offset."""
        loop = asyncio.get_running_loop()
        part = PartitionAppend(self.topic, self.partition, batch)
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _timed_out(self.topic)
            info = self._cache.partition(self.topic, self.partition)
            stub = self._storage.stub(info.leader) if info is not None else None
            if stub is None:
                await self._wait_new_leader(info.leader if info else -1, remaining)
                continue
            request = append_request(-1, max(1, int(remaining * 1000)), None, [part])
            try:
                response = await stub.Append(request, timeout=remaining + 1.0)
            except grpc.aio.AioRpcError as exc:
                log.info(
                    "shard_append_retry",
                    topic=self.topic,
                    partition=self.partition,
                    status=exc.code().name,
                )
                await self._wait_new_leader(info.leader if info else -1, remaining)
                continue
            result = response.partitions[0]
            code = _code(result.error_code)
            if code == ErrorCode.NONE:
                return int(result.base_offset)
            if code in _RETRY_ON_NEW_LEADER:
                await self._wait_new_leader(info.leader if info else -1, remaining)
                continue
            if code in _FENCED and own:
                self.fenced = True
                self._on_fenced(self.partition)
                raise ShardFencedError(
                    f"{self.topic}-{self.partition} epoch {self.owner.epoch} fenced: "
                    f"{code.name} {result.error_message}"
                )
            raise KafkaError(code, result.error_message or code.name)

    async def _wait_new_leader(self, old_leader: int, remaining: float) -> None:
        def moved() -> bool:
            info = self._cache.partition(self.topic, self.partition)
            return info is not None and info.leader != old_leader and info.leader >= 0

        if not await self._cache.wait_for(moved, min(_NEW_LEADER_WAIT_S, remaining)):
            await asyncio.sleep(0)  # same leader: it may have recovered; try it again

    # ---- reads ---------------------------------------------------------------------------
    async def _replay_range(self, replay: Replay, start: int, end: int | None) -> int:
        """Feed ``replay`` the batches from ``start`` up to ``end`` (exclusive; None = up to
        the high watermark), read in chunks of ``load_buffer_bytes`` (``offsets.load.buffer.size``, ``transaction.state.log.load.buffer.size``) (one whole
        batch at least); tracks this epoch's last sequence. Returns the offset reached."""
        loop = asyncio.get_running_loop()
        offset = start
        deadline = loop.time() + self._request_timeout_s
        while end is None or offset < end:
            info = self._cache.partition(self.topic, self.partition)
            stub = self._storage.stub(info.leader) if info is not None else None
            if stub is None:
                await self._wait_or_fail(info.leader if info else -1, deadline)
                continue
            try:
                response = await stub.Fetch(
                    self._fetch_request(offset), timeout=self._request_timeout_s
                )
            except grpc.aio.AioRpcError:
                await self._wait_or_fail(info.leader if info else -1, deadline)
                continue
            result = response.partitions[0]
            code = _code(result.error_code)
            if code == ErrorCode.OFFSET_OUT_OF_RANGE and offset < result.log_start_offset:
                offset = result.log_start_offset
                continue
            if code in _RETRY_ON_NEW_LEADER:
                await self._wait_or_fail(info.leader if info else -1, deadline)
                continue
            if code != ErrorCode.NONE:
                raise KafkaError(code, f"loading {self.topic}-{self.partition}: {code.name}")
            records = memoryview(result.records)
            if not records:
                if end is None and offset >= result.high_watermark:
                    return offset
                await self._wait_or_fail(-2, deadline)  # not replicated that far yet
                continue
            deadline = loop.time() + self._request_timeout_s
            self._track_sequence(records)
            next_offset = replay.apply(records)
            if next_offset <= offset:
                raise KafkaError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"{self.topic}-{self.partition}: no whole batch at offset {offset}",
                )
            offset = next_offset
        return offset

    def _fetch_request(self, offset: int) -> storage_pb2.FetchRequest:
        return storage_pb2.FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=self._load_buffer,
            isolation_level=0,
            partitions=[
                storage_pb2.PartitionFetch(
                    topic=self.topic,
                    partition=self.partition,
                    fetch_offset=offset,
                    partition_max_bytes=self._load_buffer,
                    current_leader_epoch=-1,
                )
            ],
        )

    def _track_sequence(self, records: memoryview) -> None:
        """Continue after the last batch this producer id wrote with this epoch (and, for the
        transactional producers of TxnOffsetCommit, after their last batch)."""
        for header in iter_headers(records):
            if (
                header.producer_id == self.owner.producer_id
                and header.producer_epoch == self.owner.epoch
            ):
                self._next_sequence = header.last_sequence + 1
            elif header.is_transactional and not header.is_control:
                self._foreign[header.producer_id] = _ForeignProducer(
                    header.producer_epoch, header.last_sequence + 1
                )

    async def _wait_or_fail(self, old_leader: int, deadline: float) -> None:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise KafkaError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"{self.topic}-{self.partition} could not be read",
            )
        await self._wait_new_leader(old_leader, remaining)
        await asyncio.sleep(min(0.05, max(remaining, 0)))


def _timed_out(topic: str) -> KafkaError:
    return KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{topic} partition write timed out")


def _fail(queued: _Queued, exc: BaseException) -> None:
    if not queued.done.done():
        queued.done.set_exception(exc)


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
