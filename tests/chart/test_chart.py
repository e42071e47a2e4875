"""deploy/helm for the default values and meaningful combinations: Helm lint (strict), every
object valid for Kubernetes 1.30-1.35 (strict: no unknown fields), a policy check written as
tests, and the args/env of every kafka-py container accepted by that service's own settings
loader. values.schema.json rejects bad values; a broken template fails."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from chart_support import (
    CHART,
    CRD_KINDS,
    KUBE_VERSIONS,
    NAMESPACE,
    ROOT,
    TASK_KINDS,
    component,
    expand_refs,
    merge,
    named,
    notes,
    of_kind,
    pod_spec,
    render,
    workloads,
)

from services.cli.configs_users import parse_add_config
from services.cli.local_cluster import ROLES
from services.cli.main import build_parser
from services.common.settings import ServiceSettings
from services.console.settings import ConsoleSettings
from services.controller.settings import ControllerSettings
from services.gateway.security import listener_security
from services.gateway.settings import GatewaySettings
from services.group_coordinator.settings import GroupCoordinatorSettings
from services.storage.settings import StorageSettings
from services.transaction_coordinator.settings import TransactionCoordinatorSettings

DEV = {
    "global": {"zookeeper": {"replicas": 1}},
    "storage": {"replicas": 1, "persistence": {"size": "1Gi"}},
    "controller": {"replicas": 1, "config": {"offsets.topic.replication.factor": 1}},
    "gateway": {"replicas": 1, "autoscaling": {"enabled": False}},
    "groupCoordinator": {"replicas": 1},
    "zookeeper": {"persistence": {"size": "1Gi"}},
    # the console's objects vary little between combinations and each costs schema validation
    # time: on where its settings change (default, locked-down, security, external ZooKeeper)
    "console": {"enabled": False},
}
COMBINATIONS: dict[str, dict[str, Any]] = {
    "default": {},
    "dev": DEV,
    "zones": {
        "global": {
            "antiAffinity": "hard",
            "zones": {"whenUnsatisfiable": "DoNotSchedule", "fallback": "unknown-zone"},
        },
        "storage": {"replicas": 6},
        "gateway": {"service": {"mode": "perZone"}, "zones": ["zone-a", "zone-b", "zone-c"]},
        "console": {"enabled": False},
    },
    "loadbalancer-monitoring-autoscaler": {
        "gateway": {
            "service": {
                "mode": "LoadBalancer",
                "advertisedHost": "kafka.example.com",
                "loadBalancerSourceRanges": ["10.0.0.0/8"],
            }
        },
        "monitoring": {
            "podMonitor": True,
            "prometheusRule": True,
            "grafanaDashboards": {"enabled": True, "folder": "kafka-py"},
        },
        "controller": {"autoscaler": {"enabled": True, "minReplicas": 3, "maxReplicas": 9}},
    },
    "external-zookeeper-transactions": {
        "zookeeper": {"enabled": False},
        "global": {"zookeeper": {"connect": "zk-0.zk:2181,zk-1.zk:2181,zk-2.zk:2181/kafka"}},
        "transactionCoordinator": {"enabled": True},
        "spark": {
            "pipelines": [
                {
                    "pipeline": "wordcount",
                    "args": ["--window", "1 minute"],
                    "checkpointClaim": "spark-checkpoints",
                }
            ]
        },
    },
    "locked-down": {
        "global": {
            "zones": {"discovery": False},
            "metrics": {"scrapeAnnotations": False},
            "zookeeper": {
                "acl": {"enabled": True, "digestSecret": {"name": "zk-digest"}},
                "tls": {"enabled": True},
            },
            "internalTls": {"enabled": True},
        },
        "networkPolicy": {
            "clientPeers": [{"namespaceSelector": {"matchLabels": {"team": "apps"}}}],
            "metricsPeers": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
            "consolePeers": [{"podSelector": {"matchLabels": {"app": "ingress-nginx"}}}],
        },
        "console": {"readOnly": True},
        "gateway": {"autoscaling": {"enabled": False}, "replicas": 3},
        "storage": {
            "config": {
                "log.retention.hours": 24,
                "min.insync.replicas": 2,
                "log.segment.bytes": 1073741824,  # not 1.073741824e+09 in the env
            }
        },
        "tests": {"enabled": False},
    },
}
TLS_SECRET = "kafka-py-gateway-tls"
SECURITY = {
    "gateway": {
        "security": {
            "listeners": [
                {
                    "name": "EXTERNAL",
                    "protocol": "SASL_SSL",
                    "port": 9094,
                    "advertisedHost": "kafka.example.com",
                    "saslMechanisms": ["SCRAM-SHA-512", "PLAIN"],
                },
                {"name": "MTLS", "protocol": "SSL", "port": 9095, "sslClientAuth": "required"},
            ],
            "tls": {"secretName": TLS_SECRET, "keyPasswordKey": "key-password"},
            "sasl": {
                "plainUsersSecret": {"name": "kafka-py-plain-users"},
                "scramUsers": [
                    {"name": "alice", "passwordSecret": {"name": "alice", "key": "password"}},
                    {
                        "name": "bob",
                        "mechanism": "SCRAM-SHA-256",
                        "iterations": 4096,
                        "passwordSecret": {"name": "bob", "key": "pw"},
                    },
                ],
                "connectionsMaxReauthMs": 3600000,
            },
            "authorizer": {
                "className": "kafka.security.authorizer.AclAuthorizer",
                "superUsers": ["User:admin", "User:ANONYMOUS"],
            },
        }
    }
}
# gateway.security rides on the LoadBalancer combination (one combination less to validate)
SECURE = "loadbalancer-monitoring-autoscaler-security"
COMBINATIONS[SECURE] = merge(COMBINATIONS.pop("loadbalancer-monitoring-autoscaler"), SECURITY)
COMBOS = list(COMBINATIONS)
# what the Secrets hold, for loading the settings as the pod would see them
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="a";'
SECRET_ENV = {"KAFKAPY_LISTENER_NAME_EXTERNAL_PLAIN_SASL_JAAS_CONFIG": PLAIN_JAAS}
SETTINGS: dict[str, type[ServiceSettings]] = {
    "storage": StorageSettings,
    "gateway": GatewaySettings,
    "controller": ControllerSettings,
    "group-coordinator": GroupCoordinatorSettings,
    "transaction-coordinator": TransactionCoordinatorSettings,
    "console": ConsoleSettings,
}
# the components with gRPC servers or channels (certs init's certificate names)
INTERNAL_TLS = ("storage", "controller", "gateway", "group-coordinator", "transaction-coordinator")
ELASTIC = importlib.util.find_spec("services.controller.elastic_settings") is not None
POD_ENV = {  # what the downward API gives a pod
    "POD_NAME": "kafka-py-storage-1",
    "POD_NAMESPACE": NAMESPACE,
    "POD_IP": "10.1.2.3",
    "NODE_NAME": "node-1",
    "BROKER_ID": "1",
}


@pytest.fixture(scope="module", params=COMBOS)
def combo(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(COMBINATIONS[request.param])


@pytest.mark.parametrize("name", COMBOS)
def test_helm_lint_strict(name: str) -> None:
    for kube in ("v1.30.0", "v1.35.0"):
        report = helm.lint(
            CHART, COMBINATIONS[name], strict=True, with_subcharts=True, kube_version=kube
        )
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not problems and not report["errors"], report


def test_every_object_is_valid_for_kubernetes_1_30_to_1_35(combo: Any) -> None:
    _, docs = combo
    assert docs
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} on {version}: {exc}")


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(doc)
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_policy(combo: Any) -> None:
    """The checks a policy scanner would run (no such scanner is installed here): non-root,
    no privilege escalation, all capabilities dropped, RuntimeDefault seccomp, read-only root,
    no host namespaces/paths/ports, pinned images, requests and memory limits, probes, and a
    service account token only where the Kubernetes API is read."""
    name, docs = combo
    for doc in workloads(docs):
        what = f"{name}: {doc['kind']}/{doc['metadata']['name']}"
        spec = pod_spec(doc)
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["seccompProfile"]["type"] == "RuntimeDefault", (
            what
        )
        assert psc.get("runAsUser", 0) != 0, what
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(key), what
        assert not [v for v in spec.get("volumes", []) if "hostPath" in v], what
        reads_api = component(doc) == "spark-driver" or (
            any(e["name"] == "NODE_NAME" for c in spec["containers"] for e in c.get("env", []))
            and (
                component(doc)
                in ("storage", "gateway", "group-coordinator", "transaction-coordinator")
                or "autoscaler" in name
            )
        )
        assert spec.get("automountServiceAccountToken") in (False, True), what
        if spec["automountServiceAccountToken"]:
            assert reads_api, f"{what}: token mounted without a use"
        for c in _containers(doc):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, what
            assert sc["readOnlyRootFilesystem"] is True, what
            assert "ALL" in sc["capabilities"]["drop"] and not sc.get("privileged"), what
            assert not [p for p in c.get("ports", []) if "hostPort" in p], what
            image = c["image"]
            assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), what
            res = c["resources"]
            assert {"cpu", "memory"} <= set(res["requests"]) and "memory" in res["limits"], what
            if doc["kind"] not in TASK_KINDS:
                assert "readinessProbe" in c and "livenessProbe" in c, what


def _settings_env(docs: list[dict[str, Any]], doc: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = dict(POD_ENV)
    c = pod_spec(doc)["containers"][0]
    for ref in c.get("envFrom", []):
        env.update(named(docs, "ConfigMap", ref["configMapRef"]["name"])["data"])
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "secretKeyRef" in e["valueFrom"]:
            env[e["name"]] = SECRET_ENV.get(e["name"], "from-a-secret")
    return env


def test_args_env_and_probes_are_what_the_services_accept(combo: Any) -> None:
    """Each kafka-py container's command line and ConfigMap env, run through the service's own
    settings loader (the code `kafka-py <service>` runs): every flag and KAFKAPY_* variable
    must be one the service accepts; probes and ports match the admin port it will serve."""
    name, docs = combo
    checked = set()
    zk_connects = set()
    for doc in workloads(docs):
        if doc["kind"] in TASK_KINDS or component(doc) == "zookeeper":
            continue
        c = pod_spec(doc)["containers"][0]
        service, *args = c["args"]
        assert component(doc) == service
        env = _settings_env(docs, doc)
        argv = [expand_refs(a, env) for a in args]
        assert not [a for a in argv if "$(" in a], f"unexpanded reference in {argv}"
        cls = SETTINGS.get(service)
        if cls is None or (service == "controller" and "autoscaler" in name and not ELASTIC):
            continue  # not on this branch yet: test_services_not_on_this_branch says so
        settings = cls.load(argv, env=env)
        checked.add(service)
        admin = {p["name"]: p["containerPort"] for p in c["ports"]}["admin"]
        assert settings.admin_port == admin and settings.admin_host == "0.0.0.0"
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
        assert settings.log_format == "json"
        zk_acl = COMBINATIONS[name].get("global", {}).get("zookeeper", {}).get("acl", {})
        assert settings.zookeeper_set_acl is zk_acl.get("enabled", False)
        if settings.zookeeper_set_acl:  # the digest file comes from the Secret, read-only
            (mount,) = [m for m in c["volumeMounts"] if m["name"] == "zookeeper-digest"]
            (vol,) = [v for v in pod_spec(doc)["volumes"] if v["name"] == "zookeeper-digest"]
            assert mount["readOnly"] is True and vol["secret"]["secretName"] == "zk-digest"
            assert str(settings.zookeeper_digest_auth_file).startswith(mount["mountPath"] + "/")
        zk_connects.add(settings.zookeeper_connect)
        zk_tls = COMBINATIONS[name].get("global", {}).get("zookeeper", {}).get("tls", {})
        assert settings.zookeeper_ssl_client_enable is zk_tls.get("enabled", False)
        _internal_tls_as_the_values_say(name, doc, c, settings)
        if isinstance(settings, ConsoleSettings):
            _console_is_a_client_of_this_release(name, docs, c, settings)
            continue
        listen = settings.listener  # type: ignore[attr-defined]
        assert listen.port in [p["containerPort"] for p in c["ports"]], (service, listen)
        if service == "storage":
            assert settings.broker_id == 1
            assert settings.advertised_listeners.endswith(  # type: ignore[attr-defined]
                f"kafka-py-storage-1.kafka-py-storage-headless.{NAMESPACE}.svc.cluster.local:9093"
            )
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            assert any(settings.log_dir.is_relative_to(m) for m in mounts)  # type: ignore[attr-defined]
        else:
            id_field = "controller_id" if service == "controller" else "node_id"
            assert getattr(settings, id_field) == -1  # generated from /brokers/seqid
        if service != "controller":
            zones = COMBINATIONS[name].get("global", {}).get("zones", {})
            want = "kubernetes" if zones.get("discovery", True) else "none"
            assert settings.rack_discovery == want  # type: ignore[attr-defined]
    assert {"storage", "gateway", "group-coordinator"} <= checked
    assert ("console" in checked) is COMBINATIONS[name].get("console", {}).get("enabled", True)
    assert len(zk_connects) == 1  # the console reads the cluster's own ZooKeeper


def _internal_tls_as_the_values_say(
    name: str, doc: dict[str, Any], c: dict[str, Any], settings: ServiceSettings
) -> None:
    """Every gRPC server and client (not the console, a Kafka client) gets internal.ssl.* with
    its own certificate, key and the CA from the Secret, mounted read-only; nothing else."""
    want = COMBINATIONS[name].get("global", {}).get("internalTls", {}).get("enabled", False)
    want = want and component(doc) in INTERNAL_TLS
    assert settings.internal_ssl_enabled is want, doc["metadata"]["name"]
    mounts = [m for m in c["volumeMounts"] if m["name"] == "internal-tls"]
    volumes = [v for v in pod_spec(doc)["volumes"] if v["name"] == "internal-tls"]
    if not want:
        assert not mounts and not volumes
        return
    (mount,), (vol,) = mounts, volumes
    assert mount["readOnly"] is True and vol["secret"]["secretName"] == "kafka-py-internal-tls"
    files = {
        f"{mount['mountPath']}/{i['path']}": i["key"] for i in vol["secret"]["items"]
    }  # fmt: skip
    assert files == {
        settings.internal_ssl_keystore_location: f"{component(doc)}.pem",
        settings.internal_ssl_key_location: f"{component(doc)}-key.pem",
        settings.internal_ssl_truststore_location: "ca.pem",
    }


def _console_is_a_client_of_this_release(
    name: str, docs: list[dict[str, Any]], c: dict[str, Any], settings: ConsoleSettings
) -> None:
    """The console's settings: the gateway Service's INTERNAL (PLAINTEXT) port, its HTTP port
    behind the console Service, read-only as the values say."""
    host, port = settings.bootstrap_servers.rsplit(":", 1)
    service, namespace = host.split(".")[:2]
    assert namespace == NAMESPACE and host.endswith(".svc.cluster.local")
    gw = named(docs, "Service", service)
    assert {"name": "kafka", "port": int(port), "targetPort": "kafka", "protocol": "TCP"} in gw[
        "spec"
    ]["ports"]  # the gateway's first listener (INTERNAL, PLAINTEXT)
    assert gw["spec"]["selector"]["app.kubernetes.io/component"] == "gateway"
    assert settings.console_host == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert settings.console_port == ports["http"] != settings.admin_port
    svc = named(docs, "Service", "kafka-py-console")
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]
    want = COMBINATIONS[name].get("console", {}).get("readOnly", False)
    assert settings.console_read_only is want


def test_console_off_and_how_to_reach_it() -> None:
    assert not [d for d in render(DEV) if "console" in d["metadata"]["name"]]
    assert f"kubectl -n {NAMESPACE} port-forward svc/kafka-py-console 8080" in notes({})
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmError, match="admin port"):
        chart.render(values={"console": {"port": 8080}}, name="kafka-py")


@pytest.mark.parametrize(
    "module", ["services.transaction_coordinator.settings", "services.controller.elastic_settings"]
)
def test_services_not_on_this_branch(module: str) -> None:
    """The transaction coordinator and the autoscaler's settings are built on other branches;
    until they are merged their containers' args/env cannot be checked (skipped, not faked)."""
    pytest.importorskip(module)


