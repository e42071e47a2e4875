"""Rendering deploy/helm with the Helm SDK and looking at the result."""

from __future__ import annotations

import copy
import fcntl
import functools
import importlib.util
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate.utils
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm"
RELEASE = "kafka-py"
NAMESPACE = "kafka"
KUBE_VERSIONS = ("1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0", "1.35.0")
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Pod", "Job")
# run-to-completion pods (helm test, hooks): no probes, no NetworkPolicy, no settings class
TASK_KINDS = ("Pod", "Job")
# Prometheus operator CRDs: not in the Kubernetes schemas (checked by shape in the tests).
CRD_KINDS = ("PodMonitor", "PrometheusRule")

_spec = importlib.util.spec_from_file_location("chart_deps", ROOT / "scripts" / "chart-deps.py")
assert _spec is not None and _spec.loader is not None
_chart_deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_chart_deps)


# kubernetes_validate.validate parses its version's 1.5 MB _definitions.json (and lists its
# schema folders) on every call, about 1,500 calls per run: the same parsed schemas, once per
# process (the validation itself is unchanged).
kubernetes_validate.utils.schema_contents = functools.cache(
    kubernetes_validate.utils.schema_contents
)
kubernetes_validate.utils.all_versions = functools.cache(kubernetes_validate.utils.all_versions)


def update_dependencies(chart: Path = CHART) -> None:
    _chart_deps.update(chart)


def update_dependencies_once(shared: Path) -> None:
    """update_dependencies() once per pytest run: under pytest-xdist every worker asks, the
    first does it (the others wait on a lock in ``shared``, the run's common temp folder) and
    no worker rewrites the packed subcharts while another renders them."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        update_dependencies()
        return
    with open(shared / "chart-deps.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / "chart-deps.done"
        if not done.exists():
            update_dependencies()
            done.touch()


def render(
    values: Mapping[str, Any] | None = None, chart: Path = CHART, release: str = RELEASE
) -> list[dict[str, Any]]:
    """Every object the chart renders for ``values`` (NOTES.txt left out)."""
    with helm.Chart.load(chart) as c:
        out = c.render(values=dict(values or {}), name=release, namespace=NAMESPACE)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def notes(values: Mapping[str, Any] | None = None) -> str:
    with helm.Chart.load(CHART) as c:
        out = c.render(values=dict(values or {}), name=RELEASE, namespace=NAMESPACE)
    return next(text for path, text in out.items() if path.endswith("NOTES.txt"))


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {[d['metadata']['name'] for d in of_kind(docs, kind)]}"
    return found[0]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
    return spec


def workloads(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return (d for d in docs if d["kind"] in WORKLOAD_KINDS)


def component(doc: dict[str, Any]) -> str:
    return str(doc["metadata"]["labels"]["app.kubernetes.io/component"])


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        out[k] = (
            merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
        )
    return out


_REF = re.compile(r"\$\(([A-Z_][A-Z0-9_]*)\)")


def expand_refs(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of args from the container's env."""
    return _REF.sub(lambda m: env.get(m.group(1), m.group(0)), text)
