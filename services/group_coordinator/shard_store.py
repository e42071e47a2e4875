"""What a group coordinator shard writes through: its partition of ``__consumer_offsets``
(``shard_log.ShardLog`` in the service, an in-memory store in unit tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger

log = get_logger("group_coordinator.offsets")

Records = list[tuple[bytes, bytes | None]]


class ShardStore(Protocol):
    async def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Persist key/value records (value None = tombstone) with acks=all; raises
        ``KafkaError`` (NOT_COORDINATOR once fenced)."""
        ...


def store_error(exc: BaseException, mapping: dict[ErrorCode, ErrorCode]) -> ErrorCode:
    """The Kafka error to answer for a failed append."""
    if isinstance(exc, KafkaError):
        return mapping.get(exc.code, exc.code)
    log.error("offsets_append_failed", error=repr(exc))
    return ErrorCode.UNKNOWN_SERVER_ERROR
