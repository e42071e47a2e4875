"""The transactional ids of one ``__transaction_state`` shard: Kafka's TransactionCoordinator
state machine (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort,
Dead, PrepareEpochFence).

Everything runs on the event loop. A change is appended to the shard's partition (acks=all)
and applied to memory only after the append succeeded; while it is written the id is
"pending" and other requests for it answer CONCURRENT_TRANSACTIONS (clients retry). EndTxn is
answered once PrepareCommit/PrepareAbort is written; the markers are then written to every
partition of the transaction through their leaders (retried until each leader took them), and
only then CompleteCommit/CompleteAbort. A shard loaded in PrepareCommit/PrepareAbort finishes
the markers of its former owner.

Producer epochs: InitProducerId bumps the epoch (a fresh id starts at 0), which fences the
previous producer of the id; an Ongoing transaction of that producer is aborted first with a
bumped epoch (the caller is answered CONCURRENT_TRANSACTIONS and retries). A transaction open
past its timeout is aborted the same way (the epoch bump fences its producer, which may recover
with KIP-360: InitProducerId carrying its last id and epoch). An epoch about to exhaust the
int16 range gets a new producer id instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

from services.common.coordinator.shard_store import ShardStore, store_error
from services.common.errors import ErrorCode
from services.common.internal_topics.transaction_state import (
    NO_PRODUCER_ID,
    TxnRecord,
    TxnState,
    transaction_key,
    transaction_value,
)
from services.common.logging import get_logger
from services.common.shard_tasks import ShardTasks, now_ms
from services.transaction_coordinator.config import TxnConfig

log = get_logger("transaction_coordinator.transactions")

S = TxnState
NO_EPOCH = -1
MAX_EPOCH = 32766  # Short.MaxValue - 1: one more bump would exhaust the epoch
TopicPartition = tuple[str, int]

# TransactionStateManager.appendTransactionToLog's mapping of append errors.
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
_COMPLETE_RETRY_MS = 500
# How long AddPartitionsToTxn / AddOffsetsToTxn / EndTxn of the id's current producer wait for
# a write in flight or the previous transaction's markers before answering
# CONCURRENT_TRANSACTIONS (which costs the client a round trip and a retry backoff).
SETTLE_WAIT_S = 1.0


class ProducerIds(Protocol):
    async def next_id(self) -> int: ...


class Markers(Protocol):
    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[TopicPartition],
        live: Callable[[], bool],
    ) -> bool:
        """Write the markers to every partition's leader, retrying until each took them;
        False if ``live()`` turned false first (the shard moved away)."""
        ...


@dataclass(slots=True)
class TxnEntry:
    """A transactional id in memory: its persisted record plus what Kafka keeps beside it."""

    record: TxnRecord
    last_producer_id: int = NO_PRODUCER_ID
    last_epoch: int = NO_EPOCH
    pending: bool = False  # a write is in flight
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def busy(self, markers: bool) -> bool:
        """A write in flight, or (``markers``) a prepared transaction's markers being written."""
        return self.pending or (
            markers and self.record.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
        )

    def notify(self) -> None:
        """Wake the requests waiting for this id to settle (``TxnShard._settled``)."""
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH


