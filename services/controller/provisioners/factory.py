"""The provisioner ``kafkapy.autoscaler.provisioner`` names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.common.zk.client import AsyncZk
from services.controller.elastic_settings import ElasticSettings
from services.controller.model import LiveBroker
from services.controller.provisioners.base import NodeProvisioner
from services.controller.provisioners.kubernetes import (
    SERVICE_ACCOUNT,
    KubernetesConfig,
    KubernetesProvisioner,
)
from services.controller.provisioners.local import LocalProvisioner
from services.controller.zkstore import EpochGuard


def make_provisioner(
    s: ElasticSettings,
    zk: AsyncZk,
    guard: EpochGuard,
    brokers: Callable[[], dict[int, LiveBroker]],
) -> NodeProvisioner | None:
    kind = s.kafkapy_autoscaler_provisioner
    if kind == "local":
        return LocalProvisioner(zk, guard, brokers)
    if kind == "kubernetes":
        namespace = s.kafkapy_kubernetes_namespace
        ns_file = Path(SERVICE_ACCOUNT) / "namespace"
        if not namespace and ns_file.exists():
            namespace = ns_file.read_text().strip()
        return KubernetesProvisioner(
            KubernetesConfig(
                namespace=namespace or "default",
                statefulset=s.kafkapy_kubernetes_statefulset,
                api_url=s.kafkapy_kubernetes_api_url,
                pod_selector=s.kafkapy_kubernetes_pod_selector,
                zone_label=s.kafkapy_kubernetes_zone_label,
            )
        )
    return None