def test_storage_statefulset_is_shaped_for_kafka(combo: Any) -> None:
    name, docs = combo
    sts = named(docs, "StatefulSet", "kafka-py-storage")
    spec = sts["spec"]
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == "kafka-py-storage-headless"
    assert named(docs, "Service", "kafka-py-storage-headless")["spec"]["clusterIP"] == "None"
    assert [t["metadata"]["name"] for t in spec["volumeClaimTemplates"]] == ["data"]
    pod = spec["template"]["spec"]
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert pod["affinity"]["podAntiAffinity"]
    assert named(docs, "PodDisruptionBudget", "kafka-py-storage")["spec"]["maxUnavailable"] == 1
    # SIGTERM's controlled shutdown fits in the grace period even at its worst
    env = _settings_env(docs, sts)
    st = StorageSettings.load(["--broker.id", "0"], env=env)
    worst_s = (
        st.controlled_shutdown_max_retries
        * (st.controller_socket_timeout_ms + st.controlled_shutdown_retry_backoff_ms)
        + st.shutdown_grace_ms
    ) / 1000
    container = pod["containers"][0]
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] >= worst_s + int(pre_stop[1]), (name, worst_s)


def test_gateway_service_modes() -> None:
    docs = render(COMBINATIONS["zones"])
    deployments = [d for d in of_kind(docs, "Deployment") if component(d) == "gateway"]
    assert sorted(d["metadata"]["name"] for d in deployments) == [
        f"kafka-py-gateway-zone-{z}" for z in "abc"
    ]
    for d in deployments:
        zone = d["metadata"]["labels"]["kafka-py.io/zone"]
        args = pod_spec(d)["containers"][0]["args"]
        assert args[args.index("--broker.rack") + 1] == zone
        assert f"kafka-py-gateway-{zone}.{NAMESPACE}.svc.cluster.local:9092" in args
        terms = pod_spec(d)["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [zone]
        assert (
            named(docs, "Service", f"kafka-py-gateway-{zone}")["spec"]["selector"][
                "kafka-py.io/zone"
            ]
            == zone
        )
        assert named(docs, "HorizontalPodAutoscaler", d["metadata"]["name"])
    assert "kafka-py.io/zone" not in named(docs, "Service", "kafka-py-gateway")["spec"]["selector"]

    lb = render(COMBINATIONS[SECURE])
    svc = named(lb, "Service", "kafka-py-gateway")
    assert svc["spec"]["type"] == "LoadBalancer"
    args = pod_spec(named(lb, "Deployment", "kafka-py-gateway"))["containers"][0]["args"]
    internal = f"kafka-py-gateway-internal.{NAMESPACE}.svc.cluster.local:9092"
    assert args[args.index("--advertised.listeners") + 1].split(",") == [
        f"INTERNAL://{internal}",
        "EXTERNAL://kafka.example.com:9094",
        "MTLS://kafka.example.com:9095",
    ]
    # the PLAINTEXT listener stays off the LoadBalancer: its own ClusterIP Service
    assert {p["port"] for p in svc["spec"]["ports"]} == {9094, 9095}
    inner = named(lb, "Service", "kafka-py-gateway-internal")
    assert inner["spec"]["type"] == "ClusterIP" and inner["spec"]["ports"][0]["port"] == 9092
    text = notes(COMBINATIONS[SECURE])
    assert "EXTERNAL (SASL_SSL): kafka.example.com:9094" in text and internal in text
    assert "Bootstrap address" in text and "kafka.example.com:9092" not in text

    default = render({})
    assert named(default, "Service", "kafka-py-gateway")["spec"]["type"] == "ClusterIP"
    hpa = named(default, "HorizontalPodAutoscaler", "kafka-py-gateway")
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert "replicas" not in named(default, "Deployment", "kafka-py-gateway")["spec"]
    assert f"kafka-py-gateway.{NAMESPACE}.svc.cluster.local:9092" in notes({})


def test_monitoring_objects_only_when_asked_or_served() -> None:
    assert not [d for d in render({}) if d["kind"] in CRD_KINDS]  # no CRDs in an offline render
    docs = render(COMBINATIONS[SECURE])
    pm = named(docs, "PodMonitor", "kafka-py")
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "admin"
    relabelings = pm["spec"]["podMetricsEndpoints"][0]["relabelings"]
    assert relabelings[0] == {
        "targetLabel": "kafka_cluster",
        "replacement": pm["metadata"]["labels"]["app.kubernetes.io/instance"],
    }
    # every scraped workload's job is the service's name as `make run`'s Prometheus labels it
    # (what the dashboards select on), by Prometheus' relabel semantics
    jobs = {
        _relabel(relabelings, w["spec"]["template"]["metadata"]["labels"])["job"]
        for w in docs
        if w["kind"] in ("Deployment", "StatefulSet")
        and w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
        not in ("zookeeper", "console")
    }
    assert jobs == {"gateway", "storage", "controller", "group_coordinator"} | (
        {"transaction_coordinator"} if "transaction_coordinator" in jobs else set()
    )
    assert jobs <= set(ROLES)  # the local cluster's job label is the role
    # the rule file itself, not a copy: same groups, Prometheus' {{ $value }} left as is
    shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "kafka-py-rules.yml").read_text())
    rule = named(docs, "PrometheusRule", "kafka-py")
    assert rule["spec"]["groups"] == shipped["groups"]
    assert "{{ $value }}" in str(rule["spec"])
    sts = named(docs, "StatefulSet", "kafka-py-storage")
    assert sts["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "8080"


def _relabel(rules: list[dict[str, Any]], pod_labels: dict[str, str]) -> dict[str, str]:
    """Prometheus' relabelling (action replace) of a pod's discovered labels."""
    labels = {
        "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k): v
        for k, v in pod_labels.items()
    }
    labels["job"] = "namespace/podmonitor"
    for rule in rules:
        value = ";".join(labels.get(n, "") for n in rule.get("sourceLabels", []))
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if match:
            template = re.sub(r"\$\{?(\d+)\}?", r"\\g<\1>", rule.get("replacement", "$1"))
            labels[rule["targetLabel"]] = match.expand(template)
    return labels


def _dashboards(docs: list[dict[str, Any]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for cm in of_kind(docs, "ConfigMap"):
        if cm["metadata"]["labels"].get("grafana_dashboard") == "1":
            assert cm["metadata"]["annotations"] == {"grafana_folder": "kafka-py"}
            found.update(cm["data"])
    return found


def test_grafana_dashboards_are_the_files_of_deploy_grafana(tmp_path: Path) -> None:
    """Every deploy/grafana/*.json ships byte for byte in a sidecar-labelled ConfigMap (the
    chart's files/grafana is a symlink), only when enabled; `helm package` follows the
    symlinks. A copy of the chart with a dashboard full of template-like text proves the
    content is not templated."""
    values = COMBINATIONS[SECURE]
    assert not _dashboards(render({}))
    on_disk = {p.name: p.read_text() for p in (ROOT / "deploy" / "grafana").glob("*.json")}
    assert _dashboards(render(values)) == on_disk

    chart = tmp_path / "helm"
    shutil.copytree(CHART, chart, symlinks=False)  # packed subcharts included
    tricky = '{"title": "Lag {{ $labels.x }}", "expr": "a<b && c>d", "u": "\\u00e9 é"}\n'
    (chart / "files" / "grafana" / "Cluster Overview.json").write_text(tricky)
    docs = render(values, chart=chart)
    assert _dashboards(docs)["Cluster Overview.json"] == tricky
    assert named(docs, "ConfigMap", "kafka-py-dashboard-cluster-overview")
    for doc in of_kind(docs, "ConfigMap"):
        kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)

    packed = helm.package(CHART, destination=tmp_path / "pkg")
    with tarfile.open(packed) as tar:
        names = set(tar.getnames())
    assert "kafka-py/files/prometheus/kafka-py-rules.yml" in names
    assert {f"kafka-py/files/grafana/{n}" for n in on_disk} <= names
    assert "kafka-py/files/prometheus/kafka-py-rules.test.yml" not in names


def _rules_of(docs: list[dict[str, Any]], account: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the ServiceAccount ``account`` is granted by the release."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"].endswith("Role")}
    granted: set[tuple[str, str, str]] = set()
    for binding in of_kind(docs, "RoleBinding") + of_kind(docs, "ClusterRoleBinding"):
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == NAMESPACE
            for s in binding["subjects"]
        ):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], role
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    granted |= {(group, resource, verb) for verb in rule["verbs"]}
    return granted


