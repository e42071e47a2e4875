"""Zone discovery against the suite's emulated Kubernetes API (tests/integration/kube_api: kmock's
KubernetesEmulator over real HTTP): the official client reads the Node, its zone label becomes
broker.rack; every failure is one warning line and the configured fallback. No real API server
runs here."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import structlog

from services.common.settings import ConfigError
from services.common.zone import ZONE_LABEL, ZoneLookupError, read_node_zone, with_discovered_rack
from services.gateway.settings import GatewaySettings
from services.group_coordinator.settings import GroupCoordinatorSettings
from services.storage.settings import StorageSettings
from tests.integration.kube_api import emulated_api

NODES = {
    "node-a": {ZONE_LABEL: "zone-a", "example.com/rack": "rack-7"},
    "node-b": {ZONE_LABEL: "zone-b"},
    "node-nolabel": {"kubernetes.io/hostname": "node-nolabel"},
}


@pytest.fixture
def api_url() -> Iterator[str]:
    with emulated_api(NODES) as url:
        yield url


def _gateway(api_url: str, **extra: str) -> GatewaySettings:
    flags = ["--node.id", "1", "--kafkapy.rack.discovery", "kubernetes"]
    flags += ["--kafkapy.kubernetes.api.url", api_url]
    for key, value in extra.items():
        flags += [f"--{key}", value]
    return GatewaySettings.load(flags, env={})


async def test_zone_label_becomes_the_rack_of_every_service_kind(api_url: str) -> None:
    env = {"NODE_NAME": "node-b"}
    common = ["--kafkapy.rack.discovery", "kubernetes", "--kafkapy.kubernetes.api.url", api_url]
    gw = await with_discovered_rack(_gateway(api_url), env)
    st = await with_discovered_rack(StorageSettings.load(["--broker.id", "0", *common], {}), env)
    gc = await with_discovered_rack(
        GroupCoordinatorSettings.load(["--node.id", "0", *common], {}), env
    )
    assert (gw.broker_rack, st.broker_rack, gc.broker_rack) == ("zone-b",) * 3


async def test_label_key_is_configurable(api_url: str) -> None:
    st = _gateway(api_url, **{"kafkapy.rack.node.label": "example.com/rack"})
    assert (await with_discovered_rack(st, {"NODE_NAME": "node-a"})).broker_rack == "rack-7"


async def test_explicit_rack_wins_and_discovery_is_off_by_default(api_url: str) -> None:
    explicit = _gateway(api_url, **{"broker.rack": "mine"})
    assert (await with_discovered_rack(explicit, {"NODE_NAME": "node-a"})).broker_rack == "mine"
    off = GatewaySettings.load(["--node.id", "1"], env={})
    assert off.rack_discovery == "none"
    assert (await with_discovered_rack(off, {"NODE_NAME": "node-a"})).broker_rack is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("node", "url", "reason"),
    [
        ("node-nolabel", None, "has no label 'topology.kubernetes.io/zone'"),
        ("node-gone", None, "HTTP 404"),
        ("", None, "no node name: set NODE_NAME"),
        ("node-a", "refused", "reading node 'node-a' failed"),
    ],
)
async def test_failure_is_one_warning_and_the_fallback(
    api_url: str, node: str, url: str | None, reason: str
) -> None:
    target = f"http://127.0.0.1:{_free_port()}" if url == "refused" else api_url
    settings = _gateway(target, **{"kafkapy.rack.fallback": "zone-default"})
    with structlog.testing.capture_logs() as logs:
        got = await with_discovered_rack(settings, {"NODE_NAME": node} if node else {})
    assert got.broker_rack == "zone-default"
    warnings = [e for e in logs if e["event"] == "rack_discovery_failed"]
    assert len(warnings) == 1 and reason in warnings[0]["reason"], logs
    # without a fallback: no rack, still started
    bare = await with_discovered_rack(_gateway(target), {"NODE_NAME": node} if node else {})
    assert bare.broker_rack is None


async def test_read_node_zone_is_the_reusable_blocking_reader(api_url: str) -> None:
    import asyncio

    from services.common.zone import kubernetes_api_client

    api = kubernetes_api_client(api_url)
    assert await asyncio.to_thread(read_node_zone, "node-a", ZONE_LABEL, api) == "zone-a"
    with pytest.raises(ZoneLookupError, match="no node name"):
        read_node_zone("", api_client=api)


def test_bad_discovery_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="kafkapy.rack.discovery"):
        GatewaySettings.load(["--node.id", "1", "--kafkapy.rack.discovery", "aws"], env={})
