"""Controller metrics, named as the Prometheus JMX exporter names Kafka's controller MBeans."""

from __future__ import annotations

from collections import Counter

from prometheus_client import REGISTRY, CollectorRegistry, Gauge, Histogram

from services.common.zk.layout import ShardMap
from services.controller.elastic_metrics import ElasticMetrics
from services.controller.model import ControllerContext

_ELECTION_BUCKETS_MS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.active = Gauge(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the active controller, 0 elsewhere",
            registry=registry,
        )
        self.offline_partitions = Gauge(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "partitions without a live leader",
            registry=registry,
        )
        self.topics = Gauge(
            "kafka_controller_kafkacontroller_globaltopiccount",
            "topics in the cluster",
            registry=registry,
        )
        self.partitions = Gauge(
            "kafka_controller_kafkacontroller_globalpartitioncount",
            "partitions in the cluster",
            registry=registry,
        )
        self.preferred_imbalance = Gauge(
            "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
            "partitions not led by their preferred replica",
            registry=registry,
        )
        self.leader_election_ms = Histogram(
            "kafka_controller_controllerstats_leaderelectionrateandtimems",
            "time of leader elections (ms)",
            buckets=_ELECTION_BUCKETS_MS,
            registry=registry,
        )
        self.controlled_shutdown_ms = Histogram(
            "kafka_controller_controllerstats_controlledshutdownrateandtimems",
            "time of controlled shutdown requests, until the other replicas acknowledged (ms)",
            buckets=_ELECTION_BUCKETS_MS,
            registry=registry,
        )
        self.reassigning_partitions = Gauge(
            "kafkapy_controller_reassigning_partitions",
            "partitions with replicas being added or removed (active controller)",
            registry=registry,
        )
        self.coordinator_shards = Gauge(
            "kafkapy_controller_coordinator_shards",
            "__consumer_offsets partitions placed on each group coordinator (active controller)",
            ["coordinator"],
            registry=registry,
        )
        self.elastic = ElasticMetrics(registry)

    def update(self, ctx: ControllerContext | None) -> None:
        """Refresh the gauges from the active controller's context (None = standby: all 0)."""
        self.active.set(1 if ctx is not None else 0)
        self.offline_partitions.set(ctx.offline_partition_count() if ctx else 0)
        self.topics.set(len(ctx.topics) if ctx else 0)
        self.partitions.set(ctx.partition_count() if ctx else 0)
        self.preferred_imbalance.set(ctx.preferred_imbalance_count() if ctx else 0)
        self.reassigning_partitions.set(ctx.reassigning_count() if ctx else 0)
        if ctx is None:
            self.coordinator_shards.clear()

    def update_shards(self, placed: ShardMap | None) -> None:
        """One series per coordinator owning shards in ``placed`` (None: no map, no series)."""
        self.coordinator_shards.clear()
        if placed is None:
            return
        for owner, count in Counter(s.owner for s in placed.shards.values()).items():
            self.coordinator_shards.labels(coordinator=str(owner)).set(count)
