"""Last known offsets per partition (high watermark, last stable offset, log start offset).

Fed by every Produce, Fetch and ListOffsets result; read when a partition must be answered
without asking storage (a Fetch node call cancelled because other nodes already returned
enough data).
"""

from __future__ import annotations

UNKNOWN = -1


class OffsetsCache:
    def __init__(self) -> None:
        # (topic, partition) -> [high_watermark, last_stable_offset, log_start_offset]
        self._entries: dict[tuple[str, int], list[int]] = {}

    def get(self, topic: str, partition: int) -> tuple[int, int, int]:
        e = self._entries.get((topic, partition))
        return (e[0], e[1], e[2]) if e is not None else (UNKNOWN, UNKNOWN, UNKNOWN)

    def update(
        self,
        topic: str,
        partition: int,
        *,
        high_watermark: int = UNKNOWN,
        last_stable_offset: int = UNKNOWN,
        log_start_offset: int = UNKNOWN,
    ) -> None:
        e = self._entries.get((topic, partition))
        if e is None:
            e = self._entries[(topic, partition)] = [UNKNOWN, UNKNOWN, UNKNOWN]
        if high_watermark >= 0:
            e[0] = high_watermark
        if last_stable_offset >= 0:
            e[1] = last_stable_offset
        if log_start_offset >= 0:
            e[2] = log_start_offset

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._entries if k[0] == topic]:
            del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)
