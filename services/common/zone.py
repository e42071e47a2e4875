"""Zone discovery on Kubernetes: the node's ``topology.kubernetes.io/zone`` label becomes the rack.

A pod learns its node's name from the downward API (``NODE_NAME`` from ``spec.nodeName``) and
reads that Node through the official ``kubernetes`` client (RBAC: ``get`` on ``nodes``). The
settings mixin ``RackDiscoverySettings`` turns it on for a service; ``with_discovered_rack``
returns the settings with ``broker.rack`` filled in. An explicit ``broker.rack`` always wins.
``read_node_zone`` is the reusable part (the Kubernetes node provisioner reads zones the same way).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, TypeVar

from pydantic import BaseModel, field_validator

from services.common.logging import get_logger
from services.common.settings import kafka_prop

log = get_logger(__name__)

ZONE_LABEL = "topology.kubernetes.io/zone"
NODE_NAME_ENV = "NODE_NAME"
DISCOVERY_MODES = ("none", "kubernetes")


class ZoneLookupError(RuntimeError):
    """The node's zone could not be read; the message says why in one line, ``status`` is the
    API server's HTTP status when it answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def kubernetes_api_client(api_url: str | None = None, *, client_retries: bool = True) -> Any:
    """A ``kubernetes.client.ApiClient``: ``api_url`` without credentials when given (an API
    proxy or an emulated server), else the pod's service account (in-cluster), else
    ``KUBECONFIG``. ``client_retries=False`` turns off urllib3's silent retries, for callers that
    retry (and log) themselves. Blocking (reads files): call it from a thread."""
    from kubernetes import client, config

    if api_url:
        cfg = client.Configuration()
        cfg.host = api_url.rstrip("/")
    else:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            try:
                config.load_kube_config()
            except (config.ConfigException, OSError) as exc:
                raise ZoneLookupError(
                    f"no Kubernetes API: not in a pod and no usable kubeconfig ({exc})"
                ) from None
        cfg = client.Configuration.get_default_copy()
    if not client_retries:
        cfg.retries = False
    return client.ApiClient(cfg)


def read_node_labels(node_name: str, api_client: Any, timeout_s: float = 5.0) -> dict[str, str]:
    """The labels of Node ``node_name`` (blocking: call it from a thread)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        node = client.CoreV1Api(api_client).read_node(node_name, _request_timeout=timeout_s)
    except ApiException as exc:
        raise ZoneLookupError(
            f"reading node {node_name!r} failed: HTTP {exc.status} {exc.reason}", exc.status
        ) from None
    except Exception as exc:  # connection refused, timeout, TLS...
        raise ZoneLookupError(f"reading node {node_name!r} failed: {exc!r}") from None
    meta = node.metadata
    return dict((meta.labels if meta is not None else None) or {})


def read_node_zone(
    node_name: str, label: str = ZONE_LABEL, api_client: Any = None, timeout_s: float = 5.0
) -> str:
    """The value of ``label`` on Node ``node_name`` (blocking); ZoneLookupError when the node
    cannot be read or has no such label."""
    if not node_name:
        raise ZoneLookupError(f"no node name: set {NODE_NAME_ENV} from the downward API")
    labels = read_node_labels(
        node_name, api_client if api_client is not None else kubernetes_api_client(), timeout_s
    )
    zone = labels.get(label)
    if not zone:
        raise ZoneLookupError(f"node {node_name!r} has no label {label!r}")
    return zone


class RackDiscoverySettings(BaseModel):
    """Settings mixin: where a service's ``broker.rack`` comes from when it is not set."""

    broker_rack: str | None
    rack_discovery: str = kafka_prop(
        "none",
        "kafkapy.rack.discovery",
        "none | kubernetes: read broker.rack from the node's zone label when broker.rack is unset",
    )
    rack_node_label: str = kafka_prop(
        ZONE_LABEL, "kafkapy.rack.node.label", "node label holding the zone"
    )
    rack_fallback: str | None = kafka_prop(
        None,
        "kafkapy.rack.fallback",
        "rack used when the zone cannot be read (default: no rack)",
    )
    kubernetes_api_url: str | None = kafka_prop(
        None,
        "kafkapy.kubernetes.api.url",
        "Kubernetes API URL without credentials (default: in-cluster service account)",
    )

    @field_validator("rack_discovery")
    @classmethod
    def _mode(cls, v: str) -> str:
        if v not in DISCOVERY_MODES:
            raise ValueError(f"must be one of {', '.join(DISCOVERY_MODES)}")
        return v


S = TypeVar("S", bound=RackDiscoverySettings)


async def with_discovered_rack(settings: S, env: dict[str, str] | None = None) -> S:
    """``settings`` with ``broker.rack`` read from the node's zone when discovery is on and
    ``broker.rack`` is unset; on failure one warning line and ``kafkapy.rack.fallback``."""
    if settings.rack_discovery == "none" or settings.broker_rack:
        return settings
    node = (os.environ if env is None else env).get(NODE_NAME_ENV, "")
    try:
        api = await asyncio.to_thread(kubernetes_api_client, settings.kubernetes_api_url)
        zone = await asyncio.to_thread(read_node_zone, node, settings.rack_node_label, api)
    except ZoneLookupError as exc:
        log.warning(
            "rack_discovery_failed",
            reason=str(exc),
            node=node or None,
            label=settings.rack_node_label,
            fallback_rack=settings.rack_fallback,
        )
        return settings.model_copy(update={"broker_rack": settings.rack_fallback})
    log.info("rack_discovered", node=node, label=settings.rack_node_label, rack=zone)
    return settings.model_copy(update={"broker_rack": zone})
