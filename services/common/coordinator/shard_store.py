"""What a coordinator shard writes through: its partition of ``__consumer_offsets`` or
``__transaction_state`` (``shard_log.ShardLog`` in the services, an in-memory store in unit
tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger

log = get_logger("coordinator.shard_store")

Records = list[tuple[bytes, bytes | None]]


class ShardStore(Protocol):
    async def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Persist key/value records (value None = tombstone) with acks=all; raises
        ``KafkaError`` (NOT_COORDINATOR once fenced)."""
        ...


class TransactionalShardStore(ShardStore, Protocol):
    async def append_transactional(
        self, records: Sequence[tuple[bytes, bytes | None]], producer_id: int, epoch: int
    ) -> None:
        """Persist records as a transactional batch of a client's producer (TxnOffsetCommit)."""
        ...


def store_error(exc: BaseException, mapping: dict[ErrorCode, ErrorCode]) -> ErrorCode:
    """The Kafka error to answer for a failed append."""
    if isinstance(exc, KafkaError):
        return mapping.get(exc.code, exc.code)
    log.error("shard_append_failed", error=repr(exc))
    return ErrorCode.UNKNOWN_SERVER_ERROR
