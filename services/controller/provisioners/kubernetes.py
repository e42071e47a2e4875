"""Storage nodes as a Kubernetes StatefulSet: scale through ``statefulsets/<name>/scale``, zones
from the ``topology.kubernetes.io/zone`` label of the node each pod runs on.

Talks to the API server through the official ``kubernetes`` client, built the way zone discovery
builds it (services/common/zone.py: in-cluster service account, or an explicit URL), and reads
node labels through the same reader. The client is synchronous: every call runs in a thread
(asyncio.to_thread), so the controller's loop never blocks. Exactly four calls, which the chart's
RBAC grants:

- ``AppsV1Api.read_namespaced_stateful_set_scale`` (GET ``.../statefulsets/<name>/scale``)
- ``AppsV1Api.patch_namespaced_stateful_set_scale`` (PATCH, ``application/merge-patch+json``,
  ``{"metadata": {"resourceVersion": rv}, "spec": {"replicas": n}}``: the resource version makes
  a concurrent change a 409 instead of a lost update; the scale is read again and the patch
  retried)
- ``CoreV1Api.list_namespaced_pod`` (by label selector)
- ``CoreV1Api.read_node`` (through ``zone.read_node_labels``)

403, 404, 409, 429, 5xx and timeouts are retried with exponential backoff, each attempt logged
with what to fix (urllib3's own silent retries are off); after the last attempt one readable
ProvisionerError is raised.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from services.common.logging import get_logger
from services.common.zone import (
    ZONE_LABEL,
    ZoneLookupError,
    kubernetes_api_client,
    read_node_labels,
)
from services.controller.provisioners.base import (
    ProvisionedNode,
    ProvisionerError,
    check_scale_down,
    top_ordinals,
)

log = get_logger("controller.provisioner.kubernetes")

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
MERGE_PATCH = "application/merge-patch+json"
T = TypeVar("T")

HINTS = {
    403: "forbidden: the controller's service account needs get/patch on statefulsets/scale, "
    "list on pods and get on nodes",
    404: "not found: check the namespace and StatefulSet name",
    409: "conflict: the StatefulSet's scale changed underneath; reading it again",
    429: "throttled by the API server",
}


@dataclass(frozen=True, slots=True)
class KubernetesConfig:
    namespace: str
    statefulset: str
    api_url: str = ""  # default: the in-cluster service account (services/common/zone.py)
    pod_selector: str = ""  # default: every pod named <statefulset>-<ordinal>
    zone_label: str = ZONE_LABEL
    timeout_s: float = 10.0
    attempts: int = 5
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0


class _Conflict(Exception):
    pass


class KubernetesProvisioner:
    kind = "kubernetes"

    def __init__(self, config: KubernetesConfig) -> None:
        self.config = config
        self.pod_name = re.compile(rf"^{re.escape(config.statefulset)}-(\d+)$")
        self._api: Any = None  # built on first use, in a thread (it reads the token file)

    async def _client(self) -> Any:
        if self._api is None:
            try:
                self._api = await asyncio.to_thread(
                    kubernetes_api_client, self.config.api_url or None, client_retries=False
                )
            except ZoneLookupError as exc:
                raise ProvisionerError(str(exc)) from None
        return self._api

    async def close(self) -> None:
        if self._api is not None:
            api, self._api = self._api, None
            await asyncio.to_thread(api.close)

    # ---- the interface ----------------------------------------------------------------------
    async def current(self) -> int:
        return _replicas(await self._read_scale())

    async def _read_scale(self) -> Any:
        apps = client.AppsV1Api(await self._client())
        c = self.config
        return await self._call(
            "read the StatefulSet scale",
            apps.read_namespaced_stateful_set_scale,
            c.statefulset,
            c.namespace,
        )

    async def scale_to(self, replicas: int, hosting: Collection[int]) -> None:
        what = f"scale StatefulSet {self.config.statefulset} to {replicas}"
        for attempt in range(1, self.config.attempts + 1):
            scale = await self._read_scale()
            current = _replicas(scale)
            check_scale_down(current, replicas, hosting)
            if current == replicas:
                return
            version = scale.metadata.resource_version if scale.metadata is not None else None
            patch: dict[str, Any] = {"spec": {"replicas": replicas}}
            if version:
                patch["metadata"] = {"resourceVersion": version}
            apps = client.AppsV1Api(await self._client())
            try:
                await self._call(
                    what,
                    apps.patch_namespaced_stateful_set_scale,
                    self.config.statefulset,
                    self.config.namespace,
                    patch,
                    _content_type=MERGE_PATCH,
                    conflict_retry=False,
                )
            except _Conflict as exc:  # a 409: the scale moved; read it again
                self._log_retry(what, attempt, 409, str(exc))
                await asyncio.sleep(self._backoff(attempt))
                continue
            log.info(
                "storage statefulset scaled",
                statefulset=self.config.statefulset,
                namespace=self.config.namespace,
                replicas_from=current,
                replicas_to=replicas,
            )
            return
        raise ProvisionerError(f"{what}: still conflicting after {self.config.attempts} attempts")

    async def remove(self, ids: Collection[int], hosting: Collection[int]) -> None:
        await self.scale_to(top_ordinals(await self.current(), ids), hosting)

    async def nodes(self) -> list[ProvisionedNode]:
        api = await self._client()
        c = self.config
        pods = await self._call(
            "list storage pods",
            client.CoreV1Api(api).list_namespaced_pod,
            c.namespace,
            label_selector=c.pod_selector or None,
        )
        out: list[ProvisionedNode] = []
        zones: dict[str, str | None] = {}
        for pod in pods.items or []:
            name = pod.metadata.name if pod.metadata is not None else None
            m = self.pod_name.match(name or "")
            if m is None or name is None:
                continue
            node_name = pod.spec.node_name if pod.spec is not None else None
            if node_name and node_name not in zones:
                labels = await self._call(
                    f"read node {node_name}", read_node_labels, node_name, api, c.timeout_s
                )
                zones[node_name] = labels.get(c.zone_label)
            out.append(
                ProvisionedNode(
                    ordinal=int(m.group(1)),
                    ready=_pod_ready(pod),
                    zone=zones.get(node_name) if node_name else None,
                    name=name,
                )
            )
        return sorted(out, key=lambda n: n.ordinal)

    # ---- HTTP with retries ------------------------------------------------------------------
    def _backoff(self, attempt: int) -> float:
        return min(self.config.max_backoff_s, self.config.backoff_s * 2 ** (attempt - 1))

    def _log_retry(self, what: str, attempt: int, status: int | None, detail: str) -> None:
        log.warning(
            "kubernetes api call failed, retrying",
            action=what,
            attempt=attempt,
            attempts=self.config.attempts,
            status=status,
            hint=HINTS.get(status or 0, "timeout or server error"),
            detail=detail[:300],
        )

    async def _call(
        self,
        what: str,
        fn: Callable[..., T],
        *args: Any,
        conflict_retry: bool = True,
        **kwargs: Any,
    ) -> T:
        """``fn(*args, **kwargs)`` in a thread, retried with backoff on what may pass."""
        if fn is not read_node_labels:
            kwargs["_request_timeout"] = self.config.timeout_s
        last = ""
        status: int | None = None
        for attempt in range(1, self.config.attempts + 1):
            status = None
            try:
                return await asyncio.to_thread(fn, *args, **kwargs)
            except ApiException as exc:
                status = exc.status or None
                last = f"HTTP {status}: {_reason(exc)}" if status else f"{exc.reason}"
                if status == 409 and not conflict_retry:
                    raise _Conflict(last) from None
                if status and status not in (403, 404, 409, 429) and status < 500:
                    raise ProvisionerError(f"{what}: {last}") from None
            except ZoneLookupError as exc:  # read_node_labels: the status when there was one
                status, last = exc.status, str(exc)
                if status and status not in (403, 404, 409, 429) and status < 500:
                    raise ProvisionerError(f"{what}: {last}") from None
            except urllib3.exceptions.TimeoutError as exc:
                last = f"timed out after {self.config.timeout_s:g}s ({type(exc).__name__})"
            except urllib3.exceptions.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            if attempt == self.config.attempts:
                break
            self._log_retry(what, attempt, status, last)
            await asyncio.sleep(self._backoff(attempt))
        hint = f" ({HINTS[status]})" if status in HINTS else ""
        raise ProvisionerError(f"{what}: {last}{hint}, after {self.config.attempts} attempts")


def _replicas(scale: Any) -> int:
    return int(scale.spec.replicas or 0) if scale.spec is not None else 0


def _reason(exc: ApiException) -> str:
    """The Status object's message when the API server sent one."""
    try:
        body = json.loads(exc.body or "")
    except ValueError:
        return (exc.body or "")[:200] or str(exc.reason)
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(exc.reason)


def _pod_ready(pod: Any) -> bool:
    conditions = pod.status.conditions if pod.status is not None else None
    for cond in conditions or []:
        if cond.type == "Ready":
            return str(cond.status) == "True"
    return False
