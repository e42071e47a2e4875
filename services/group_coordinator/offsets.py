"""Committed offsets of a shard's groups: commit, fetch, delete, group deletion and the
periodic expiry (Kafka's GroupMetadataManager offset paths, KIP-211 retention).

A write takes a shard-wide sequence number before its append and is applied to memory only
after the append succeeds, and only where no later write of the same partition was applied
first, so memory always matches the order of the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from itertools import count

from services.common.coordinator.shard_store import (
    Records,
    TransactionalShardStore,
    store_error,
)
from services.common.errors import ErrorCode
from services.common.internal_topics.consumer_offsets import (
    OffsetAndMetadata,
    group_metadata_key,
    offset_commit_key,
    offset_commit_records,
)
from services.common.logging import get_logger
from services.common.shard_tasks import ShardTasks
from services.group_coordinator.config import GroupConfig
from services.group_coordinator.consumer_protocol import PROTOCOL_TYPE
from services.group_coordinator.group import Group, GroupState, TopicPartition

log = get_logger("group_coordinator.offsets")

S = GroupState

# storeOffsets' mapping of append errors (GroupMetadataManager.storeOffsets).
_COMMIT_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


class ShardOffsets:
    def __init__(
        self,
        groups: dict[str, Group],
        store: TransactionalShardStore,
        config: GroupConfig,
        tasks: ShardTasks,
        clock: Callable[[], int],
    ) -> None:
        """``groups`` is the shard's own dict (shared with its ``GroupShard``)."""
        self._groups = groups
        self._store = store
        self._config = config
        self._tasks = tasks
        self._clock = clock
        # TxnOffsetCommit offsets waiting for their transaction's marker: producer id -> group
        # -> partition -> offset (Kafka's pendingTransactionalOffsetCommits)
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        self._seq = count()
        self._expiry_timer: asyncio.TimerHandle | None = None

    def _live(self, group: Group) -> bool:
        return not self._tasks.resigned and self._groups.get(group.group_id) is group

    async def _append(self, records: Records) -> ErrorCode:
        """Append in a task of its own (a caller that goes away cannot cut it short)."""

        async def append() -> ErrorCode:
            if self._tasks.resigned:
                return ErrorCode.NOT_COORDINATOR
            try:
                await self._store.append(records)
            except Exception as exc:
                return store_error(exc, _COMMIT_ERRORS)
            return ErrorCode.NONE

        return await asyncio.shield(self._tasks.spawn(append()))

    # ---- OffsetCommit ----------------------------------------------------------------------
    async def store_offsets(
        self, group: Group, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, ErrorCode]:
        max_bytes = self._config.offset_metadata_max_bytes
        valid = {tp: o for tp, o in offsets.items() if len(o.metadata) <= max_bytes}
        if not valid:
            return {tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}
        seq = next(self._seq)
        records = offset_commit_records(group.group_id, valid)
        pending = valid.keys()
        group.pending_commits.append(pending)
        try:
            error = await self._append(records)
        finally:
            group.pending_commits.remove(pending)
        if error is ErrorCode.NONE and self._live(group) and not group.is_(S.DEAD):
            applied, offset_seq = group.offsets, group.offset_seq
            for tp, offset in valid.items():
                if seq > offset_seq.get(tp, -1):
                    applied[tp] = offset
                    offset_seq[tp] = seq
        if len(valid) == len(offsets):
            return dict.fromkeys(offsets, error)
        return {tp: error if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}

    # ---- TxnOffsetCommit and the transaction's marker -----------------------------------
    async def store_txn_offsets(
        self,
        group: Group,
        producer_id: int,
        epoch: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """Append the offsets in the producer's transaction; they count once its COMMIT marker
        is written (``complete_txn``)."""
        max_bytes = self._config.offset_metadata_max_bytes
        valid = {tp: o for tp, o in offsets.items() if len(o.metadata) <= max_bytes}
        if not valid:
            return {tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}
        records = offset_commit_records(group.group_id, valid)

        async def append() -> ErrorCode:
            if self._tasks.resigned:
                return ErrorCode.NOT_COORDINATOR
            try:
                await self._store.append_transactional(records, producer_id, epoch)
            except Exception as exc:
                return store_error(exc, _COMMIT_ERRORS)
            self.pending_txn.setdefault(producer_id, {}).setdefault(group.group_id, {}).update(
                valid
            )
            return ErrorCode.NONE

        error = await asyncio.shield(self._tasks.spawn(append()))
        return {tp: error if tp in valid else ErrorCode.OFFSET_METADATA_TOO_LARGE for tp in offsets}

    def complete_txn(self, producer_id: int, commit: bool) -> int:
        """The producer's transaction ended (its marker is in the log): its offsets count
        (COMMIT) or are dropped (ABORT). Returns the offsets applied."""
        applied = 0
        for group_id, offsets in self.pending_txn.pop(producer_id, {}).items():
            group = self._groups.get(group_id)
            if not commit or group is None or group.is_(S.DEAD):
                continue
            seq = next(self._seq)
            for tp, offset in offsets.items():
                group.offsets[tp] = offset
                group.offset_seq[tp] = seq
                applied += 1
        return applied

    def _pending_txn_of(self, group_id: str) -> set[TopicPartition]:
        return {tp for groups in self.pending_txn.values() for tp in groups.get(group_id, {})}

    # ---- OffsetFetch -----------------------------------------------------------------------
    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool
    ) -> list[tuple[TopicPartition, OffsetAndMetadata | None, ErrorCode]]:
        """Committed offsets of ``partitions`` (None = every partition the group has)."""
        group = self._groups.get(group_id)
        if group is None or group.is_(S.DEAD):
            return [(tp, None, ErrorCode.NONE) for tp in partitions or ()]
        wanted = list(group.offsets) if partitions is None else partitions
        unstable = (
            self._pending_txn_of(group_id) | group.pending_partitions() if require_stable else set()
        )
        out: list[tuple[TopicPartition, OffsetAndMetadata | None, ErrorCode]] = []
        for tp in wanted:
            # Kafka answers UNSTABLE_OFFSET_COMMIT while a commit of the partition is being
            # written or is part of an open transaction
            if tp in unstable:
                out.append((tp, None, ErrorCode.UNSTABLE_OFFSET_COMMIT))
            else:
                out.append((tp, group.offsets.get(tp), ErrorCode.NONE))
        return out

    # ---- OffsetDelete ----------------------------------------------------------------------
    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """Kafka's handleDeleteOffsets: (group error, per-partition errors)."""
        if self._tasks.resigned:
            return ErrorCode.NOT_COORDINATOR, {}
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, {}
        group = self._groups.get(group_id)
        if group is None or group.is_(S.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        errors: dict[TopicPartition, ErrorCode] = {}
        if group.is_(S.EMPTY):
            eligible = list(dict.fromkeys(partitions))
        elif group.protocol_type == PROTOCOL_TYPE:
            eligible = []
            for tp in dict.fromkeys(partitions):
                if group.is_subscribed_to(tp[0]):
                    errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if not eligible:
            return ErrorCode.NONE, errors
        seq = next(self._seq)
        # a tombstone for every eligible partition, so a retry after a failure is complete
        error = await self._append([(offset_commit_key(group_id, t, p), None) for t, p in eligible])
        if error is not ErrorCode.NONE:
            return error, {}
        removed = 0
        if self._live(group):
            for tp in eligible:
                if seq > group.offset_seq.get(tp, -1):
                    removed += group.offsets.pop(tp, None) is not None
                    group.offset_seq[tp] = seq
            self._maybe_dead(group)
        log.info(
            f"The following partitions of group {group_id} were deleted: "
            f"{', '.join(f'{t}-{p}' for t, p in eligible)}. "
            f"A total of {removed} offsets were removed.",
            group=group_id,
        )
        errors.update((tp, ErrorCode.NONE) for tp in eligible)
        return ErrorCode.NONE, errors

    def _maybe_dead(self, group: Group) -> None:
        """An Empty group with no offsets left is Dead: drop it, tombstone its metadata."""
        if not group.is_(S.EMPTY) or group.has_offsets():
            return
        log.info(
            f"Group {group.group_id} transitioned to Dead in generation {group.generation_id}",
            group=group.group_id,
        )
        group.transition_to(S.DEAD, self._clock())
        del self._groups[group.group_id]
        if group.generation_id > 0:  # generation 0: only offsets were ever stored
            self._tasks.spawn(self._tombstone_group(group.group_id))

    async def _tombstone_group(self, group_id: str) -> None:
        error = await self._append([(group_metadata_key(group_id), None)])
        if error is not ErrorCode.NONE:
            log.warning("group_tombstone_failed", group=group_id, error=error.name)

    # ---- deleted topics --------------------------------------------------------------------
    def topics(self) -> set[str]:
        """Every topic some group of the shard has a committed offset for."""
        return {t for group in self._groups.values() for t, _ in group.offsets}

    async def remove_topics(self, topics: Collection[str]) -> int:
        """Kafka's cleanupGroupMetadata for deleted topics: every group's offsets of ``topics``
        are forgotten and tombstoned (also those being committed right now, so a commit that
        lands first is covered); groups left Empty without offsets become Dead. Memory is
        updated first: the topics are gone whether or not the tombstones get written (a
        failed write is retried by the next load of the shard). Returns the offsets removed."""
        if self._tasks.resigned or not topics:
            return 0
        wanted = set(topics)
        seq = next(self._seq)
        records: Records = []
        removed: list[TopicPartition] = []
        for group in list(self._groups.values()):
            gone = [tp for tp in group.offsets if tp[0] in wanted]
            gone += [tp for tps in group.pending_commits for tp in tps if tp[0] in wanted]
            if not gone:
                continue
            for tp in dict.fromkeys(gone):
                if group.offsets.pop(tp, None) is not None:
                    removed.append(tp)
                group.offset_seq[tp] = seq
                records.append((offset_commit_key(group.group_id, tp[0], tp[1]), None))
            self._maybe_dead(group)
        if not records:
            return 0
        log.info(
            f"Removed {len(removed)} offsets associated with deleted partitions: "
            f"{', '.join(sorted({f'{t}-{p}' for t, p in removed}))}.",
            topics=sorted(wanted),
        )
        error = await self._append(records)
        if error is not ErrorCode.NONE:
            log.error("deleted_topic_offsets_tombstones_failed", error=error.name)
        return len(removed)

    # ---- DeleteGroups ----------------------------------------------------------------------
    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """Kafka's handleDeleteGroups; a group stays Dead while its tombstones are written and
        becomes Empty again if that fails."""
        errors: dict[str, ErrorCode] = {}
        eligible: list[Group] = []
        for group_id in dict.fromkeys(group_ids):
            group = self._groups.get(group_id)
            if self._tasks.resigned:
                errors[group_id] = ErrorCode.NOT_COORDINATOR
            elif group is None or group.is_(S.DEAD):
                errors[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.is_(S.EMPTY):
                group.transition_to(S.DEAD, self._clock())
                eligible.append(group)
            else:
                errors[group_id] = ErrorCode.NON_EMPTY_GROUP
        if not eligible:
            return errors
        records: Records = []
        for group in eligible:
            records += [(offset_commit_key(group.group_id, t, p), None) for t, p in group.offsets]
            if group.generation_id > 0:
                records.append((group_metadata_key(group.group_id), None))
        error = await self._append(records) if records else ErrorCode.NONE
        removed = 0
        for group in eligible:
            errors[group.group_id] = error
            if not self._live(group):
                continue
            if error is ErrorCode.NONE:
                removed += len(group.offsets)
                group.offsets.clear()
                del self._groups[group.group_id]
            else:
                group.state = S.EMPTY  # nothing was deleted: the group is back as it was
        if error is ErrorCode.NONE:
            log.info(
                "The following groups were deleted: "
                f"{', '.join(g.group_id for g in eligible)}. "
                f"A total of {removed} offsets were removed.",
            )
        return errors

    # ---- expiry ----------------------------------------------------------------------------
    def start_expiry(self) -> None:
        self._expiry_timer = self._tasks.call_later(
            self._config.offsets_retention_check_interval_ms, self._on_expiry_timer
        )

    def stop_expiry(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None

    def _on_expiry_timer(self) -> None:
        self._expiry_timer = None
        task = self._tasks.spawn(self.expire_offsets())
        task.add_done_callback(lambda _: None if self._tasks.resigned else self.start_expiry())

    async def expire_offsets(self) -> int:
        """Remove expired offsets (tombstones) and the groups left Empty without offsets;
        returns the number of offsets removed."""
        if self._tasks.resigned:
            return 0
        now = self._clock()
        records: Records = []
        removed = 0
        for group in list(self._groups.values()):
            expired = group.expired_offsets(now, self._config.offsets_retention_ms)
            if expired:
                seq = next(self._seq)
                for tp in expired:
                    del group.offsets[tp]
                    group.offset_seq[tp] = seq
                removed += len(expired)
                records += [(offset_commit_key(group.group_id, t, p), None) for t, p in expired]
            if group.is_(S.EMPTY) and not group.has_offsets():
                log.info(
                    f"Group {group.group_id} transitioned to Dead in generation "
                    f"{group.generation_id}",
                    group=group.group_id,
                )
                group.transition_to(S.DEAD, now)
                del self._groups[group.group_id]
                if group.generation_id > 0:
                    records.append((group_metadata_key(group.group_id), None))
        if records:
            error = await self._append(records)
            if error is not ErrorCode.NONE:
                # memory already forgot them; the log keeps them until a later owner expires
                # them again on its own schedule (as Kafka, whose tombstones are acks=0)
                log.error("expired_offsets_tombstones_failed", error=error.name)
        log.info(f"Removed {removed} expired offsets in {self._clock() - now} milliseconds.")
        return removed
