"""The node's ``log.dirs``: where each replica lives, where a new one goes, which dirs failed.

Placement follows Kafka's ``LogManager.nextLogDirs``: the online directory holding the fewest
partitions, ties in configuration order. A failed directory (KIP-112) is offline until the
node restarts: its replicas are offline too, and the node refuses to create them anywhere else
(the controller re-leads them on other nodes; see ``ReplicaManager.handle_log_dir_failure``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from services.common.errors import ErrorCode, KafkaError

TopicPartition = tuple[str, int]


class LogDirs:
    def __init__(self, dirs: Sequence[Path]) -> None:
        if not dirs:
            raise ValueError("at least one log dir is required")
        self.all: list[Path] = [Path(d) for d in dirs]
        self.offline: dict[Path, str] = {}  # dir -> why it failed
        self.dir_of: dict[TopicPartition, Path] = {}
        self.offline_partitions: set[TopicPartition] = set()

    @property
    def online(self) -> list[Path]:
        return [d for d in self.all if d not in self.offline]

    def is_offline(self, tp: TopicPartition) -> bool:
        return tp in self.offline_partitions

    def next_dir(self) -> Path:
        """Where a new replica goes: the online dir with the fewest partitions."""
        online = self.online
        if not online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "every log dir of this node is offline")
        if len(online) == 1:
            return online[0]  # the usual case, without counting every partition per new one
        counts = Counter(self.dir_of.values())
        return min(online, key=lambda d: (counts[d], online.index(d)))

    def assign(self, tp: TopicPartition, d: Path) -> None:
        self.dir_of[tp] = d

    def forget(self, tp: TopicPartition) -> None:
        self.dir_of.pop(tp, None)

    def partitions_in(self, d: Path) -> list[TopicPartition]:
        return sorted(tp for tp, where in self.dir_of.items() if where == d)

    def mark_offline(self, d: Path, reason: str) -> list[TopicPartition] | None:
        """Take ``d`` offline; returns its partitions (now offline), None if it already was."""
        if d in self.offline:
            return None
        self.offline[d] = reason
        gone = self.partitions_in(d)
        for tp in gone:
            del self.dir_of[tp]
        self.offline_partitions.update(gone)
        return gone
