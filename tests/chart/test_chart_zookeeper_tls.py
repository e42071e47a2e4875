"""TLS to ZooKeeper in the chart (global.zookeeper.tls): the bundled ensemble serves clients on
its secureClientPort only with client certificates required, and every kafka-py service
connects with Kafka's zookeeper.ssl.* settings from the Secret; certificates made as
docs/operations.md says pass the services' own hostname check for every host of the connect
string (a real TLS handshake in memory)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from chart_support import KUBE_VERSIONS, NAMESPACE, component, named, of_kind, pod_spec
from chart_support import render as render_chart

from services.cli.certs import service_files, write_keystore
from services.cli.main import main
from services.common.settings import ServiceSettings
from services.common.zk.security import zk_security
from services.common.zk.server import ServerTls

TLS_ON = {"global": {"zookeeper": {"tls": {"enabled": True}}}}
SECRET_DIR = "/etc/kafka-py/zookeeper-tls"


def _env(docs: list[dict[str, Any]], doc: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for ref in pod_spec(doc)["containers"][0].get("envFrom", []):
        env.update(named(docs, "ConfigMap", ref["configMapRef"]["name"])["data"])
    return env


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, host: str) -> str | None:
    """None when a client dialling ``host`` completes a handshake with ``server``, else why."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(c_in, c_out, server_hostname=host)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for side, obj in (("client", c), ("server", s)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLError as exc:
                    return f"{side}: {exc}"
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return None
    return "no handshake"


@pytest.mark.parametrize("release", ["kafka-py", "prod"])
def test_zookeeper_serves_tls_only_and_every_service_connects_with_it(
    tmp_path: Path, release: str
) -> None:
    docs = render_chart(TLS_ON, release=release)
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSIONS[-1], strict=True)
    base = "kafka-py" if release == "kafka-py" else f"{release}-kafka-py"
    secret = f"{base}-zookeeper-tls"

    (zk,) = [d for d in of_kind(docs, "StatefulSet") if component(d) == "zookeeper"]
    c = pod_spec(zk)["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    extra = env["ZOO_CFG_EXTRA"].split(" ")
    assert "secureClientPort=2182" in extra and "ssl.clientAuth=need" in extra
    assert "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory" in extra
    servers = env["ZOO_SERVERS"].split(" ")
    assert len(servers) == 3 and not [s for s in servers if ";" in s]  # no plaintext port
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["client"] == 2182
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "tls"]
    (vol,) = [v for v in pod_spec(zk)["volumes"] if v["name"] == "tls"]
    assert vol["secret"]["secretName"] == secret and mount["readOnly"] is True
    files = {f"{mount['mountPath']}/{i['path']}" for i in vol["secret"]["items"]}
    stores = [e.split("=", 1)[1] for e in extra if e.split("=")[0].endswith("Store.location")]
    assert files == set(stores)
    headless = named(docs, "Service", f"{base}-zookeeper-headless")
    assert {"name": "client", "port": 2182, "targetPort": "client"} in headless["spec"]["ports"]

    # the Secret as docs/operations.md makes it: certs init + one keystore file per side
    certs = tmp_path / "certs"
    argv = ["certs", "init", "--dir", str(certs), "--services", "zookeeper,zookeeper-client"]
    assert main([*argv, "--release", release, "--namespace", NAMESPACE]) == 0
    for name in ("zookeeper", "zookeeper-client"):
        write_keystore(service_files(certs, name), certs / f"{name}-keystore.pem")
    server = ServerTls(
        certs / "zookeeper-keystore.pem", certs / "ca.pem", certs / "zookeeper-client-keystore.pem"
    )
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(server.keystore)
    server_ctx.load_verify_locations(server.truststore)
    server_ctx.verify_mode = ssl.CERT_REQUIRED  # ssl.clientAuth=need

    checked = set()
    for doc in of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet"):
        if component(doc) == "zookeeper":
            continue
        what = doc["metadata"]["name"]
        env = _env(docs, doc)
        settings = ServiceSettings.load([], env=env)
        assert settings.zookeeper_ssl_client_enable, what
        assert settings.zookeeper_ssl_endpoint_identification_algorithm == "HTTPS"
        hosts = [h.rsplit(":", 1) for h in settings.zookeeper_connect.split("/")[0].split(",")]
        assert len(hosts) == 3 and {port for _, port in hosts} == {"2182"}, what
        c = pod_spec(doc)["containers"][0]
        (mount,) = [m for m in c["volumeMounts"] if m["name"] == "zookeeper-tls"]
        (vol,) = [v for v in pod_spec(doc)["volumes"] if v["name"] == "zookeeper-tls"]
        assert mount["readOnly"] is True and mount["mountPath"] == SECRET_DIR
        assert vol["secret"]["secretName"] == secret
        mounted = {f"{SECRET_DIR}/{i['path']}": i["key"] for i in vol["secret"]["items"]}
        assert mounted == {  # the client's files only, never the ensemble's key
            settings.zookeeper_ssl_keystore_location: "zookeeper-client-keystore.pem",
            settings.zookeeper_ssl_truststore_location: "ca.pem",
        }, what
        # the service's own TLS client on the Secret's files: every host it dials is named
        local = {k: v.replace(SECRET_DIR, str(certs)) for k, v in env.items()}
        tls = zk_security(ServiceSettings.load([], env=local)).tls
        assert tls is not None and tls.check_hostname
        for host, _ in hosts:
            assert _handshake(server_ctx, tls.context(), host) is None, (what, host)
        # another release's ZooKeeper is refused by name
        assert "Hostname mismatch" in (_handshake(server_ctx, tls.context(), "zk.other") or "")
        checked.add(component(doc))
    assert {"storage", "controller", "gateway", "group-coordinator", "console"} <= checked


def test_plaintext_by_default_and_hostname_check_can_be_turned_off() -> None:
    docs = render_chart({})
    (zk,) = [d for d in of_kind(docs, "StatefulSet") if component(d) == "zookeeper"]
    env = {e["name"]: e["value"] for e in pod_spec(zk)["containers"][0]["env"]}
    assert "ZOO_CFG_EXTRA" not in env and all(
        s.endswith(";2181") for s in env["ZOO_SERVERS"].split()
    )
    for doc in of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet"):
        if component(doc) != "zookeeper":
            assert not ServiceSettings.load([], env=_env(docs, doc)).zookeeper_ssl_client_enable
            assert "zookeeper-tls" not in str(pod_spec(doc)["volumes"])
    off = {"global": {"zookeeper": {"tls": {"enabled": True, "endpointIdentification": False}}}}
    docs = render_chart(off)
    (gateway,) = [d for d in of_kind(docs, "Deployment") if component(d) == "gateway"]
    settings = ServiceSettings.load([], env=_env(docs, gateway))
    assert settings.zookeeper_ssl_endpoint_identification_algorithm == ""
