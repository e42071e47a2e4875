"""Prometheus metrics of the rebalancer and the autoscaler (``kafkapy_autoscaler_*``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class ElasticMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.enabled = Gauge(
            "kafkapy_autoscaler_enabled",
            "1 when the autoscaler acts (0: off or dry run)",
            registry=registry,
        )
        self.nodes = Gauge("kafkapy_autoscaler_nodes", "live storage nodes", registry=registry)
        self.desired_nodes = Gauge(
            "kafkapy_autoscaler_desired_nodes",
            "storage nodes the autoscaler last asked for (or would, in dry run)",
            registry=registry,
        )
        self.draining_nodes = Gauge(
            "kafkapy_autoscaler_draining_nodes", "storage nodes being drained", registry=registry
        )
        self.moves_in_flight = Gauge(
            "kafkapy_autoscaler_moves_in_flight",
            "partition reassignments running (any origin)",
            registry=registry,
        )
        self.moves_pending = Gauge(
            "kafkapy_autoscaler_moves_pending",
            "moves of the current plan not submitted yet",
            registry=registry,
        )
        self.bytes_moved = Counter(
            "kafkapy_autoscaler_bytes_moved",
            "bytes of replicas copied by completed rebalancer moves",
            registry=registry,
        )
        self.disk_used_percent = Gauge(
            "kafkapy_autoscaler_disk_used_percent",
            "bytes on the storage nodes as a share of their capacity",
            registry=registry,
        )
        self.decisions = Counter(
            "kafkapy_autoscaler_decisions",
            "autoscaler evaluations by decision and reason",
            ["decision", "reason"],
            registry=registry,
        )
