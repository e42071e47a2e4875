"""Internal mutual TLS in the chart (global.internalTls): the Secret `kafka-py certs init
--kubernetes` writes is the one the pods mount, and every gRPC server advertises a DNS name its
certificate carries, checked by a real gRPC TLS handshake with the name a peer would dial."""

from __future__ import annotations

import queue
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import kubernetes_validate
import pytest
import yaml
from chart_support import KUBE_VERSIONS, NAMESPACE, component, expand_refs, of_kind, pod_spec
from chart_support import render as render_chart

from services.cli.main import main
from services.common.internal_tls import InternalTls, TlsFiles

GRPC_SERVERS = ("storage", "controller", "group-coordinator", "transaction-coordinator")
TLS_ON = {"global": {"internalTls": {"enabled": True}}}


def _tls(directory: Path, service: str) -> InternalTls:
    return InternalTls(
        TlsFiles(
            str(directory / f"{service}.pem"),
            str(directory / f"{service}-key.pem"),
            str(directory / "ca.pem"),
        )
    )


def _handshake(port: int, client: InternalTls, name: str) -> bool:
    """Whether a channel that dials ``name`` (the gRPC target name the services check) with
    ``client``'s certificate completes its TLS handshake with the server on ``port``."""
    channel = grpc.secure_channel(
        f"127.0.0.1:{port}",
        client.channel_credentials(),
        options=[("grpc.ssl_target_name_override", name)],
    )
    states: queue.Queue[grpc.ChannelConnectivity] = queue.Queue()
    channel.subscribe(states.put, try_to_connect=True)
    try:
        while True:
            state = states.get(timeout=15)
            if state is grpc.ChannelConnectivity.READY:
                return True
            if state is grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                return False
    finally:
        channel.close()


def _advertised_host(docs: list[dict[str, Any]], doc: dict[str, Any]) -> str:
    c = pod_spec(doc)["containers"][0]
    value = c["args"][c["args"].index("--advertised.listeners") + 1]
    env = {"POD_NAME": f"{doc['metadata']['name']}-0", "POD_NAMESPACE": NAMESPACE}
    host = expand_refs(value, env).split("://")[-1].rsplit(":", 1)[0]
    assert "$(" not in host and host.endswith(f".{NAMESPACE}.svc.cluster.local"), host
    return host


@pytest.mark.parametrize("release", ["kafka-py", "prod"])
def test_advertised_names_are_covered_by_the_certificates_of_certs_init(
    tmp_path: Path, release: str
) -> None:
    """Release "prod" names its objects prod-kafka-py-*: certs init follows the chart's rule."""
    certs = tmp_path / "certs"
    argv = ["certs", "init", "--dir", str(certs), "--kubernetes", "--release", release]
    assert main([*argv, "--namespace", NAMESPACE]) == 0
    secret = yaml.safe_load((certs / "internal-tls-secret.yaml").read_text())
    kubernetes_validate.validate(secret, KUBE_VERSIONS[-1], strict=True)
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert "ca-key.pem" not in secret["data"]  # the CA's key stays with the operator
    assert (certs / "internal-tls-secret.yaml").stat().st_mode & 0o777 == 0o600

    docs = render_chart(TLS_ON, release=release)
    services = {d["metadata"]["name"]: d for d in of_kind(docs, "Service")}
    gateway = _tls(certs, "gateway")  # the client side, as the gateways dial every server
    checked = set()
    for doc in (d for d in docs if d["kind"] in ("Deployment", "StatefulSet")):
        vols = [v for v in pod_spec(doc)["volumes"] if v["name"] == "internal-tls"]
        if vols:  # the Secret certs init made, with the keys the volume picks
            (vol,) = vols
            assert vol["secret"]["secretName"] == secret["metadata"]["name"]
            assert {i["key"] for i in vol["secret"]["items"]} <= set(secret["data"])
        if component(doc) not in GRPC_SERVERS:
            continue
        what = doc["metadata"]["name"]
        assert doc["kind"] == "StatefulSet", what  # pods get DNS names only as a StatefulSet's
        headless = services[doc["spec"]["serviceName"]]
        assert headless["spec"]["clusterIP"] == "None", what
        assert headless["spec"]["publishNotReadyAddresses"] is True, what
        labels = doc["spec"]["template"]["metadata"]["labels"]
        assert headless["spec"]["selector"].items() <= labels.items(), what
        host = _advertised_host(docs, doc)
        assert host.startswith(f"{what}-0.{headless['metadata']['name']}."), host

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        port = server.add_secure_port(
            "127.0.0.1:0", _tls(certs, component(doc)).server_credentials()
        )
        server.start()
        try:
            assert _handshake(port, gateway, host), f"{what}: its certificate does not name {host}"
            # the wildcard is per component: another component's pod name is refused, and so
            # is a pod IP (why the pods no longer advertise theirs)
            other = host.replace(f"-{component(doc)}-headless.", "-gateway-headless.")
            assert other != host
            assert not _handshake(port, gateway, other), other
            assert not _handshake(port, gateway, "10.1.2.3"), what
        finally:
            server.stop(None)
        checked.add(component(doc))
    assert checked == set(GRPC_SERVERS)


def test_internal_tls_off_changes_nothing() -> None:
    """Off (the default): Deployments advertising their pod IP, no headless Services for them,
    no internal-tls volume anywhere."""
    docs = render_chart({})
    for doc in docs:
        if doc["kind"] == "Service":
            assert (
                component(doc) not in GRPC_SERVERS[1:] or "headless" not in doc["metadata"]["name"]
            )
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        assert not [v for v in pod_spec(doc)["volumes"] if v["name"] == "internal-tls"]
        if component(doc) in GRPC_SERVERS[1:]:
            assert doc["kind"] == "Deployment"
            args = pod_spec(doc)["containers"][0]["args"]
            assert args[args.index("--advertised.listeners") + 1].startswith("$(POD_IP):")
