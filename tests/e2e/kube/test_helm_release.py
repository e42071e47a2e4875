"""deploy/helm on a real Kubernetes cluster (KUBECONFIG), through Helm's own library
(helm-python-sdk) and the official `kubernetes` client: install and wait for every workload,
`helm test`, produce and consume through the gateway Service from a client pod, delete a storage
pod and wait for it back (its data still read), scale the storage StatefulSet 3 -> 4 -> 3,
uninstall. Skipped, with the reason printed, when KUBECONFIG is not set.

Environment: KUBECONFIG (required), KAFKAPY_KUBE_IMAGE (repository:tag the cluster can pull;
default the chart's), KAFKAPY_KUBE_ZOOKEEPER_IMAGE (repository:tag; default the chart's),
KAFKAPY_KUBE_STORAGE_CLASS (default: the cluster's default class).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kube.conftest import SKIP_REASON

KUBECONFIG = os.environ.get("KUBECONFIG", "")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not KUBECONFIG, reason=SKIP_REASON)]

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm"
RELEASE = "kafka-py"
RECORDS = 1000
TOPIC = "kube-e2e"
STORAGE = "kafka-py-storage"
BOOTSTRAP = "kafka-py-gateway:9092"  # the Service, from a pod of the namespace


def _values() -> dict[str, Any]:
    values: dict[str, Any] = {
        "global": {"zookeeper": {"replicas": 1}},
        "storage": {"replicas": 3, "persistence": {"size": "1Gi"}},
        "controller": {"replicas": 2},
        "gateway": {"replicas": 1, "autoscaling": {"enabled": False}},
        "groupCoordinator": {"replicas": 1},
        "zookeeper": {"persistence": {"size": "1Gi"}},
    }
    image = os.environ.get("KAFKAPY_KUBE_IMAGE")
    if image:
        repository, _, tag = image.rpartition(":")
        values["global"]["image"] = {"repository": repository, "tag": tag}
    zk_image = os.environ.get("KAFKAPY_KUBE_ZOOKEEPER_IMAGE")
    if zk_image:
        repository, _, tag = zk_image.rpartition(":")
        values["zookeeper"]["image"] = {"repository": repository, "tag": tag}
    storage_class = os.environ.get("KAFKAPY_KUBE_STORAGE_CLASS")
    if storage_class:
        for part in ("storage", "zookeeper"):
            values[part]["persistence"]["storageClassName"] = storage_class
    return values


def _wait(what: str, done: Callable[[], bool], timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(3)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Any, Any, Any, str]]:
    """The release installed (and waited for) in a fresh namespace; uninstalled after."""
    import helm_python as helm
    from kubernetes import client, config

    subprocess.run([sys.executable, str(ROOT / "scripts" / "chart-deps.py")], check=True)
    namespace = f"kafka-py-e2e-{uuid.uuid4().hex[:6]}"
    config.load_kube_config(KUBECONFIG)
    core, apps = client.CoreV1Api(), client.AppsV1Api()
    cfg = helm.Config(kubeconfig_path=KUBECONFIG, namespace=namespace)
    cfg.install(
        CHART,
        RELEASE,
        _values(),
        namespace=namespace,
        create_namespace=True,
        wait="watcher",
        timeout=900,
    )
    try:
        yield cfg, core, apps, namespace
    finally:
        cfg.uninstall(RELEASE, wait="watcher", timeout=300, ignore_not_found=True)
        core.delete_namespace(namespace)  # PVCs are retained by the StatefulSet's policy


def _client_pod(core: Any, namespace: str, script: str) -> str:
    """Run ``script`` in a pod of the kafka-py image next to the release; its log."""
    from kubernetes import client

    sts = client.AppsV1Api().read_namespaced_stateful_set(STORAGE, namespace)
    template = sts.spec.template.spec
    name = f"client-{uuid.uuid4().hex[:6]}"
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={"app.kubernetes.io/name": "kafka-py", "app.kubernetes.io/instance": RELEASE},
        ),
        spec=client.V1PodSpec(
            restart_policy="Never",
            automount_service_account_token=False,
            security_context=template.security_context,
            containers=[
                client.V1Container(
                    name="client",
                    image=template.containers[0].image,
                    command=["/bin/sh", "-c", script],
                    security_context=template.containers[0].security_context,
                    volume_mounts=[client.V1VolumeMount(name="tmp", mount_path="/tmp")],
                )
            ],
            volumes=[client.V1Volume(name="tmp", empty_dir=client.V1EmptyDirVolumeSource())],
        ),
    )
    core.create_namespaced_pod(namespace, pod)

    def finished() -> bool:
        phase = core.read_namespaced_pod(name, namespace).status.phase
        return bool(phase in ("Succeeded", "Failed"))

    _wait(f"client pod {name}", finished, 300)
    log = str(core.read_namespaced_pod_log(name, namespace))
    phase = core.read_namespaced_pod(name, namespace).status.phase
    core.delete_namespaced_pod(name, namespace)
    assert phase == "Succeeded", log
    return log


def _read_back(core: Any, namespace: str) -> None:
    """Every record produced is read back once, through the gateway Service."""
    log = _client_pod(
        core,
        namespace,
        f"kafka-py console-consumer --bootstrap-server {BOOTSTRAP} --topic {TOPIC} "
        f"--from-beginning --max-messages {RECORDS} --timeout-ms 60000 | sort -un | wc -l",
    )
    assert log.split()[-1] == str(RECORDS), log


def _ready_storage(apps: Any, namespace: str, replicas: int) -> Callable[[], bool]:
    def check() -> bool:
        status = apps.read_namespaced_stateful_set(STORAGE, namespace).status
        return bool(status.ready_replicas == replicas == status.replicas)

    return check


def test_install_test_produce_consume_fail_scale_uninstall(cluster: Any) -> None:
    cfg, core, apps, namespace = cluster
    assert _ready_storage(apps, namespace, 3)()  # install waited for every workload

    result = cfg.test(RELEASE, timeout=600, logs=True)
    assert "produced and consumed" in str(result.get("logs", "")), result

    _client_pod(
        core,
        namespace,
        f"kafka-py topics create --bootstrap-server {BOOTSTRAP} --topic {TOPIC} "
        f"--partitions 6 --replication-factor 3 && seq 1 {RECORDS} | "
        f"kafka-py console-producer --bootstrap-server {BOOTSTRAP} --topic {TOPIC} --acks all",
    )
    _read_back(core, namespace)

    # a storage pod deleted comes back (same name, same volume) and the data is all there
    victim = f"{STORAGE}-1"
    old_uid = core.read_namespaced_pod(victim, namespace).metadata.uid
    core.delete_namespaced_pod(victim, namespace)

    def replaced() -> bool:
        try:
            pod = core.read_namespaced_pod(victim, namespace)
        except Exception:  # noqa: BLE001 - not recreated yet
            return False
        ready = [c for c in pod.status.conditions or [] if c.type == "Ready"]
        return bool(pod.metadata.uid != old_uid and ready and ready[0].status == "True")

    _wait(f"{victim} back and ready", replaced)
    _read_back(core, namespace)

    # scale the StatefulSet up and back down (the new ordinal holds no replica: drain-free)
    for replicas in (4, 3):
        apps.patch_namespaced_stateful_set_scale(
            STORAGE, namespace, {"spec": {"replicas": replicas}}
        )
        _wait(f"{replicas} ready storage pods", _ready_storage(apps, namespace, replicas))
    _read_back(core, namespace)
