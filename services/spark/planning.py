"""Pure planning of reads: rate limits across partitions and splitting ranges into tasks.

Both follow Spark's Kafka source (KafkaMicroBatchStream.rateLimit and
KafkaOffsetRangeCalculator): a limit is shared among partitions in proportion to what each has
to read, and ranges are split only when `minPartitions` or `maxRecordsPerPartition` ask for it
(one task per partition otherwise: a task costs ~25 ms, so splits stay coarse).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from services.spark.reader import OffsetRange

TP = tuple[str, int]


def rate_limit(limit: int, start: Mapping[TP, int], latest: Mapping[TP, int]) -> dict[TP, int]:
    """End offsets reading at most about `limit` records in total, shared proportionally."""
    sizes = {tp: max(0, end - start.get(tp, end)) for tp, end in latest.items()}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out: dict[TP, int] = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        share = limit * (sizes[tp] / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + step)
    return out


def split_ranges(
    ranges: list[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records: int | None = None,
) -> list[OffsetRange]:
    """Ranges split into at least `min_partitions` tasks and at most `max_records` each."""
    ranges = [r for r in ranges if r.until > r.start]
    total = sum(r.until - r.start for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        size = r.until - r.start
        parts = 1
        if min_partitions and min_partitions > len(ranges) and total:
            parts = max(parts, math.ceil(size * min_partitions / total))
        if max_records:
            parts = max(parts, math.ceil(size / max_records))
        parts = min(parts, size)
        for i in range(parts):
            lo = r.start + size * i // parts
            hi = r.start + size * (i + 1) // parts
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out
