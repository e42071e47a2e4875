"""Listener settings, principal mapping rules and certificate subjects as Kafka reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.settings import ConfigError
from services.gateway.settings import GatewaySettings
from services.gateway.tls import map_principal, parse_mapping_rules, subject_dn


def _load(*flags: str) -> GatewaySettings:
    return GatewaySettings.load(["--node.id", "1", *flags], env={})


def test_several_listeners_with_a_protocol_map_and_per_listener_settings() -> None:
    st = _load(
        "--listeners", "PLAINTEXT://127.0.0.1:0,CLIENTS://:9093",
        "--listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CLIENTS:SASL_SSL",
        "--advertised.listeners", "CLIENTS://gw.example:19093",
        "--listener.name.clients.scram-sha-256.sasl.jaas.config", "x",
        "--override", "listener.name.clients.ssl.client.auth=required",
    )  # fmt: skip
    assert [(x.name, x.protocol, x.port) for x in st.kafka_listeners] == [
        ("PLAINTEXT", "PLAINTEXT", 0),
        ("CLIENTS", "SASL_SSL", 9093),
    ]
    assert st.listener.port == 0 and st.advertised(4242).port == 4242
    assert st.listener_config("CLIENTS", "ssl.client.auth") == "required"
    assert st.listener_config("PLAINTEXT", "ssl.client.auth") == "none"


def test_per_listener_settings_from_the_environment() -> None:
    """KAFKAPY_LISTENER_NAME_<L>_<PROP> (how the chart passes Secrets); flags still win."""
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="pw";'
    env = {
        "KAFKAPY_LISTENERS": "INTERNAL://:9092,SASL_SSL://:9094",
        "KAFKAPY_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,SASL_SSL:SASL_SSL",
        "KAFKAPY_LISTENER_NAME_SASL_SSL_PLAIN_SASL_JAAS_CONFIG": jaas,
        "KAFKAPY_LISTENER_NAME_SASL_SSL_SCRAM_SHA_512_SASL_JAAS_CONFIG": "x",
        "KAFKAPY_LISTENER_NAME_SASL_SSL_SSL_CLIENT_AUTH": "requested",
        "KAFKAPY_LISTENER_NAME_INTERNAL_SASL_ENABLED_MECHANISMS": "PLAIN",
    }
    st = GatewaySettings.load(
        ["--node.id", "1", "--listener.name.internal.sasl.enabled.mechanisms", "SCRAM-SHA-256"],
        env=env,
    )
    assert st.listener_config("SASL_SSL", "plain.sasl.jaas.config") == jaas
    assert st.listener_config("SASL_SSL", "scram-sha-512.sasl.jaas.config") == "x"
    assert st.listener_config("SASL_SSL", "ssl.client.auth") == "requested"
    assert st.listener_config("INTERNAL", "sasl.enabled.mechanisms") == "SCRAM-SHA-256"
    with pytest.raises(ConfigError, match="unknown setting KAFKAPY_LISTENER_NAME_X_SSL_FOO"):
        GatewaySettings.load(["--node.id", "1"], env={"KAFKAPY_LISTENER_NAME_X_SSL_FOO": "1"})


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--listeners", "FOO://h:1"], "listener FOO has no entry"),
        (["--listeners", "PLAINTEXT://h:1,PLAINTEXT://h:2"], "named twice"),
        (["--listener.security.protocol.map", "X:TLS"], "listener.security.protocol.map"),
        (["--listener.name.x.bogus", "1"], "unknown setting listener.name.x.bogus"),
        (["--ssl.client.auth", "maybe"], "ssl.client.auth"),
        (["--ssl.keystore.type", "JKS"], "only PEM"),
        (["--sasl.enabled.mechanisms", "GSSAPI"], "unsupported mechanism"),
    ],
)
def test_bad_settings_are_one_readable_line(flags: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _load(*flags)
    assert "\n" not in str(err.value)


def test_principal_mapping_rules_as_kafka_documents_them() -> None:
    rules = parse_mapping_rules(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT"
    )
    assert map_principal(rules, "CN=kafka1,OU=ServiceUsers,O=Org") == "kafka1"
    assert map_principal(rules, "CN=Duke,OU=JavaSoft,O=Sun,L=Cu,ST=CA,C=US") == "duke@javasoft"
    assert map_principal(rules, "O=x,CN=abc") == "ABC"
    assert map_principal(rules, "O=x") == "O=x"
    with pytest.raises(ValueError, match="no ssl.principal.mapping.rules"):
        map_principal(parse_mapping_rules("RULE:^CN=a$/a/"), "CN=b")
    with pytest.raises(ConfigError):
        parse_mapping_rules("RULE:broken")


def test_subject_in_rfc2253_order_with_escapes() -> None:
    cert = {
        "subject": (
            (("countryName", "US"),),
            (("organizationName", "Org"),),
            (("commonName", "client, one"),),
        )
    }
    assert subject_dn(cert) == "CN=client\\, one,O=Org,C=US"
    assert subject_dn(None) is None and subject_dn({}) is None


def test_tls_listener_needs_its_files(tmp_path: Path) -> None:
    from services.gateway.security import listener_security

    def build(*flags: str) -> None:
        st = _load("--listeners", "SSL://127.0.0.1:0", *flags)
        listener_security(st, st.kafka_listeners[0])

    with pytest.raises(ConfigError, match="needs a keystore"):
        build()
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ConfigError, match="ssl.keystore.location: listener SSL"):
        build("--ssl.keystore.location", str(bad))
    with pytest.raises(ConfigError, match="needs a truststore"):
        build("--ssl.keystore.location", str(bad), "--ssl.client.auth", "required")
