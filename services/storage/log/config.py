"""Typed per-partition log configuration (the log-related topic configs)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

LONG_MAX = 9223372036854775807

# LogConfig field -> Kafka topic config name
_NAMES: dict[str, str] = {
    "segment_bytes": "segment.bytes",
    "segment_ms": "segment.ms",
    "segment_jitter_ms": "segment.jitter.ms",
    "retention_ms": "retention.ms",
    "retention_bytes": "retention.bytes",
    "index_interval_bytes": "index.interval.bytes",
    "segment_index_bytes": "segment.index.bytes",
    "max_message_bytes": "max.message.bytes",
    "message_timestamp_type": "message.timestamp.type",
    "message_timestamp_difference_max_ms": "message.timestamp.difference.max.ms",
    "flush_messages": "flush.messages",
    "flush_ms": "flush.ms",
    "file_delete_delay_ms": "file.delete.delay.ms",
    "preallocate": "preallocate",
    "cleanup_policy": "cleanup.policy",
    "delete_retention_ms": "delete.retention.ms",
    "min_cleanable_dirty_ratio": "min.cleanable.dirty.ratio",
    "min_compaction_lag_ms": "min.compaction.lag.ms",
    "max_compaction_lag_ms": "max.compaction.lag.ms",
    "compression_type": "compression.type",
}

# compression.type -> codec id (attribute bits 0-2); "producer" keeps the producer's codec.
_CODECS: dict[str, int] = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    retention_ms: int = 604800000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    preallocate: bool = False
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    compression_type: str = "producer"

    @classmethod
    def from_topic_config(cls, cfg: Mapping[str, Any]) -> LogConfig:
        """Build from Kafka-named configs (typed values or their string forms); missing keys keep defaults."""
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            name = _NAMES[f.name]
            if name not in cfg or cfg[name] is None:
                continue
            kwargs[f.name] = _coerce(f.name, cfg[name])
        return cls(**kwargs)

    def to_topic_config(self) -> dict[str, Any]:
        return {_NAMES[f.name]: getattr(self, f.name) for f in fields(self)}

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def target_codec(self) -> int | None:
        """The codec every stored batch must have, or None to keep the producer's."""
        return _CODECS.get(self.compression_type)

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """Age that rolls the active segment: a compacted topic also rolls at
        max.compaction.lag.ms, so the cleaner can reach its records (KIP-354)."""
        if self.compact_enabled and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    def random_segment_jitter(self) -> int:
        """Kafka's per-segment roll jitter: uniform in [0, min(segment.jitter.ms, segment.ms))."""
        if self.segment_jitter_ms <= 0:
            return 0
        return random.randrange(min(self.segment_jitter_ms, self.max_segment_ms))


def _coerce(field_name: str, value: Any) -> Any:
    if field_name == "cleanup_policy":
        if isinstance(value, str):
            items = [s.strip() for s in value.split(",")]
        else:
            items = [str(s).strip() for s in value]
        return tuple(s for s in items if s)
    if field_name == "preallocate":
        if isinstance(value, str):
            return value.strip().lower() == "true"
        return bool(value)
    if field_name in ("message_timestamp_type", "compression_type"):
        return str(value)
    if field_name == "min_cleanable_dirty_ratio":
        return float(value)
    return int(value)
