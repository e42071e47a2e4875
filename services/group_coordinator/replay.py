"""A group coordinator shard's state as replayed from its ``__consumer_offsets`` partition."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.errors import KafkaError
from services.common.internal_topics.consumer_offsets import (
    GroupKey,
    GroupMetadata,
    OffsetAndMetadata,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from services.common.logging import get_logger
from services.common.records.batch import iter_headers
from services.common.records.record import iter_records

log = get_logger("group_coordinator.replay")


@dataclass(slots=True)
class ShardSnapshot:
    """A shard's state as replayed from its ``__consumer_offsets`` partition (newest record per
    key wins; tombstones remove)."""

    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = field(default_factory=dict)


class ShardReplay:
    """Rebuilds a shard's state from its partition, batch by batch (newest record per key
    wins; tombstones remove). Control batches (transaction markers) carry no group data."""

    def __init__(self) -> None:
        self._snapshot = ShardSnapshot()
        self.skipped = 0  # records that could not be read (logged)

    def apply(self, records: memoryview) -> int:
        """Apply every whole batch of ``records`` (a trailing partial batch is ignored);
        returns the offset after the last batch applied (-1 when none was whole)."""
        next_offset = -1
        for header in iter_headers(records):
            next_offset = header.next_offset
            if header.is_control:
                continue
            for record in iter_records(records, header):
                self._apply_record(record.key, record.value, record.offset)
        return next_offset

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
        return self._snapshot