NODES = {("", "nodes", "get")}
SCALER = {
    ("apps", "statefulsets/scale", "get"),
    ("apps", "statefulsets/scale", "patch"),
    ("apps", "statefulsets", "get"),
    ("", "pods", "list"),
}


SPARK_DRIVER = {
    ("", resource, verb)
    for resource, verbs in (
        ("pods", ("create", "delete", "deletecollection", "get", "list", "watch")),
        ("services", ("create", "delete", "deletecollection", "get", "list")),
        ("configmaps", ("create", "delete", "deletecollection", "get", "list")),
    )
    for verb in verbs
}


def test_rbac_per_workload_is_minimal(combo: Any) -> None:
    """What each pod's token can do: storage, gateways and coordinators only `get nodes` (and
    nothing without zone discovery); the controller alone holds the autoscaler's statefulsets
    and pods rights, only with the autoscaler on; ZooKeeper and the test pod mount no token."""
    name, docs = combo
    values = COMBINATIONS[name]
    discovery = values.get("global", {}).get("zones", {}).get("discovery", True)
    scaler = values.get("controller", {}).get("autoscaler", {}).get("enabled", False)
    accounts = {d["metadata"]["name"] for d in of_kind(docs, "ServiceAccount")}
    for doc in workloads(docs):
        spec, what = pod_spec(doc), f"{name}: {doc['metadata']['name']}"
        account = spec.get("serviceAccountName", "default")
        granted = _rules_of(docs, account)
        if component(doc) in ("zookeeper", "helm-test", "scram-users"):
            assert spec["automountServiceAccountToken"] is False and not granted, what
        elif component(doc) == "spark-driver":
            assert account == "kafka-py-spark" and granted == SPARK_DRIVER, what
        elif component(doc) == "console":  # no Kubernetes API at all
            assert account == "kafka-py-console" and account in accounts, what
            assert spec["automountServiceAccountToken"] is False and not granted, what
        elif component(doc) == "controller":
            assert account == "kafka-py-controller" and account in accounts, what
            assert granted == (SCALER if scaler else set()), what
            assert spec["automountServiceAccountToken"] is scaler, what
        else:
            assert account == "kafka-py" and account in accounts, what
            assert granted == (NODES if discovery else set()), what
            assert not {g for g in granted if "statefulsets" in g[1] or g[1] == "pods"}, what
    spark = [r for r in of_kind(docs, "Role") if r["metadata"]["name"] == "kafka-py-spark-driver"]
    assert len(spark) == int("spark" in values)
    assert len(of_kind(docs, "Role")) == int(scaler) + len(spark)
    assert len(of_kind(docs, "ClusterRole")) == int(discovery)


