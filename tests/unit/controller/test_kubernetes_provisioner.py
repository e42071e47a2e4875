"""The Kubernetes node provisioner (official ``kubernetes`` client) against the suite's one
emulated API server (tests/integration/kube_api: kmock's KubernetesEmulator over real HTTP, plus
the StatefulSet scale subresource and injected faults). No real Kubernetes API server runs in
this suite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from services.controller.provisioners.base import ProvisionerError
from services.controller.provisioners.kubernetes import KubernetesConfig, KubernetesProvisioner
from tests.integration.kube_api import ZONE_LABEL, KubeApi

NS, STS = "data", "kafka-py-storage"
SCALE = f"/apis/apps/v1/namespaces/{NS}/statefulsets/{STS}/scale"


@pytest.fixture
def api() -> Iterator[KubeApi]:
    with KubeApi(hang_s=0.6) as api:
        api.add_statefulset(NS, STS, 3)
        for i, zone in enumerate(["zone-a", "zone-b", "zone-c"]):
            add_storage_pod(api, i, zone)
        yield api


def add_storage_pod(api: KubeApi, ordinal: int, zone: str | None, ready: bool = True) -> None:
    node = f"node-{ordinal}"
    api.add_node(node, {"kubernetes.io/hostname": node, **({ZONE_LABEL: zone} if zone else {})})
    api.add_pod(NS, f"{STS}-{ordinal}", node, ready, labels={"app": "storage"})


def provisioner(api: KubeApi, **kw: Any) -> KubernetesProvisioner:
    settings: dict[str, Any] = {"namespace": NS, "statefulset": STS, "api_url": api.url}
    settings |= {"timeout_s": 0.3, "backoff_s": 0.01, "pod_selector": "app=storage"}
    return KubernetesProvisioner(KubernetesConfig(**(settings | kw)))


def replicas(api: KubeApi) -> int:
    return int(api.statefulset(NS, STS)["spec"]["replicas"])


def patches(api: KubeApi) -> list[dict[str, Any]]:
    return [r for r in api.requests if r["method"] == "PATCH"]


def retry_logs(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "kubernetes api call failed, retrying"]


async def test_reads_zones_from_node_labels(api: KubeApi) -> None:
    add_storage_pod(api, 3, None, ready=False)
    api.add_pod(NS, "zookeeper-0", "node-0")  # not an ordinal of the StatefulSet
    p = provisioner(api)
    try:
        nodes = await p.nodes()
    finally:
        await p.close()
    assert [(n.ordinal, n.zone, n.ready, n.name) for n in nodes] == [
        (0, "zone-a", True, f"{STS}-0"),
        (1, "zone-b", True, f"{STS}-1"),
        (2, "zone-c", True, f"{STS}-2"),
        (3, None, False, f"{STS}-3"),
    ]
    pods = [r for r in api.requests if r["path"] == f"/api/v1/namespaces/{NS}/pods"]
    assert pods[0]["query"] == {"labelSelector": "app=storage"}
    assert {r["path"] for r in api.requests if r["path"].startswith("/api/v1/nodes/")} == {
        f"/api/v1/nodes/node-{i}" for i in range(4)
    }


async def test_zone_label_key_is_configurable(api: KubeApi) -> None:
    api.add_node("node-0", {"example.com/zone": "custom"})
    p = provisioner(api, zone_label="example.com/zone")
    try:
        nodes = await p.nodes()
    finally:
        await p.close()
    assert [n.zone for n in nodes] == ["custom", None, None]


async def test_scale_up_patches_the_scale_subresource(api: KubeApi) -> None:
    p = provisioner(api)
    try:
        assert await p.current() == 3
        await p.scale_to(5, hosting={0, 1, 2})
        assert await p.current() == 5
    finally:
        await p.close()
    sent = patches(api)
    assert len(sent) == 1
    assert sent[0]["path"] == SCALE
    assert sent[0]["content_type"] == "application/merge-patch+json"
    assert sent[0]["body"] == {"spec": {"replicas": 5}, "metadata": {"resourceVersion": "1"}}
    assert replicas(api) == 5


async def test_refuses_to_scale_down_while_the_highest_ordinal_hosts_replicas(
    api: KubeApi,
) -> None:
    p = provisioner(api)
    try:
        with pytest.raises(ProvisionerError) as err:
            await p.scale_to(2, hosting={0, 1, 2})
        assert str(err.value) == (
            "refusing to scale storage from 3 to 2 nodes: node 2 still hosts replicas "
            "(drain them first)"
        )
        assert not patches(api)
        assert replicas(api) == 3
        await p.scale_to(2, hosting={0, 1})  # drained: allowed
    finally:
        await p.close()
    assert replicas(api) == 2


async def test_conflict_reads_the_scale_again_and_retries(api: KubeApi) -> None:
    api.race_next_patch()  # another writer changes the scale between our read and patch
    p = provisioner(api)
    try:
        with structlog.testing.capture_logs() as logs:
            await p.scale_to(4, hosting=set())
    finally:
        await p.close()
    assert [r["body"]["metadata"]["resourceVersion"] for r in patches(api)] == ["1", "2"]
    assert replicas(api) == 4
    (retry,) = retry_logs(logs)
    assert retry["status"] == 409
    assert retry["hint"].startswith("conflict: the StatefulSet's scale changed underneath")
    assert "the object has been modified" in retry["detail"]


@pytest.mark.parametrize("fault", [403, 404, 500, "hang"])
async def test_transient_errors_are_retried_with_logs(api: KubeApi, fault: int | str) -> None:
    api.fail("PATCH", SCALE, fault, fault)
    # the short request timeout only where the fault is a hang: under a loaded CI machine a
    # healthy call to the loopback API can take longer than 0.3 s, and its (correct) retry
    # would count here
    p = provisioner(api, **({} if fault == "hang" else {"timeout_s": 10.0}))
    try:
        with structlog.testing.capture_logs() as logs:
            await p.scale_to(4, hosting=set())
    finally:
        await p.close()
    assert replicas(api) == 4
    assert len(patches(api)) == 3
    # the injected faults are on the scale PATCH: its two retries (a read that timed out under
    # load in the hang case is retried too, rightly, and logged as its own action)
    retries = [e for e in retry_logs(logs) if e["action"].startswith("scale StatefulSet")]
    assert len(retries) == 2, logs
    assert [e["attempt"] for e in retries] == [1, 2]
    assert all(e["action"] == "scale StatefulSet kafka-py-storage to 4" for e in retries)
    if fault == "hang":
        assert all(e["status"] is None and "timed out after 0.3s" in e["detail"] for e in retries)
    else:
        assert all(e["status"] == fault for e in retries)
    if fault == 403:
        assert "needs get/patch on statefulsets/scale" in retries[0]["hint"]


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        (
            403,
            "HTTP 403: injected 403 (forbidden: the controller's service account needs get/patch",
        ),
        (404, "HTTP 404: injected 404 (not found: check the namespace and StatefulSet name)"),
        ("hang", "timed out after 0.3s"),
    ],
)
async def test_persistent_errors_end_in_one_readable_line(
    api: KubeApi, fault: int | str, says: str
) -> None:
    api.fail("GET", SCALE, *([fault] * 3))
    p = provisioner(api, attempts=3)
    try:
        with pytest.raises(ProvisionerError) as err:
            await p.current()
    finally:
        await p.close()
    message = str(err.value)
    assert message.startswith("read the StatefulSet scale: ")
    assert says in message and message.endswith("after 3 attempts")
    assert "\n" not in message
    assert len([r for r in api.requests if r["path"] == SCALE]) == 3  # no hidden retries


async def test_a_node_read_is_retried_like_the_other_calls(api: KubeApi) -> None:
    api.fail("GET", "/api/v1/nodes/node-1", 403, "hang")
    p = provisioner(api)
    try:
        with structlog.testing.capture_logs() as logs:
            nodes = await p.nodes()
    finally:
        await p.close()
    assert [n.zone for n in nodes] == ["zone-a", "zone-b", "zone-c"]
    assert [(e["action"], e["status"]) for e in retry_logs(logs)] == [
        ("read node node-1", 403),
        ("read node node-1", None),
    ]


async def test_missing_statefulset_is_a_404_with_the_hint(api: KubeApi) -> None:
    p = provisioner(api, attempts=2, statefulset="nope")
    try:
        with pytest.raises(ProvisionerError, match=r"HTTP 404: .*not found.*after 2 attempts"):
            await p.current()
    finally:
        await p.close()


async def test_bad_request_is_not_retried(api: KubeApi) -> None:
    api.fail("PATCH", SCALE, 422)
    p = provisioner(api)
    try:
        with pytest.raises(ProvisionerError, match="HTTP 422: injected 422"):
            await p.scale_to(4, hosting=set())
    finally:
        await p.close()
    assert len(patches(api)) == 1
    assert replicas(api) == 3


async def test_remove_takes_only_the_highest_ordinals(api: KubeApi) -> None:
    api.set_replicas(NS, STS, 5)
    p = provisioner(api)
    try:
        with pytest.raises(ProvisionerError) as err:
            await p.remove([3], hosting=set())
        assert str(err.value) == (
            "a StatefulSet of 5 removes only its highest ordinals: remove 4 (in that order), not 3"
        )
        await p.remove([3, 4], hosting={0, 1, 2})
    finally:
        await p.close()
    assert replicas(api) == 3
