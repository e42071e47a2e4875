"""How the replica manager opens logs: the real log engine, or a fake in unit tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from services.storage.log.config import LogConfig
from services.storage.log.log import Log
from services.storage.partition import LogLike


class ManagedLog(LogLike, Protocol):
    """A ``LogLike`` plus the maintenance calls the node makes."""

    def delete_retained_segments(self, now_ms: int) -> int: ...

    def retention_due_ms(self) -> int | None:
        """When retention may next delete something by time alone (None: only on a change)."""
        ...

    def maybe_flush(self, now_ms: int, max_unflushed_ms: int = ...) -> Any: ...

    def flush(self) -> Any: ...

    def close(self) -> None: ...

    def delete(self) -> None: ...

    def update_config(self, cfg: Any) -> None: ...

    def size_bytes(self) -> int: ...


class LogBackend(Protocol):
    def open(
        self,
        dir: Path,
        topic: str,
        partition: int,
        config: Mapping[str, Any],
        *,
        topic_id: bytes | None,
        recovery_point: int,
        clean_shutdown: bool,
        log_start_offset: int | None,
    ) -> ManagedLog: ...

    def make_config(self, config: Mapping[str, Any]) -> Any:
        """The object ``ManagedLog.update_config`` takes, from a Kafka-named topic config."""
        ...

    def size(self, log: ManagedLog) -> int: ...

    def segment_count(self, log: ManagedLog) -> int | None: ...

    def topic_id(self, log: ManagedLog) -> bytes | None: ...

    def set_topic_id(self, log: ManagedLog, topic_id: bytes) -> None: ...


class EngineBackend:
    """``services.storage.log``: Kafka's on-disk format."""

    def open(
        self,
        dir: Path,
        topic: str,
        partition: int,
        config: Mapping[str, Any],
        *,
        topic_id: bytes | None,
        recovery_point: int,
        clean_shutdown: bool,
        log_start_offset: int | None,
    ) -> ManagedLog:
        log: ManagedLog = Log.open(
            dir,
            topic,
            partition,
            LogConfig.from_topic_config(config),
            topic_id=topic_id,
            recovery_point=recovery_point,
            clean_shutdown=clean_shutdown,
            log_start_offset=log_start_offset,
        )
        return log

    def make_config(self, config: Mapping[str, Any]) -> Any:
        return LogConfig.from_topic_config(config)

    def size(self, log: ManagedLog) -> int:
        assert isinstance(log, Log)
        return log.size_bytes()

    def segment_count(self, log: ManagedLog) -> int | None:
        assert isinstance(log, Log)
        return len(log.segments)

    def topic_id(self, log: ManagedLog) -> bytes | None:
        assert isinstance(log, Log)
        return log.topic_id

    def set_topic_id(self, log: ManagedLog, topic_id: bytes) -> None:
        assert isinstance(log, Log)
        log.assign_topic_id(topic_id)
