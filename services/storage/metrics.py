"""Prometheus metrics of a storage node, named as the JMX exporter names Kafka's MBeans.

``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=t`` becomes
``kafka_server_brokertopicmetrics_messagesin_total{topic="t"}``, and so on, so existing Kafka
dashboards work. Gauges (leader count, log sizes...) are computed at scrape time from the
replica manager's state instead of being updated on every change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS_MS = (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)


@dataclass(slots=True)
class PartitionGauges:
    topic: str
    partition: int
    size: int
    log_start_offset: int
    log_end_offset: int
    num_segments: int | None = None


@dataclass(slots=True)
class ReplicaGauges:
    leader_count: int = 0
    partition_count: int = 0
    under_replicated: int = 0
    under_min_isr: int = 0
    replica_max_lag: int = 0
    partitions: list[PartitionGauges] = field(default_factory=list)
    log_dirs: dict[str, bool] = field(default_factory=dict)  # log dir -> offline


class _StateCollector(Collector):
    def __init__(self, snapshot: Callable[[], ReplicaGauges]) -> None:
        self._snapshot = snapshot

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_leadercount", "Partitions this node leads", s.leader_count
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_partitioncount",
            "Partitions on this node",
            s.partition_count,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Led partitions whose ISR is smaller than the replica set",
            s.under_replicated,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Led partitions whose ISR is smaller than min.insync.replicas",
            s.under_min_isr,
        )
        yield GaugeMetricFamily(
            "kafka_log_logmanager_offlinelogdirectorycount",
            "Log dirs of this node that failed (KIP-112)",
            sum(s.log_dirs.values()),
        )
        offline = GaugeMetricFamily(
            "kafka_log_logmanager_logdirectoryoffline",
            "1 if the log dir failed",
            labels=["logDirectory"],
        )
        for d, is_offline in sorted(s.log_dirs.items()):
            offline.add_metric([d], int(is_offline))
        yield offline
        lag = GaugeMetricFamily(
            "kafka_server_replicafetchermanager_maxlag",
            "Largest lag in messages of a followed partition behind its leader's high watermark",
            labels=["clientId"],
        )
        lag.add_metric(["Replica"], s.replica_max_lag)
        yield lag
        size = GaugeMetricFamily(
            "kafka_log_log_size", "Log size in bytes", labels=["topic", "partition"]
        )
        leo = GaugeMetricFamily(
            "kafka_log_log_logendoffset", "Log end offset", labels=["topic", "partition"]
        )
        lso = GaugeMetricFamily(
            "kafka_log_log_logstartoffset", "Log start offset", labels=["topic", "partition"]
        )
        segs = GaugeMetricFamily(
            "kafka_log_log_numlogsegments", "Segments in the log", labels=["topic", "partition"]
        )
        for p in s.partitions:
            labels = [p.topic, str(p.partition)]
            size.add_metric(labels, p.size)
            leo.add_metric(labels, p.log_end_offset)
            lso.add_metric(labels, p.log_start_offset)
            if p.num_segments is not None:
                segs.add_metric(labels, p.num_segments)
        yield size
        yield leo
        yield lso
        yield segs


class TopicMeters:
    """One topic's labelled counters, looked up once (``Counter.labels`` validates and hashes its
    arguments on every call, a measurable part of an append)."""

    __slots__ = ("produce_requests", "bytes_in", "messages_in", "fetch_requests", "bytes_out")

    def __init__(self, m: StorageMetrics, topic: str) -> None:
        self.produce_requests = m.total_produce_requests.labels(topic)
        self.bytes_in = m.bytes_in.labels(topic)
        self.messages_in = m.messages_in.labels(topic)
        self.fetch_requests = m.total_fetch_requests.labels(topic)
        self.bytes_out = m.bytes_out.labels(topic)


class StorageMetrics:
    """Counters and histograms; ``bind_state`` adds the scrape-time gauges."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.messages_in = Counter(
            "kafka_server_brokertopicmetrics_messagesin", "Messages appended", ["topic"], registry=r
        )
        self.bytes_in = Counter(
            "kafka_server_brokertopicmetrics_bytesin",
            "Bytes appended by clients",
            ["topic"],
            registry=r,
        )
        self.bytes_out = Counter(
            "kafka_server_brokertopicmetrics_bytesout",
            "Bytes fetched by consumers",
            ["topic"],
            registry=r,
        )
        self.replication_bytes_out = Counter(
            "kafka_server_brokertopicmetrics_replicationbytesout",
            "Bytes fetched by followers",
            ["topic"],
            registry=r,
        )
        self.replication_bytes_in = Counter(
            "kafka_server_brokertopicmetrics_replicationbytesin",
            "Bytes appended from leaders by this node's replica fetchers",
            ["topic"],
            registry=r,
        )
        self.isr_shrinks = Counter(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks written by this node as leader",
            registry=r,
        )
        self.isr_expands = Counter(
            "kafka_server_replicamanager_isrexpands",
            "ISR expansions written by this node as leader",
            registry=r,
        )
        self.failed_isr_updates = Counter(
            "kafka_server_replicamanager_failedisrupdates",
            "ISR changes that could not be written (state changed underneath, ZooKeeper errors)",
            registry=r,
        )
        self.total_produce_requests = Counter(
            "kafka_server_brokertopicmetrics_totalproducerequests",
            "Partition appends requested",
            ["topic"],
            registry=r,
        )
        self.total_fetch_requests = Counter(
            "kafka_server_brokertopicmetrics_totalfetchrequests",
            "Partition fetches requested",
            ["topic"],
            registry=r,
        )
        self.failed_produce_requests = Counter(
            "kafka_server_brokertopicmetrics_failedproducerequests",
            "Partition appends that failed unexpectedly",
            ["topic"],
            registry=r,
        )
        self.failed_fetch_requests = Counter(
            "kafka_server_brokertopicmetrics_failedfetchrequests",
            "Partition fetches that failed unexpectedly",
            ["topic"],
            registry=r,
        )
        self.request_time_ms = Histogram(
            "kafka_network_requestmetrics_totaltimems",
            "Request handling time in ms",
            ["request"],
            buckets=LATENCY_BUCKETS_MS,
            registry=r,
        )
        self.cleaner_runs = Counter(
            "kafkapy_log_cleaner_runs", "Log compactions done by this node's cleaner", registry=r
        )
        self.cleaner_recopy_percent = Gauge(
            "kafka_log_logcleaner_cleaner_recopy_percent",
            "Bytes written as a percentage of bytes read, last cleaning",
            registry=r,
        )
        self.cleaner_max_clean_time_secs = Gauge(
            "kafka_log_logcleaner_max_clean_time_secs", "Duration of the last cleaning", registry=r
        )
        self.cleaner_buffer_utilization_percent = Gauge(
            "kafka_log_logcleaner_max_buffer_utilization_percent",
            "Offset map entries used by the last cleaning, as a percentage of its capacity",
            registry=r,
        )
        self.cleaner_max_dirty_percent = Gauge(
            "kafka_log_logcleanermanager_max_dirty_percent",
            "Largest dirty ratio among compacted logs, as a percentage",
            registry=r,
        )
        self.cleaner_uncleanable_partitions = Gauge(
            "kafka_log_logcleanermanager_uncleanable_partitions_count",
            "Partitions whose cleaning failed; not cleaned again until the node restarts",
            registry=r,
        )
        # replication throttles (services/storage/replication/quota.py)
        self.replication_throttled_bytes = Counter(
            "kafkapy_replication_throttled_bytes",
            "Bytes of throttled replicas sent as leader or fetched as follower (counted against "
            "*.replication.throttled.rate)",
            ["role", "topic"],
            registry=r,
        )
        self.replication_throttled_holds = Counter(
            "kafkapy_replication_throttled_holds",
            "Times a throttled out-of-ISR replica was left out of a fetch (quota exceeded)",
            ["role"],
            registry=r,
        )
        # Storage.Exchange (services/storage/exchange.py): calls per stream message is how much
        # the calls of many clients share messages
        self.exchange_messages = Counter(
            "kafkapy_storage_exchange_messages",
            "Exchange stream messages received (in) and sent (out)",
            ["direction"],
            registry=r,
        )
        self.exchange_calls = Counter(
            "kafkapy_storage_exchange_calls",
            "Exchange calls received (in) and answers sent (out)",
            ["direction"],
            registry=r,
        )
        self._state_collector: _StateCollector | None = None
        self._topics: dict[str, TopicMeters] = {}
        self._timers: dict[str, Any] = {}

    def topic(self, topic: str) -> TopicMeters:
        meters = self._topics.get(topic)
        if meters is None:
            meters = self._topics[topic] = TopicMeters(self, topic)
        return meters

    def bind_state(self, snapshot: Callable[[], ReplicaGauges]) -> None:
        if self._state_collector is not None:
            self.registry.unregister(self._state_collector)
        self._state_collector = _StateCollector(snapshot)
        self.registry.register(self._state_collector)

    def request_timer(self, request: str) -> Any:
        """The request time histogram's child of ``request`` (observes milliseconds)."""
        timer = self._timers.get(request)
        if timer is None:
            timer = self._timers[request] = self.request_time_ms.labels(request)
        return timer

    @contextmanager
    def timed(self, request: str) -> Iterator[None]:
        """Observe the request's total time (Kafka's request names: Produce, FetchConsumer...)."""
        timer = self.request_timer(request)
        start = time.perf_counter()
        try:
            yield
        finally:
            timer.observe((time.perf_counter() - start) * 1000.0)
