"""The storage node's log engine: Kafka's on-disk partition format, byte for byte."""

from services.storage.log.config import LogConfig
from services.storage.log.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)
from services.storage.log.log import (
    AppendInfo,
    Log,
    ReadInfo,
    UnexpectedAppendOffsetError,
    wall_clock_ms,
)
from services.storage.log.segment import LogSegment
from services.storage.producer_state import AppendOrigin, ProducerStateManager

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "AppendInfo",
    "AppendOrigin",
    "EpochEntry",
    "LeaderEpochCache",
    "Log",
    "LogConfig",
    "LogSegment",
    "ProducerStateManager",
    "ReadInfo",
    "UnexpectedAppendOffsetError",
    "wall_clock_ms",
]
