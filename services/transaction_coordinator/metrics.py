"""Transaction coordinator metrics: shard placement, loads, request times, transactions by state."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from services.common.internal_topics.transaction_state import TxnState

_LOAD_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_REQUEST_BUCKETS_MS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)


class TransactionMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.shards = Gauge(
            "kafkapy_transaction_coordinator_shards",
            "__transaction_state partitions this coordinator owns",
            registry=registry,
        )
        self.load_seconds = Histogram(
            "kafkapy_transaction_coordinator_shard_load_seconds",
            "time to load a shard (replay of its __transaction_state partition)",
            buckets=_LOAD_BUCKETS_S,
            registry=registry,
        )
        self.request_ms = Histogram(
            "kafka_network_requestmetrics_totaltimems",
            "time to handle a forwarded transaction request (ms)",
            ["request"],
            buckets=_REQUEST_BUCKETS_MS,
            registry=registry,
        )
        self.completed = PromCounter(
            "kafkapy_transaction_coordinator_transactions_completed",
            "transactions completed (markers written everywhere), by result",
            ["result"],
            registry=registry,
        )

    def watch_states(self, states: Callable[[], Iterable[TxnState]]) -> None:
        """Export the transactional ids of the loaded shards per state at scrape time."""
        self.registry.register(_StatesCollector(states))


class _StatesCollector(Collector):
    def __init__(self, states: Callable[[], Iterable[TxnState]]) -> None:
        self._states = states

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = Counter(self._states())
        family = GaugeMetricFamily(
            "kafkapy_transaction_coordinator_transactional_ids",
            "transactional ids of the loaded shards, by state",
            labels=["state"],
        )
        for state in TxnState:
            family.add_metric([state.kafka_name], counts.get(state, 0))
        yield family
