"""A transaction coordinator shard's state as replayed from its ``__transaction_state``
partition: the newest record per transactional id wins, a tombstone removes it."""

from __future__ import annotations

from services.common.errors import KafkaError
from services.common.internal_topics.transaction_state import TxnRecord, parse_key, parse_value
from services.common.logging import get_logger
from services.common.records.batch import iter_headers
from services.common.records.record import iter_records

log = get_logger("transaction_coordinator.replay")


class TxnReplay:
    def __init__(self) -> None:
        self.transactions: dict[str, TxnRecord] = {}
        self.skipped = 0  # records that could not be read (logged)

    def apply(self, records: memoryview) -> int:
        """Apply every whole batch of ``records``; the offset after the last one (-1: none)."""
        next_offset = -1
        for header in iter_headers(records):
            next_offset = header.next_offset
            if header.is_control:
                continue
            for record in iter_records(records, header):
                self._apply(record.key, record.value, record.offset)
        return next_offset

    def _apply(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        try:
            if key is None:
                raise ValueError("record without a key")
            txn_id = parse_key(key)
            if value is None:
                self.transactions.pop(txn_id, None)
            else:
                self.transactions[txn_id] = parse_value(value)
        except (KafkaError, ValueError) as exc:
            self.skipped += 1
            log.warning("transaction_record_skipped", offset=offset, reason=str(exc))
