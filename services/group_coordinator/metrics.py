"""Group coordinator metrics, named as the Prometheus JMX exporter names Kafka's
GroupMetadataManager MBeans (``kafka.coordinator.group``), plus the shard placement."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

_LOAD_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_REQUEST_BUCKETS_MS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
# Kafka's group states and the gauge suffix of each (NumGroups<State>).
_STATES = {
    "PreparingRebalance": "preparingrebalance",
    "CompletingRebalance": "completingrebalance",
    "Stable": "stable",
    "Dead": "dead",
    "Empty": "empty",
}


class CoordinatorMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.shards = Gauge(
            "kafkapy_group_coordinator_shards",
            "__consumer_offsets partitions this coordinator owns",
            registry=registry,
        )
        self.load_seconds = Histogram(
            "kafkapy_group_coordinator_shard_load_seconds",
            "time to load a shard (replay of its __consumer_offsets partition)",
            buckets=_LOAD_BUCKETS_S,
            registry=registry,
        )
        self.request_ms = Histogram(
            "kafka_network_requestmetrics_totaltimems",
            "time to handle a forwarded group request (ms)",
            ["request"],
            buckets=_REQUEST_BUCKETS_MS,
            registry=registry,
        )

    def watch_groups(self, group_states: Callable[[], Iterable[str]]) -> None:
        """Export NumGroups and NumGroups<State> from ``group_states()`` at scrape time."""
        self.registry.register(_GroupsCollector(group_states))


class _GroupsCollector(Collector):
    def __init__(self, group_states: Callable[[], Iterable[str]]) -> None:
        self._group_states = group_states

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = Counter(self._group_states())
        prefix = "kafka_coordinator_group_groupmetadatamanager_numgroups"
        yield GaugeMetricFamily(prefix, "groups of the loaded shards", value=sum(counts.values()))
        for state, suffix in _STATES.items():
            yield GaugeMetricFamily(
                prefix + suffix, f"groups in state {state}", value=counts.get(state, 0)
            )