class TxnShard:
    def __init__(
        self,
        partition: int,
        store: ShardStore,
        config: TxnConfig,
        producer_ids: ProducerIds,
        markers: Markers,
        *,
        coordinator_epoch: int,
        on_completed: Callable[[bool], None] = lambda commit: None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.partition = partition
        self.store = store
        self.config = config
        self.producer_ids = producer_ids
        self.markers = markers
        self.coordinator_epoch = coordinator_epoch
        self.clock = clock
        self.tasks = ShardTasks(partition, "transaction")
        self.entries: dict[str, TxnEntry] = {}
        self._on_completed = on_completed
        self._abort_timer: asyncio.TimerHandle | None = None
        self._expire_timer: asyncio.TimerHandle | None = None

    @property
    def resigned(self) -> bool:
        return self.tasks.resigned

    # ---- lifecycle -------------------------------------------------------------------------
    def load(self, records: dict[str, TxnRecord]) -> None:
        """Restore what the log holds; transactions caught in PrepareCommit/PrepareAbort get
        their markers written (the former owner may have died before finishing them)."""
        for txn_id, record in records.items():
            entry = self.entries[txn_id] = TxnEntry(record, last_producer_id=record.producer_id)
            if record.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                log.info(
                    f"Completing transaction for {txn_id} with state {record.state.kafka_name} "
                    "after loading the shard",
                    transactional_id=txn_id,
                )
                self.tasks.spawn(self._complete(txn_id, entry))
        self._schedule_abort_check()
        self._schedule_expiry()

    def resign(self) -> None:
        if self.tasks.resigned:
            return
        self.tasks.resigned = True
        for timer in (self._abort_timer, self._expire_timer):
            if timer is not None:
                timer.cancel()
        for entry in self.entries.values():
            entry.notify()
        self.entries.clear()

    def states(self) -> list[TxnState]:
        return [e.record.state for e in self.entries.values()]

    # ---- writes ----------------------------------------------------------------------------
    async def _write(self, txn_id: str, entry: TxnEntry, record: TxnRecord) -> ErrorCode:
        """Append ``record`` for ``txn_id`` (in a task of its own: a caller that goes away
        cannot cut it short) and apply it once written."""
        entry.pending = True

        async def append() -> ErrorCode:
            try:
                try:
                    if self.tasks.resigned:
                        return ErrorCode.NOT_COORDINATOR
                    await self.store.append([(transaction_key(txn_id), transaction_value(record))])
                except Exception as exc:
                    return store_error(exc, _APPEND_ERRORS)
                finally:
                    entry.pending = False
                if self.entries.get(txn_id) is entry:
                    entry.record = record
                return ErrorCode.NONE
            finally:
                entry.notify()

        return await asyncio.shield(self.tasks.spawn(append()))

    async def _settled(self, txn_id: str, producer_id: int, epoch: int, *, markers: bool) -> None:
        """Wait (at most ``SETTLE_WAIT_S``) while ``txn_id``, held by this producer id and
        epoch, has a write in flight or (``markers``) its previous transaction's markers are
        being written. Kafka answers CONCURRENT_TRANSACTIONS at once and the client retries
        after a backoff; a transactional producer's next AddPartitionsToTxn nearly always lands
        in that window. EndTxn waits for writes only: a retried EndTxn must not be held into
        the producer's next transaction."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_WAIT_S
        while not self.tasks.resigned:
            entry = self.entries.get(txn_id)
            if (
                entry is None
                or entry.record.producer_id != producer_id
                or entry.record.producer_epoch != epoch
                or not entry.busy(markers)
                or (left := deadline - loop.time()) <= 0
            ):
                return
            waiter: asyncio.Future[None] = loop.create_future()
            entry.waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, left)
            except TimeoutError:
                return

    def _entry(self, txn_id: str, producer_id: int, epoch: int) -> TxnEntry | ErrorCode:
        """The id's entry if ``producer_id``/``epoch`` are its current ones."""
        if self.tasks.resigned:
            return ErrorCode.NOT_COORDINATOR
        entry = self.entries.get(txn_id)
        if entry is None or entry.record.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if entry.record.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED
        if entry.pending:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return entry

    # ---- InitProducerId --------------------------------------------------------------------
    async def init_producer_id(
        self, txn_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitResult:
        if self.tasks.resigned:
            return InitResult(ErrorCode.NOT_COORDINATOR)
        if not txn_id:
            return InitResult(ErrorCode.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        entry = self.entries.get(txn_id)
        if entry is None:
            try:
                new_id = await self.producer_ids.next_id()
            except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: retriable
                log.warning("producer_id_allocation_failed", error=repr(exc))
                return InitResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if self.tasks.resigned:
                return InitResult(ErrorCode.NOT_COORDINATOR)
            entry = self.entries.get(txn_id)
            if entry is None:
                record = TxnRecord(new_id, NO_EPOCH, timeout_ms, S.EMPTY, last_update_ms=-1)
                entry = self.entries[txn_id] = TxnEntry(record)
        if entry.pending:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        rec = entry.record
        if producer_id != NO_PRODUCER_ID:
            current = producer_id == rec.producer_id and producer_epoch == rec.producer_epoch
            previous = (
                producer_id in (rec.producer_id, entry.last_producer_id)
                and producer_epoch == entry.last_epoch
                and entry.last_epoch != NO_EPOCH
            )
            if not current and not previous:
                return InitResult(ErrorCode.PRODUCER_FENCED)
            if previous and rec.state == S.EMPTY:
                # a retry of the InitProducerId that made this epoch (its answer was lost)
                return InitResult(ErrorCode.NONE, rec.producer_id, rec.producer_epoch)
        if rec.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if rec.state == S.ONGOING:
            # fence the producer of the open transaction and abort it; the caller retries
            error = await self._fence_and_abort(txn_id, entry, "a new producer initialized")
            return InitResult(
                error if error != ErrorCode.NONE else ErrorCode.CONCURRENT_TRANSACTIONS
            )
        if rec.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if rec.producer_epoch >= MAX_EPOCH:
            try:
                new_pid, new_epoch = await self.producer_ids.next_id(), 0
            except Exception as exc:  # noqa: BLE001
                log.warning("producer_id_allocation_failed", error=repr(exc))
                return InitResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        else:
            new_pid, new_epoch = rec.producer_id, rec.producer_epoch + 1
        now = self.clock()
        record = TxnRecord(new_pid, new_epoch, timeout_ms, S.EMPTY, last_update_ms=now)
        error = await self._write(txn_id, entry, record)
        if error != ErrorCode.NONE:
            return InitResult(error)
        entry.last_producer_id, entry.last_epoch = rec.producer_id, rec.producer_epoch
        log.info(
            f"Initialized transactionalId {txn_id} with producerId {new_pid} and producer "
            f"epoch {new_epoch} on partition __transaction_state-{self.partition}",
            transactional_id=txn_id,
        )
        return InitResult(ErrorCode.NONE, new_pid, new_epoch)

    async def _fence_and_abort(self, txn_id: str, entry: TxnEntry, why: str) -> ErrorCode:
        """Bump the epoch of an Ongoing transaction (fencing its producer), write PrepareAbort
        with it, and complete the abort in the background."""
        rec = entry.record
        record = replace(
            rec,
            producer_epoch=min(rec.producer_epoch + 1, MAX_EPOCH + 1),
            state=S.PREPARE_ABORT,
            last_update_ms=self.clock(),
        )
        error = await self._write(txn_id, entry, record)
        if error != ErrorCode.NONE:
            return error
        entry.last_producer_id, entry.last_epoch = rec.producer_id, rec.producer_epoch
        log.info(
            f"Aborting transaction of {txn_id} (producerId {rec.producer_id}, epoch "
            f"{rec.producer_epoch}) with a bumped epoch {record.producer_epoch}: {why}",
            transactional_id=txn_id,
        )
        self.tasks.spawn(self._complete(txn_id, entry))
        return ErrorCode.NONE

    # ---- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------
    async def add_partitions(
        self, txn_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> ErrorCode:
        await self._settled(txn_id, producer_id, epoch, markers=True)
        got = self._entry(txn_id, producer_id, epoch)
        if isinstance(got, ErrorCode):
            return got
        rec = got.record
        if rec.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if rec.state not in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return ErrorCode.INVALID_TXN_STATE
        wanted = frozenset(partitions)
        if rec.state == S.ONGOING and wanted <= rec.partitions:
            return ErrorCode.NONE
        now = self.clock()
        record = replace(
            rec,
            state=S.ONGOING,
            partitions=rec.partitions | wanted if rec.state == S.ONGOING else wanted,
            start_ms=rec.start_ms if rec.state == S.ONGOING else now,
            last_update_ms=now,
        )
        return await self._write(txn_id, got, record)

    def verify_partitions(
        self, txn_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 part 1 (AddPartitionsToTxn v4 verify-only, Kafka's
        handleVerifyPartitionsInTransaction): each partition's answer to "is it part of the
        ongoing transaction of this producer id and epoch?" - nothing is written."""
        wanted = list(dict.fromkeys(partitions))
        got = self._entry(txn_id, producer_id, epoch)
        if isinstance(got, ErrorCode):
            return dict.fromkeys(wanted, got)
        rec = got.record
        if rec.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return dict.fromkeys(wanted, ErrorCode.CONCURRENT_TRANSACTIONS)
        ongoing = rec.partitions if rec.state == S.ONGOING else frozenset()
        return {
            tp: ErrorCode.NONE if tp in ongoing else ErrorCode.INVALID_TXN_STATE for tp in wanted
        }

    # ---- EndTxn ----------------------------------------------------------------------------
    async def end_txn(self, txn_id: str, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
        await self._settled(txn_id, producer_id, epoch, markers=False)
        got = self._entry(txn_id, producer_id, epoch)
        if isinstance(got, ErrorCode):
            return got
        state = got.record.state
        if state == S.ONGOING:
            record = replace(
                got.record,
                state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
                last_update_ms=self.clock(),
            )
            error = await self._write(txn_id, got, record)
            if error == ErrorCode.NONE:
                self.tasks.spawn(self._complete(txn_id, got))
            return error
        done, preparing = (
            (S.COMPLETE_COMMIT, S.PREPARE_COMMIT) if commit else (S.COMPLETE_ABORT, S.PREPARE_ABORT)
        )
        if state == done:
            return ErrorCode.NONE  # a retry of an EndTxn that completed
        if state == preparing:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE

    async def _complete(self, txn_id: str, entry: TxnEntry) -> None:
        """Markers to every partition of the prepared transaction, then Complete*."""
        rec = entry.record
        commit = rec.state == S.PREPARE_COMMIT

        def live() -> bool:
            return not self.tasks.resigned and self.entries.get(txn_id) is entry

        if rec.partitions and not await self.markers.write(
            rec.producer_id,
            rec.producer_epoch,
            self.coordinator_epoch,
            commit,
            rec.partitions,
            live,
        ):
            return
        record = replace(
            rec,
            state=S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT,
            partitions=frozenset(),
            last_update_ms=self.clock(),
        )
        while live():  # nothing else writes a prepared transaction (all answer CONCURRENT_...)
            error = await self._write(txn_id, entry, record)
            if error == ErrorCode.NONE:
                self._on_completed(commit)
                log.info(
                    f"Completed {'commit' if commit else 'abort'} of transaction {txn_id} "
                    f"(producerId {rec.producer_id}, epoch {rec.producer_epoch}, "
                    f"{len(rec.partitions)} partitions)",
                    transactional_id=txn_id,
                )
                return
            log.warning("transaction_complete_retry", transactional_id=txn_id, error=error.name)
            await asyncio.sleep(_COMPLETE_RETRY_MS / 1000)

    # ---- timeouts and expiry ---------------------------------------------------------------
    def _schedule_abort_check(self) -> None:
        self._abort_timer = self.tasks.call_later(
            self.config.abort_interval_ms, self._on_abort_timer
        )

    def _on_abort_timer(self) -> None:
        self.abort_timed_out()
        self._schedule_abort_check()

    def abort_timed_out(self) -> int:
        """Abort (with an epoch bump) every Ongoing transaction open past its timeout."""
        now = self.clock()
        count = 0
        for txn_id, entry in list(self.entries.items()):
            rec = entry.record
            if rec.state == S.ONGOING and not entry.pending and rec.start_ms + rec.timeout_ms < now:
                count += 1
                self.tasks.spawn(
                    self._fence_and_abort(txn_id, entry, f"timed out after {rec.timeout_ms} ms")
                )
        return count

    def _schedule_expiry(self) -> None:
        self._expire_timer = self.tasks.call_later(
            self.config.remove_expired_interval_ms, self._on_expire_timer
        )

    def _on_expire_timer(self) -> None:
        self.tasks.spawn(self.remove_expired())
        self._schedule_expiry()

    async def remove_expired(self) -> int:
        """Tombstone the ids idle (not in a transaction) for transactional.id.expiration.ms."""
        now = self.clock()
        gone = [
            (txn_id, entry)
            for txn_id, entry in self.entries.items()
            if entry.record.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
            and not entry.pending
            and entry.record.last_update_ms + self.config.id_expiration_ms < now
        ]
        if not gone:
            return 0
        for _, entry in gone:
            entry.pending = True
        try:
            await self.store.append([(transaction_key(txn_id), None) for txn_id, _ in gone])
        except Exception as exc:  # noqa: BLE001 - kept for the next round
            log.warning("transactional_id_expiry_failed", error=repr(exc))
            return 0
        finally:
            for _, entry in gone:
                entry.pending = False
        for txn_id, entry in gone:
            if self.entries.get(txn_id) is entry:
                del self.entries[txn_id]
        log.info(f"Removed {len(gone)} expired transactional ids", partition=self.partition)
        return len(gone)
