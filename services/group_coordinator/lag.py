"""Consumer lag of the groups this coordinator owns, exported with kafka-exporter's names.

A scrape never reaches storage: ``LagTracker.refresh`` (a periodic task, every
``consumer.lag.refresh.interval.ms``) asks each storage leader once, in one batched
Storage.ListOffsets, for the high watermark of every partition some loaded group committed; the
collector then joins those with the committed offsets in memory. Series:
``kafka_consumergroup_current_offset`` and ``kafka_consumergroup_lag`` per group/topic/partition,
``kafka_consumergroup_lag_sum`` per group/topic (kafka-exporter's), and
``kafkapy_consumergroup_max_lag`` / ``kafkapy_consumergroup_total_lag`` per group. Lag is the
high watermark minus the commit, never negative; a partition without a known high watermark
(leaderless, or not refreshed yet) has no lag series.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from services.common.logging import get_logger
from services.common.metadata_cache import MetadataCache
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb

log = get_logger("group_coordinator.lag")

Tp = tuple[str, int]
# (group id, {(topic, partition): committed offset}) for every loaded group
CommittedView = Callable[[], Iterable[tuple[str, Mapping[Tp, int]]]]
LATEST = -1


class LagTracker:
    def __init__(
        self, cache: MetadataCache, storage: Any, committed: CommittedView, timeout_s: float
    ) -> None:
        self._cache = cache
        self._storage = storage
        self._committed = committed
        self._timeout_s = timeout_s
        self.high_watermarks: dict[Tp, int] = {}

    async def refresh(self) -> None:
        """One batched ListOffsets per storage leader for every committed partition."""
        wanted = {tp for _, offsets in self._committed() for tp in offsets}
        by_leader: dict[int, list[Tp]] = defaultdict(list)
        for t, p in wanted:
            info = self._cache.partition(t, p)
            if info is not None and info.leader >= 0:
                by_leader[info.leader].append((t, p))
        fresh: dict[Tp, int] = {}
        results = await asyncio.gather(
            *(self._ask(node, parts) for node, parts in by_leader.items()), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                if isinstance(r, asyncio.CancelledError):
                    raise r
                log.debug("lag refresh failed on a leader", error=str(r))
                continue
            fresh.update(r)
        self.high_watermarks = fresh

    async def _ask(self, node: int, parts: list[Tp]) -> dict[Tp, int]:
        stub = self._storage.stub(node)
        if stub is None:
            return {}
        request = pb.ListOffsetsRequest(
            isolation_level=0,
            partitions=[
                pb.PartitionOffsetQuery(
                    topic=t, partition=p, timestamp=LATEST, current_leader_epoch=-1
                )
                for t, p in parts
            ],
        )
        resp = await stub.ListOffsets(request, timeout=self._timeout_s)
        return {(r.topic, r.partition): r.offset for r in resp.partitions if r.error_code == 0}

    async def run(self, interval_s: float) -> None:
        """Refresh forever (a task of the coordinator process)."""
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the next round retries
                log.warning("consumer lag refresh failed", error=str(exc))
            await asyncio.sleep(interval_s)

    def collector(self) -> Collector:
        return _LagCollector(self)


class _LagCollector(Collector):
    def __init__(self, tracker: LagTracker) -> None:
        self._tracker = tracker

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "committed offset of a group", labels=labels
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag", "high watermark minus the committed offset", labels=labels
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "lag of a group summed over a topic's partitions",
            labels=["consumergroup", "topic"],
        )
        lag_max = GaugeMetricFamily(
            "kafkapy_consumergroup_max_lag",
            "largest partition lag of a group",
            labels=["consumergroup"],
        )
        lag_total = GaugeMetricFamily(
            "kafkapy_consumergroup_total_lag",
            "lag of a group summed over all its partitions",
            labels=["consumergroup"],
        )
        hw = self._tracker.high_watermarks
        for group, offsets in self._tracker._committed():
            per_topic: dict[str, int] = defaultdict(int)
            lags: list[int] = []
            for (t, p), committed in sorted(offsets.items()):
                current.add_metric([group, t, str(p)], committed)
                end = hw.get((t, p))
                if end is None:
                    continue
                value = max(0, end - committed)
                lag.add_metric([group, t, str(p)], value)
                per_topic[t] += value
                lags.append(value)
            for t, value in per_topic.items():
                lag_sum.add_metric([group, t], value)
            if lags:
                lag_max.add_metric([group], max(lags))
                lag_total.add_metric([group], sum(lags))
        yield from (current, lag, lag_sum, lag_max, lag_total)
