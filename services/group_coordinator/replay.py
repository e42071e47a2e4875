"""A group coordinator shard's state as replayed from its ``__consumer_offsets`` partition."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.errors import KafkaError
from services.common.internal_topics.consumer_offsets import (
    GroupKey,
    GroupMetadata,
    OffsetAndMetadata,
    OffsetKey,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from services.common.logging import get_logger
from services.common.records.batch import iter_headers
from services.common.records.record import Record, iter_records, parse_end_txn_marker

log = get_logger("group_coordinator.replay")


@dataclass(slots=True)
class ShardSnapshot:
    """A shard's state as replayed from its ``__consumer_offsets`` partition (newest record per
    key wins; tombstones remove)."""

    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = field(default_factory=dict)
    # transactional offset commits whose marker is not in the log yet: producer id -> group ->
    # partition -> offset (Kafka's pendingTransactionalOffsetCommits)
    pending_txn: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = field(
        default_factory=dict
    )


class ShardReplay:
    """Rebuilds a shard's state from its partition, batch by batch (newest record per key
    wins; tombstones remove). Offsets committed in a transaction (TxnOffsetCommit: batches of
    the transactional producer) are held per producer until its marker: COMMIT applies them,
    ABORT drops them; those still open at the end are the snapshot's ``pending_txn``."""

    def __init__(self) -> None:
        self._snapshot = ShardSnapshot()
        self._open: dict[int, list[tuple[bytes | None, bytes | None, int]]] = {}
        self.skipped = 0  # records that could not be read (logged)

    def apply(self, records: memoryview) -> int:
        """Apply every whole batch of ``records`` (a trailing partial batch is ignored);
        returns the offset after the last batch applied (-1 when none was whole)."""
        next_offset = -1
        for header in iter_headers(records):
            next_offset = header.next_offset
            if header.is_control:
                for record in iter_records(records, header):
                    self._end_txn(header.producer_id, record)
            elif header.is_transactional:
                self._open.setdefault(header.producer_id, []).extend(
                    (r.key, r.value, r.offset) for r in iter_records(records, header)
                )
            else:
                for record in iter_records(records, header):
                    self._apply_record(record.key, record.value, record.offset)
        return next_offset

    def _end_txn(self, producer_id: int, record: Record) -> None:
        try:
            marker = parse_end_txn_marker(record)
        except KafkaError as exc:
            self._skip(record.offset, str(exc))
            return
        for key, value, offset in self._open.pop(producer_id, ()):
            if marker.commit:
                self._apply_record(key, value, offset)

    def _apply_record(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        if key is None:
            self._skip(offset, "record without a key")
            return
        try:
            parsed = parse_key(key)
        except KafkaError as exc:
            self._skip(offset, str(exc))
            return
        snap = self._snapshot
        if isinstance(parsed, GroupKey):
            if value is None:
                snap.groups.pop(parsed.group, None)
                return
            try:
                snap.groups[parsed.group] = parse_group_value(value)
            except KafkaError as exc:
                self._skip(offset, str(exc))
            return
        tp = (parsed.topic, parsed.partition)
        if value is None:
            offsets = snap.offsets.get(parsed.group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del snap.offsets[parsed.group]
            return
        try:
            snap.offsets.setdefault(parsed.group, {})[tp] = parse_offset_value(value)
        except KafkaError as exc:
            self._skip(offset, str(exc))

    def _skip(self, offset: int, why: str) -> None:
        self.skipped += 1
        log.warning("offsets_record_skipped", offset=offset, reason=why)

    def snapshot(self) -> ShardSnapshot:
        """The state replayed so far (open transactions' offsets in ``pending_txn``)."""
        pending: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        for pid, records in self._open.items():
            for key, value, offset in records:
                try:
                    parsed = parse_key(key) if key is not None else None
                    if isinstance(parsed, OffsetKey) and value is not None:
                        pending.setdefault(pid, {}).setdefault(parsed.group, {})[
                            (parsed.topic, parsed.partition)
                        ] = parse_offset_value(value)
                except KafkaError as exc:
                    self._skip(offset, str(exc))
        self._snapshot.pending_txn = pending
        return self._snapshot
