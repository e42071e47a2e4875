"""The Kubernetes node provisioner against an emulated API server (tests/unit/controller/kube_fake:
a small HTTP fake of exactly the endpoints it uses; no real Kubernetes API server runs in this
suite)."""

from __future__ import annotations

import pytest

from services.controller.provisioners.base import ProvisionerError
from services.controller.provisioners.kubernetes import KubernetesConfig, KubernetesProvisioner
from tests.unit.controller.kube_fake import KubeFake


@pytest.fixture
def fake() -> KubeFake:
    with KubeFake("data", "kafka-py-storage", 3) as f:
        for i, zone in enumerate(["zone-a", "zone-b", "zone-c"]):
            f.add_pod(i, f"node-{i}", zone)
        yield f


def provisioner(fake: KubeFake, **kw: object) -> KubernetesProvisioner:
    config = KubernetesConfig(
        namespace="data",
        statefulset="kafka-py-storage",
        api_url=fake.url,
        token="secret-token",
        timeout_s=0.3,
        backoff_s=0.01,
        pod_selector="app=storage",
        **kw,  # type: ignore[arg-type]
    )
    return KubernetesProvisioner(config)


async def test_reads_zones_from_node_labels(fake: KubeFake) -> None:
    fake.add_pod(3, "node-3", None, ready=False)
    p = provisioner(fake)
    try:
        nodes = await p.nodes()
    finally:
        await p.close()
    assert [(n.ordinal, n.zone, n.ready) for n in nodes] == [
        (0, "zone-a", True),
        (1, "zone-b", True),
        (2, "zone-c", True),
        (3, None, False),
    ]
    pods = [r for r in fake.requests if r["path"] == "/api/v1/namespaces/data/pods"]
    assert pods[0]["query"] == {"labelSelector": ["app=storage"]}
    assert pods[0]["authorization"] == "Bearer secret-token"
    assert {r["path"] for r in fake.requests if r["path"].startswith("/api/v1/nodes/")} == {
        f"/api/v1/nodes/node-{i}" for i in range(4)
    }


async def test_zone_label_key_is_configurable(fake: KubeFake) -> None:
    fake.node_labels["node-0"]["example.com/zone"] = "custom"
    p = provisioner(fake, zone_label="example.com/zone")
    try:
        nodes = await p.nodes()
    finally:
        await p.close()
    assert [n.zone for n in nodes] == ["custom", None, None]


async def test_scale_up_patches_the_scale_subresource(fake: KubeFake) -> None:
    p = provisioner(fake)
    try:
        assert await p.current() == 3
        await p.scale_to(5, hosting={0, 1, 2})
        assert await p.current() == 5
    finally:
        await p.close()
    patches = [r for r in fake.requests if r["method"] == "PATCH"]
    assert len(patches) == 1
    assert patches[0]["path"] == "/apis/apps/v1/namespaces/data/statefulsets/kafka-py-storage/scale"
    assert patches[0]["content_type"] == "application/merge-patch+json"
    assert patches[0]["body"] == {"spec": {"replicas": 5}, "metadata": {"resourceVersion": "1"}}
    assert fake.replicas == 5


async def test_refuses_to_scale_down_while_the_highest_ordinal_hosts_replicas(
    fake: KubeFake,
) -> None:
    p = provisioner(fake)
    try:
        with pytest.raises(ProvisionerError) as err:
            await p.scale_to(2, hosting={0, 1, 2})
        assert str(err.value) == (
            "refusing to scale storage from 3 to 2 nodes: node 2 still hosts replicas "
            "(drain them first)"
        )
        assert not [r for r in fake.requests if r["method"] == "PATCH"]
        assert fake.replicas == 3
        await p.scale_to(2, hosting={0, 1})  # drained: allowed
    finally:
        await p.close()
    assert fake.replicas == 2


async def test_conflict_reads_the_scale_again_and_retries(
    fake: KubeFake, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.race_next_patch = True  # another writer changes the scale between our read and patch
    p = provisioner(fake)
    try:
        await p.scale_to(4, hosting=set())
    finally:
        await p.close()
    patches = [r for r in fake.requests if r["method"] == "PATCH"]
    assert [r["body"]["metadata"]["resourceVersion"] for r in patches] == ["1", "2"]
    assert fake.replicas == 4
    out = capsys.readouterr()
    assert "conflict: the StatefulSet's scale changed underneath" in out.out + out.err


@pytest.mark.parametrize("status", [403, 404, 500, "hang"])
async def test_transient_errors_are_retried_with_logs(
    fake: KubeFake, status: int | str, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.fail("PATCH", fake.scale_path, status, status)
    p = provisioner(fake)
    try:
        await p.scale_to(4, hosting=set())
    finally:
        await p.close()
    assert fake.replicas == 4
    patches = [r for r in fake.requests if r["method"] == "PATCH"]
    assert len(patches) == 3
    out = capsys.readouterr()
    lines = [ln for ln in (out.out + out.err).splitlines() if "retrying" in ln]
    assert len(lines) == 2, out
    assert all("scale StatefulSet kafka-py-storage to 4" in ln for ln in lines)


@pytest.mark.parametrize(
    ("status", "says"),
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
    fake: KubeFake, status: int | str, says: str
) -> None:
    fake.fail("GET", fake.scale_path, *([status] * 3))
    p = provisioner(fake, attempts=3)
    try:
        with pytest.raises(ProvisionerError) as err:
            await p.current()
    finally:
        await p.close()
    message = str(err.value)
    assert message.startswith("read the StatefulSet scale: ")
    assert says in message and message.endswith("after 3 attempts")
    assert "\n" not in message


async def test_bad_request_is_not_retried(fake: KubeFake) -> None:
    fake.fail("PATCH", fake.scale_path, 422)
    p = provisioner(fake)
    try:
        with pytest.raises(ProvisionerError, match="HTTP 422: injected 422"):
            await p.scale_to(4, hosting=set())
    finally:
        await p.close()
    assert len([r for r in fake.requests if r["method"] == "PATCH"]) == 1
    assert fake.replicas == 3


async def test_remove_takes_only_the_highest_ordinals(fake: KubeFake) -> None:
    fake.replicas = 5
    p = provisioner(fake)
    try:
        with pytest.raises(ProvisionerError) as err:
            await p.remove([3], hosting=set())
        assert str(err.value) == (
            "a StatefulSet of 5 removes only its highest ordinals: remove 4 (in that order), not 3"
        )
        await p.remove([3, 4], hosting={0, 1, 2})
    finally:
        await p.close()
    assert fake.replicas == 3
