"""skaffold.yaml: no skaffold binary exists here, so the file is checked against the v4beta11
schema the project writes (tests/chart/skaffold-v4beta11.schema.json), and each profile's Helm
values are rendered by Helm's library and validated like the chart's own combinations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from chart_support import KUBE_VERSIONS, ROOT, component, named, of_kind, render

SCHEMA = Path(__file__).with_name("skaffold-v4beta11.schema.json")


def _config() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "skaffold.yaml").read_text()))


def _validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(yaml.safe_load(SCHEMA.read_text()))


def test_skaffold_yaml_matches_the_v4beta11_schema() -> None:
    errors = sorted(_validator().iter_errors(_config()), key=str)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


def test_the_schema_check_catches_mistakes() -> None:
    bad = _config()
    bad["build"]["artifacts"][0]["dockerfiel"] = "x"  # typo
    bad["profiles"][0]["manifests"]["helm"]["releases"][0].pop("name")
    messages = [e.message for e in _validator().iter_errors(bad)]
    assert any("dockerfiel" in m for m in messages) and any("'name'" in m for m in messages)


def _release(profile: str | None) -> dict[str, Any]:
    cfg = _config()
    scope = cfg if profile is None else next(p for p in cfg["profiles"] if p["name"] == profile)
    (release,) = scope["manifests"]["helm"]["releases"]
    return dict(release)


def _values(release: dict[str, Any]) -> dict[str, Any]:
    sets = dict(release.get("setValues", {}))
    sets["global.image.repository"] = "localhost/kafka-py"  # what setValueTemplates fill in
    sets["global.image.tag"] = "abc1234"
    return helm.parse_set_string(",".join(f"{k}={v}" for k, v in sets.items()))


@pytest.mark.parametrize("profile", [None, "dev", "zones"])
def test_each_profile_renders_valid_objects(profile: str | None) -> None:
    release = _release(profile)
    assert (ROOT / release["chartPath"] / "Chart.yaml").is_file()
    assert (
        _config()["build"]["artifacts"][0]["docker"]["dockerfile"] == "deploy/image/Containerfile"
    )
    docs = render(_values(release))
    for doc in docs:
        if doc["kind"] not in ("PodMonitor", "PrometheusRule"):
            kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)
    images = {
        c["image"]
        for d in docs
        if d["kind"] in ("Deployment", "StatefulSet") and component(d) != "zookeeper"
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"localhost/kafka-py:abc1234"}
    sts = named(docs, "StatefulSet", "kafka-py-storage")
    if profile == "dev":
        assert sts["spec"]["replicas"] == 1
        assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {
            "storage": "1Gi"
        }
        data = named(docs, "ConfigMap", "kafka-py-controller-settings")["data"]
        assert data["KAFKAPY_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
        assert not of_kind(docs, "HorizontalPodAutoscaler")
    if profile == "zones":
        gateways = [d for d in of_kind(docs, "Deployment") if component(d) == "gateway"]
        assert len(gateways) == 3
        spread = sts["spec"]["template"]["spec"]["topologySpreadConstraints"][0]
        assert spread["whenUnsatisfiable"] == "DoNotSchedule"
