"""Storage nodes as a Kubernetes StatefulSet: scale through ``statefulsets/<name>/scale``, zones
from the ``topology.kubernetes.io/zone`` label of the node each pod runs on.

Speaks the API server's REST interface over httpx (asyncio, so the controller's loop never
blocks) rather than through the official ``kubernetes`` client, which is synchronous and not a
dependency of this project (docs/decisions.md). Exactly four calls, which the chart's RBAC grants:

- ``GET   /apis/apps/v1/namespaces/<ns>/statefulsets/<name>/scale``
- ``PATCH /apis/apps/v1/namespaces/<ns>/statefulsets/<name>/scale``
  (``application/merge-patch+json``, ``{"metadata": {"resourceVersion": rv},
  "spec": {"replicas": n}}``: the resource version makes a concurrent change a 409 instead of a
  lost update; the scale is read again and the patch retried)
- ``GET   /api/v1/namespaces/<ns>/pods?labelSelector=<selector>``
- ``GET   /api/v1/nodes/<node>``

403, 404, 409, 429, 5xx and timeouts are retried with exponential backoff, each attempt logged
with what to fix; after the last attempt one readable ProvisionerError is raised.
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from services.common.logging import get_logger
from services.controller.provisioners.base import (
    ProvisionedNode,
    ProvisionerError,
    check_scale_down,
    top_ordinals,
)

log = get_logger("controller.provisioner.kubernetes")

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
ZONE_LABEL = "topology.kubernetes.io/zone"
MERGE_PATCH = "application/merge-patch+json"

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
    api_url: str = ""  # default: the in-cluster service address
    pod_selector: str = ""  # default: every pod named <statefulset>-<ordinal>
    zone_label: str = ZONE_LABEL
    token: str | None = None  # default: the pod's service account token
    ca_file: str | None = None
    timeout_s: float = 10.0
    attempts: int = 5
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0

    def resolved_url(self) -> str:
        if self.api_url:
            return self.api_url.rstrip("/")
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise ProvisionerError(
                "kafkapy.kubernetes.api.url is not set and KUBERNETES_SERVICE_HOST is not in the "
                "environment (not running in a pod)"
            )
        return f"https://{host}:{port}"


class _Retryable(Exception):
    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status


class KubernetesProvisioner:
    kind = "kubernetes"

    def __init__(self, config: KubernetesConfig) -> None:
        self.config = config
        self.base = config.resolved_url()
        token = config.token
        if token is None and (SERVICE_ACCOUNT / "token").exists():
            token = (SERVICE_ACCOUNT / "token").read_text().strip()
        ca = config.ca_file
        if ca is None and (SERVICE_ACCOUNT / "ca.crt").exists():
            ca = str(SERVICE_ACCOUNT / "ca.crt")
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.http = httpx.AsyncClient(
            base_url=self.base,
            headers=headers,
            verify=ca if ca else True,
            timeout=config.timeout_s,
        )
        ns, name = config.namespace, config.statefulset
        self.scale_path = f"/apis/apps/v1/namespaces/{ns}/statefulsets/{name}/scale"
        self.pods_path = f"/api/v1/namespaces/{ns}/pods"
        self.pod_name = re.compile(rf"^{re.escape(name)}-(\d+)$")

    async def close(self) -> None:
        await self.http.aclose()

    # ---- the interface ----------------------------------------------------------------------
    async def current(self) -> int:
        body = await self._call("GET", self.scale_path, "read the StatefulSet scale")
        return int(body.get("spec", {}).get("replicas", 0))

    async def scale_to(self, replicas: int, hosting: Collection[int]) -> None:
        what = f"scale StatefulSet {self.config.statefulset} to {replicas}"
        for attempt in range(1, self.config.attempts + 1):
            scale = await self._call("GET", self.scale_path, "read the StatefulSet scale")
            current = int(scale.get("spec", {}).get("replicas", 0))
            check_scale_down(current, replicas, hosting)
            if current == replicas:
                return
            version = scale.get("metadata", {}).get("resourceVersion")
            patch: dict[str, Any] = {"spec": {"replicas": replicas}}
            if version:
                patch["metadata"] = {"resourceVersion": version}
            try:
                await self._call("PATCH", self.scale_path, what, json=patch, conflict_retry=False)
            except _Retryable as exc:  # a 409: the scale moved; read it again
                self._log_retry(what, attempt, exc.status, str(exc))
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
        params = {"labelSelector": self.config.pod_selector} if self.config.pod_selector else None
        body = await self._call("GET", self.pods_path, "list storage pods", params=params)
        out: list[ProvisionedNode] = []
        zones: dict[str, str | None] = {}
        for pod in body.get("items", []):
            meta = pod.get("metadata", {})
            m = self.pod_name.match(meta.get("name", ""))
            if m is None:
                continue
            node_name = pod.get("spec", {}).get("nodeName")
            if node_name and node_name not in zones:
                zones[node_name] = await self._zone_of(node_name)
            out.append(
                ProvisionedNode(
                    ordinal=int(m.group(1)),
                    ready=_pod_ready(pod),
                    zone=zones.get(node_name) if node_name else None,
                    name=meta["name"],
                )
            )
        return sorted(out, key=lambda n: n.ordinal)

    async def _zone_of(self, node_name: str) -> str | None:
        node = await self._call("GET", f"/api/v1/nodes/{node_name}", f"read node {node_name}")
        labels = node.get("metadata", {}).get("labels", {}) or {}
        zone = labels.get(self.config.zone_label)
        return str(zone) if zone is not None else None

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
        method: str,
        path: str,
        what: str,
        *,
        json: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        conflict_retry: bool = True,
    ) -> dict[str, Any]:
        last = ""
        for attempt in range(1, self.config.attempts + 1):
            status: int | None = None
            try:
                headers = {"Content-Type": MERGE_PATCH} if json is not None else None
                resp = await self.http.request(
                    method,
                    path,
                    params=params,
                    headers=headers,
                    content=None if json is None else _dumps(json),
                )
                status = resp.status_code
                if status < 300:
                    body = resp.json()
                    return body if isinstance(body, dict) else {}
                last = f"HTTP {status}: {_reason(resp)}"
                if status == 409 and not conflict_retry:
                    raise _Retryable(status, last)
                if status not in (403, 404, 409, 429) and status < 500:
                    raise ProvisionerError(f"{what}: {last}")
            except httpx.TimeoutException as exc:
                last = f"timed out after {self.config.timeout_s:g}s ({type(exc).__name__})"
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            except ValueError as exc:  # a body that is not JSON
                raise ProvisionerError(f"{what}: the API server answered no JSON ({exc})") from None
            if attempt == self.config.attempts:
                break
            self._log_retry(what, attempt, status, last)
            await asyncio.sleep(self._backoff(attempt))
        hint = ""
        for code, text in HINTS.items():
            if last.startswith(f"HTTP {code}"):
                hint = f" ({text})"
        raise ProvisionerError(f"{what}: {last}{hint}, after {self.config.attempts} attempts")


def _dumps(body: dict[str, Any]) -> bytes:
    return jsonlib.dumps(body, separators=(",", ":")).encode()


def _reason(resp: httpx.Response) -> str:
    """The Status object's message when the API server sent one."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:200] or resp.reason_phrase
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return resp.reason_phrase


def _pod_ready(pod: dict[str, Any]) -> bool:
    for cond in pod.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status")) == "True"
    return False