def test_network_policies_cover_every_workload(combo: Any) -> None:
    name, docs = combo
    policies = of_kind(docs, "NetworkPolicy")
    for doc in workloads(docs):
        if doc["kind"] in TASK_KINDS:
            continue
        labels = doc["spec"]["template"]["metadata"]["labels"]
        covering = [
            p for p in policies
            if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        ]  # fmt: skip
        assert covering, f"{name}: {doc['metadata']['name']} has no NetworkPolicy"
        for rule in covering[0]["spec"]["ingress"]:
            ports = {p["port"] for p in rule["ports"]}
            if ports & {"grpc", "client", "peer", "election"}:
                (peer,) = rule["from"]
                assert (
                    peer["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "kafka-py"
                )
    peers = COMBINATIONS[name].get("networkPolicy", {})
    gw = named(docs, "NetworkPolicy", "kafka-py-gateway")
    kafka_rule = next(r for r in gw["spec"]["ingress"] if r["ports"][0]["port"] == "kafka")
    release = {"app.kubernetes.io/instance": "kafka-py", "app.kubernetes.io/name": "kafka-py"}
    if "clientPeers" in peers:  # those, and this release's own clients (the console, hooks)
        assert kafka_rule["from"] == [
            *peers["clientPeers"],
            {"podSelector": {"matchLabels": release}},
        ]
    else:
        assert "from" not in kafka_rule
    # the console's HTTP port: only consolePeers (none by default: kubectl port-forward)
    if not COMBINATIONS[name].get("console", {}).get("enabled", True):
        return
    console = named(docs, "NetworkPolicy", "kafka-py-console")
    http = [r for r in console["spec"]["ingress"] if r["ports"][0]["port"] == "http"]
    assert [r["from"] for r in http] == ([peers["consolePeers"]] if "consolePeers" in peers else [])
    assert [r["ports"][0]["port"] for r in console["spec"]["ingress"]] == ["http"] * len(http) + [
        "admin"
    ]


def test_helm_test_hook_produces_and_consumes_through_the_gateway_service() -> None:
    docs = render({})
    pod = next(d for d in of_kind(docs, "Pod"))
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["command"][-1]
    bootstrap = f"kafka-py-gateway.{NAMESPACE}.svc.cluster.local:9092"
    assert f"B={bootstrap}" in script
    assert "console-producer" in script and "console-consumer" in script and "--acks all" in script


def _self_signed(directory: Path, key_password: str) -> None:
    """What the TLS Secret would hold: keystore.pem (certificate + encrypted key), ca.crt."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-keyout", str(directory / "key.pem"), "-out", str(directory / "ca.crt"),
         "-subj", "/CN=kafka-py-gateway", "-days", "2", "-passout", f"pass:{key_password}"],
        check=True, capture_output=True,
    )  # fmt: skip
    keystore = (directory / "ca.crt").read_text() + (directory / "key.pem").read_text()
    (directory / "keystore.pem").write_text(keystore)


def test_security_values_reach_the_gateways_own_settings(tmp_path: Path) -> None:
    """gateway.security rendered, then loaded by GatewaySettings and built into each
    listener's TLS context and SASL config by the gateway's own code (the TLS Secret's files
    made with openssl and put where the pod mounts them); no secret in a ConfigMap or args."""
    docs = render(COMBINATIONS[SECURE])
    gw = named(docs, "Deployment", "kafka-py-gateway")
    c = pod_spec(gw)["containers"][0]
    env = _settings_env(docs, gw)
    argv = [expand_refs(a, env) for a in c["args"][1:]]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "tls"]
    (volume,) = [v for v in pod_spec(gw)["volumes"] if v["name"] == "tls"]
    assert mount["readOnly"] is True and volume["secret"]["secretName"] == TLS_SECRET
    for key in ("KAFKAPY_SSL_KEYSTORE_LOCATION", "KAFKAPY_SSL_TRUSTSTORE_LOCATION"):
        assert env[key].startswith(mount["mountPath"] + "/")
        env[key] = env[key].replace(mount["mountPath"], str(tmp_path))  # the kubelet's mount
    _self_signed(tmp_path, env["KAFKAPY_SSL_KEY_PASSWORD"])
    settings = GatewaySettings.load(argv, env=env)

    listeners = settings.kafka_listeners
    assert [(x.name, x.protocol, x.port) for x in listeners] == [
        ("INTERNAL", "PLAINTEXT", 9092),
        ("EXTERNAL", "SASL_SSL", 9094),
        ("MTLS", "SSL", 9095),
    ]
    service_ports = {
        p["port"]
        for svc in ("kafka-py-gateway", "kafka-py-gateway-internal")
        for p in named(docs, "Service", svc)["spec"]["ports"]
    }
    container_ports = {p["containerPort"] for p in c["ports"]}
    assert {x.port for x in listeners} <= service_ports & container_ports
    advertised = {
        a.name: (a.address.host, a.address.port) for a in settings.advertised_kafka_listeners or []
    }
    assert advertised["EXTERNAL"] == ("kafka.example.com", 9094)
    assert advertised["INTERNAL"] == (
        f"kafka-py-gateway-internal.{NAMESPACE}.svc.cluster.local",
        9092,
    )
    secured = {x.name: listener_security(settings, x) for x in listeners}
    assert secured["INTERNAL"].tls is None and secured["INTERNAL"].sasl is None
    external = secured["EXTERNAL"]
    assert external.tls is not None and external.sasl is not None
    assert external.sasl.mechanisms == ("SCRAM-SHA-512", "PLAIN")
    assert external.sasl.plain_users == {"admin": "a"} and external.sasl.max_reauth_ms == 3600000
    mtls = secured["MTLS"]
    assert mtls.tls is not None and mtls.tls.cfg.client_auth == "required" and mtls.sasl is None
    assert settings.authorizer_class_name == "kafka.security.authorizer.AclAuthorizer"
    assert settings.super_users == "User:admin;User:ANONYMOUS"

    # secrets only as secretKeyRef env: never in a ConfigMap, args or a plain env value
    for cm in of_kind(docs, "ConfigMap"):
        assert not [k for k in cm["data"] if "JAAS" in k or "PASSWORD" in k], cm["metadata"]
    for doc in workloads(docs):
        for ctr in pod_spec(doc)["containers"]:
            assert not [a for a in ctr.get("args", []) if "jaas" in a or "password" in a.lower()]
            for e in ctr.get("env", []):
                if "JAAS" in e["name"] or "PASSWORD" in e["name"]:
                    assert "secretKeyRef" in e["valueFrom"], e

    job = named(docs, "Job", "kafka-py-scram-users")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    script = pod_spec(job)["containers"][0]["command"][-1]
    assert f"B=kafka-py-gateway-internal.{NAMESPACE}.svc.cluster.local:9092" in script
    assert 'upsert "alice" SCRAM-SHA-512 8192 /etc/kafka-py/scram/0' in script
    assert 'upsert "bob" SCRAM-SHA-256 4096 /etc/kafka-py/scram/1' in script
    # the --add-config the script builds is one `kafka-py configs` accepts
    assert '--add-config "$2=[iterations=$3,password=$P]"' in script
    assert parse_add_config("SCRAM-SHA-256=[iterations=4096,password=s3cret]") == {
        "SCRAM-SHA-256": ("s3cret", 4096)
    }
    (passwords,) = [v for v in pod_spec(job)["volumes"] if v["name"] == "passwords"]
    assert [src["secret"]["name"] for src in passwords["projected"]["sources"]] == ["alice", "bob"]


def test_spark_pipeline_job_runs_the_cli_as_a_k8s_driver() -> None:
    """spark.pipelines: a Job whose args `kafka-py`'s own parser accepts (pipeline run NAME with
    master k8s://), its Spark settings and executor pod template in a ConfigMap (the template a
    valid, locked-down Pod), the checkpoint claim mounted in the driver and the executors."""
    docs = render(COMBINATIONS["external-zookeeper-transactions"])
    job = named(docs, "Job", "kafka-py-spark-wordcount")
    spec = pod_spec(job)
    (driver,) = spec["containers"]
    args = build_parser().parse_args(driver["args"])
    assert (args.command, args.name) == ("pipeline", "wordcount")
    assert args.master == "k8s://https://kubernetes.default.svc"
    assert args.bootstrap_server == f"kafka-py-gateway.{NAMESPACE}.svc.cluster.local:9092"
    assert args.window == "1 minute"
    mounts = {m["name"]: m for m in driver["volumeMounts"]}
    assert args.checkpoint.startswith(mounts["checkpoints"]["mountPath"] + "/")
    claims = {v["name"]: v for v in spec["volumes"]}
    assert claims["checkpoints"]["persistentVolumeClaim"]["claimName"] == "spark-checkpoints"
    env = {e["name"]: e.get("value") for e in driver["env"]}
    assert env["PYSPARK_SUBMIT_ARGS"].endswith(" pyspark-shell")
    assert "spark.driver.host=$(POD_IP)" in env["PYSPARK_SUBMIT_ARGS"]
    assert [e["name"] for e in driver["env"]].index("POD_IP") < list(env).index("SPARK_LOCAL_IP")

    cm = named(docs, "ConfigMap", claims["conf"]["configMap"]["name"])
    conf = dict(
        line.split(" ", 1) for line in cm["data"]["spark-defaults.conf"].splitlines() if line
    )
    assert env["SPARK_CONF_DIR"] == mounts["conf"]["mountPath"]
    assert conf["spark.kubernetes.container.image"] == "ghcr.io/kafka-py/kafka-py-spark:0.1.0"
    assert (
        conf["spark.kubernetes.authenticate.driver.serviceAccountName"]
        == spec["serviceAccountName"]
    )
    assert conf["spark.kubernetes.executor.podTemplateFile"] == (
        f"{mounts['conf']['mountPath']}/executor-pod.yaml"
    )
    assert conf["spark.driver.port"] == "7078" and conf["spark.blockManager.port"] == "7079"
    executor = yaml.safe_load(cm["data"]["executor-pod.yaml"])
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(
            {**executor, "metadata": {"name": "x", **executor["metadata"]}}, version, strict=True
        )
    (ctr,) = executor["spec"]["containers"]
    assert ctr["name"] == conf["spark.kubernetes.executor.podTemplateContainerName"]
    assert executor["spec"]["automountServiceAccountToken"] is False
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    assert "KubernetesExecutorBackend" in ctr["command"][-1]
    (claim,) = [v for v in executor["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claim["persistentVolumeClaim"]["claimName"] == "spark-checkpoints"
    assert {"name": claim["name"], "mountPath": mounts["checkpoints"]["mountPath"]} in ctr[
        "volumeMounts"
    ]
    assert not [d for d in render({}) if "spark" in d["metadata"]["name"]]


@pytest.mark.parametrize(
    ("security", "complaint"),
    [
        ({"listeners": [{"name": "TLS", "protocol": "SSL", "port": 9093}]}, "tls.secretName"),
        (
            {
                "listeners": [
                    {
                        "name": "S",
                        "protocol": "SASL_PLAINTEXT",
                        "port": 9093,
                        "saslMechanisms": ["PLAIN"],
                    }
                ]
            },
            "plainUsersSecret",
        ),  # fmt: skip
        (
            {
                "listeners": [
                    {"name": "TLS", "protocol": "SSL", "port": 9093, "sslClientAuth": "required"}
                ],
                "tls": {"secretName": "gw-tls", "truststoreKey": ""},
            },
            "truststoreKey",
        ),
        ({"listeners": [{"name": "A", "protocol": "PLAINTEXT", "port": 9092}]}, "port 9092"),
    ],
)
def test_security_combinations_the_schema_cannot_express_are_refused(
    security: dict[str, Any], complaint: str
) -> None:
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmError, match=complaint):
            chart.render(values={"gateway": {"security": security}}, name="kafka-py")


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"storage": {"replicas": 0}}, "/storage/replicas"),
        ({"storage": {"terminationGracePeriodSeconds": 10}}, "terminationGracePeriodSeconds"),
        ({"gateway": {"service": {"mode": "NodePort"}}}, "/gateway/service/mode"),
        ({"gateway": {"service": {"mode": "perZone"}}}, "zones"),
        ({"global": {"image": {"tag": "latest"}}}, "/global/image/tag"),
        ({"global": {"zookeeper": {"replicas": 2}}}, "/global/zookeeper/replicas"),
        ({"zookeeper": {"enabled": False}}, "connect"),
        ({"storage": {"config": {"Log Retention": 1}}}, "Log Retention"),
        ({"storage": {"persistence": {"size": "lots"}}}, "/storage/persistence/size"),
        ({"global": {"zones": {"whenUnsatisfiable": "Maybe"}}}, "whenUnsatisfiable"),
        ({"monitoring": {"podMonitor": "sometimes"}}, "podMonitor"),
        ({"stroage": {"replicas": 3}}, "stroage"),
        (
            {
                "gateway": {
                    "security": {
                        "listeners": [{"name": "INTERNAL", "protocol": "SSL", "port": 9093}]
                    }
                }
            },
            "/gateway/security/listeners/0/name",
        ),  # fmt: skip
        (
            {
                "gateway": {
                    "security": {"listeners": [{"name": "X", "protocol": "TLS", "port": 9093}]}
                }
            },
            "/gateway/security/listeners/0/protocol",
        ),  # fmt: skip
        ({"gateway": {"security": {"authorizer": {"className": "acl"}}}}, "className"),
        ({"global": {"internalTls": {"enabled": "yes"}}}, "/global/internalTls/enabled"),
        ({"global": {"internalTls": {"secretName": "Certs"}}}, "/global/internalTls/secretName"),
        ({"global": {"zookeeper": {"acl": {"enabled": True}}}}, "digestSecret"),
        ({"console": {"readOnly": "yes"}}, "/console/readOnly"),
    ],
)
def test_values_schema_rejects_bad_values(values: dict[str, Any], complaint: str) -> None:
    with helm.Chart.load(CHART) as chart:  # what `helm install` / `helm template` would say
        with pytest.raises(helm.HelmValuesError, match=complaint):
            chart.render(values=values, name="kafka-py", namespace=NAMESPACE)


def test_values_schema_accepts_every_combination() -> None:
    with helm.Chart.load(CHART) as chart:  # render validates the coalesced values first
        for values in COMBINATIONS.values():
            assert chart.render(values=values, name="kafka-py", namespace=NAMESPACE)


def test_a_broken_template_fails(tmp_path: Path) -> None:
    """The checks above would catch a template broken on purpose: a copy of the charts with
    one `end` removed fails to render and fails lint; one with a misspelt field fails the
    Kubernetes schema validation."""
    packed = {p.name: p.read_bytes() for p in (CHART / "charts").glob("*.tgz")}
    assert packed
    deploy = tmp_path / "deploy"
    shutil.copytree(
        ROOT / "deploy" / "helm", deploy / "helm", ignore=shutil.ignore_patterns("charts")
    )
    shutil.copytree(
        ROOT / "deploy" / "charts", deploy / "charts", ignore=shutil.ignore_patterns("charts")
    )
    sts = deploy / "charts" / "storage" / "templates" / "statefulset.yaml"
    good = sts.read_text()
    sts.write_text(good.replace("        {{- end }}\n", "\n", 1))
    for sub in (deploy / "charts").iterdir():
        if "dependencies:" in (sub / "Chart.yaml").read_text():
            helm.dependency_update(sub, skip_refresh=True)
    helm.dependency_update(deploy / "helm", skip_refresh=True)
    with pytest.raises(helm.HelmError):
        render({}, chart=deploy / "helm")
    report = helm.lint(deploy / "helm", {}, strict=True, with_subcharts=True)
    assert [m for m in report["messages"] if m["severity"] == 3], report

    sts.write_text(good.replace("podManagementPolicy:", "podManagmentPolicy:"))
    helm.dependency_update(deploy / "charts" / "storage", skip_refresh=True)
    helm.dependency_update(deploy / "helm", skip_refresh=True)
    doc = named(render({}, chart=deploy / "helm"), "StatefulSet", "kafka-py-storage")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, KUBE_VERSIONS[0], strict=True)
    # the real chart's packed subcharts are untouched (pytest-xdist: another worker may be
    # rendering them now, so they are compared, never packed again here)
    assert {p.name: p.read_bytes() for p in (CHART / "charts").glob("*.tgz")} == packed


def test_a_change_to_any_component_config_rolls_its_pods() -> None:
    """Each workload's ``checksum/settings`` hashes what its settings ConfigMap holds, so a
    change of a component's ``config`` (or of the controller's autoscaler values, which become
    its settings) changes the pod template and rolls the pods, as ``helm upgrade`` users expect."""
    keys = ("storage", "controller", "gateway", "groupCoordinator", "transactionCoordinator")

    def checksums(docs: list[dict[str, Any]]) -> dict[str, str]:
        return {
            d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"][
                "checksum/settings"
            ]
            for d in workloads(docs)
            if component(d) not in ("zookeeper", "console")
            and d["kind"] in ("Deployment", "StatefulSet")
        }

    base = checksums(render())
    assert {component(d) for d in workloads(render()) if d["metadata"]["name"] in base} >= {
        "storage", "controller", "gateway", "group-coordinator", "transaction-coordinator"
    }  # fmt: skip
    changed = checksums(render({k: {"config": {"log.retention.hours": 1}} for k in keys}))
    assert changed.keys() == base.keys()
    assert [n for n in base if changed[n] == base[n]] == []
    scaled = checksums(render({"controller": {"autoscaler": {"enabled": True, "maxReplicas": 9}}}))
    moved = [n for n in base if scaled[n] != base[n]]
    assert moved and all("controller" in n for n in moved), moved
