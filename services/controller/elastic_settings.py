"""Settings of the rebalancer, the autoscaler and the node provisioners (kafka-py's own
``kafkapy.*`` properties, mixed into the controller's settings)."""

from __future__ import annotations

from pydantic import BaseModel, field_validator

from services.common.settings import kafka_prop

PROVISIONERS = ("none", "local", "kubernetes")


class ElasticSettings(BaseModel):
    kafkapy_rebalance_enable: bool = kafka_prop(
        True,
        "kafkapy.rebalance.enable",
        "move replicas onto storage nodes that join (the controller plans and submits the moves)",
    )
    kafkapy_rebalance_max_concurrent_moves: int = kafka_prop(
        4,
        "kafkapy.rebalance.max.concurrent.moves",
        "partition reassignments the rebalancer keeps running at once",
        ge=1,
    )
    kafkapy_rebalance_disk_tolerance_percent: int = kafka_prop(
        10,
        "kafkapy.rebalance.disk.tolerance.percent",
        "bytes per node may differ by this share of the mean before replicas are swapped",
        ge=0,
        le=100,
    )
    kafkapy_rebalance_max_fill_percent: int = kafka_prop(
        95,
        "kafkapy.rebalance.max.fill.percent",
        "a plan that fills a node's capacity beyond this is refused",
        ge=1,
        le=100,
    )
    kafkapy_rebalance_throttle_bytes_per_sec: int = kafka_prop(
        0,
        "kafkapy.rebalance.throttle.bytes.per.sec",
        "replication throttle of the rebalancer's moves (0 = not throttled)",
        ge=0,
    )
    kafkapy_rebalance_check_interval_ms: int = kafka_prop(
        5000,
        "kafkapy.rebalance.check.interval.ms",
        "how often the rebalancer and the autoscaler look at the cluster",
        ge=10,
    )
    kafkapy_autoscaler_enable: bool = kafka_prop(
        False, "kafkapy.autoscaler.enable", "add and remove storage nodes on measured load"
    )
    kafkapy_autoscaler_dry_run: bool = kafka_prop(
        False,
        "kafkapy.autoscaler.dry.run",
        "decide and export the plan, but neither move replicas nor add or remove nodes",
    )
    kafkapy_autoscaler_disk_target_percent: float = kafka_prop(
        70.0,
        "kafkapy.autoscaler.disk.target.percent",
        "disk use (share of capacity, over the storage nodes) above which nodes are added",
        gt=0,
        le=100,
    )
    kafkapy_autoscaler_hysteresis_percent: float = kafka_prop(
        20.0,
        "kafkapy.autoscaler.hysteresis.percent",
        "a node is removed only while the others would stay this many points below the target",
        ge=0,
        le=100,
    )
    kafkapy_autoscaler_bytes_in_per_node_max: int = kafka_prop(
        0,
        "kafkapy.autoscaler.bytes.in.per.node.max",
        "client bytes/s one node should take at most (0 = not a signal)",
        ge=0,
    )
    kafkapy_autoscaler_partitions_per_node_max: int = kafka_prop(
        0,
        "kafkapy.autoscaler.partitions.per.node.max",
        "replicas one node should host at most (0 = not a signal)",
        ge=0,
    )
    kafkapy_autoscaler_min_nodes: int = kafka_prop(
        3, "kafkapy.autoscaler.min.nodes", "never fewer storage nodes", ge=1
    )
    kafkapy_autoscaler_max_nodes: int = kafka_prop(
        12, "kafkapy.autoscaler.max.nodes", "never more storage nodes", ge=1
    )
    kafkapy_autoscaler_cooldown_ms: int = kafka_prop(
        300000,
        "kafkapy.autoscaler.cooldown.ms",
        "after nodes were added or removed, no other scaling decision for this long",
        ge=0,
    )
    kafkapy_autoscaler_provisioner: str = kafka_prop(
        "none",
        "kafkapy.autoscaler.provisioner",
        "what adds and removes storage nodes: none | local (kafka-py cluster up) | kubernetes",
    )
    kafkapy_kubernetes_namespace: str = kafka_prop(
        "", "kafkapy.kubernetes.namespace", "namespace of the storage StatefulSet (default: own)"
    )
    kafkapy_kubernetes_statefulset: str = kafka_prop(
        "kafka-py-storage", "kafkapy.kubernetes.statefulset", "name of the storage StatefulSet"
    )
    kafkapy_kubernetes_api_url: str = kafka_prop(
        "", "kafkapy.kubernetes.api.url", "API server URL (default: the in-cluster address)"
    )
    kafkapy_kubernetes_pod_selector: str = kafka_prop(
        "", "kafkapy.kubernetes.pod.selector", "label selector of the storage pods"
    )
    kafkapy_kubernetes_zone_label: str = kafka_prop(
        "topology.kubernetes.io/zone",
        "kafkapy.kubernetes.zone.label",
        "node label holding the zone",
    )

    @field_validator("kafkapy_autoscaler_provisioner")
    @classmethod
    def _known_provisioner(cls, value: str) -> str:
        if value not in PROVISIONERS:
            raise ValueError(f"must be one of {', '.join(PROVISIONERS)}")
        return value
