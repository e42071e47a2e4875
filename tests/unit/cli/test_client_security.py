"""A Kafka tool's --command-config security properties in librdkafka's names (client_security)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cli.client_security import jaas_credentials, security_properties
from services.cli.common import CliError

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_jaas_credentials_of_plain_and_scram() -> None:
    assert jaas_credentials(f'{SCRAM} required username="alice" password="a;b \\"c\\"";') == (
        "alice",
        'a;b "c"',
    )
    assert jaas_credentials(f"{PLAIN} required\n  username=bob\n  password=pw;") == ("bob", "pw")


@pytest.mark.parametrize(
    ("jaas", "message"),
    [
        ("username=alice", "expected '<LoginModule> required"),
        (
            'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required a="b";',
            "OAuthBearerLoginModule is not supported",
        ),
        (f'{SCRAM} required username="alice";', 'needs username="..." and password="..."'),
        (f'{SCRAM} required username="alice" "x" password="p";', "cannot read the options"),
    ],
)
def test_bad_jaas_is_one_line(jaas: str, message: str) -> None:
    with pytest.raises(CliError, match=message) as err:
        security_properties({"sasl.jaas.config": jaas})
    assert "\n" not in str(err.value)


def test_sasl_ssl_scram_with_a_pem_trust_store(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text(PEM)
    got = security_properties(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": f'{SCRAM} required username="alice" password="s";',
            "ssl.truststore.location": str(ca),  # no type given: PEM by its content
            "ssl.truststore.password": "ignored",
            "ssl.endpoint.identification.algorithm": "",
            "ssl.enabled.protocols": "TLSv1.3",
            "request.timeout.ms": "5000",
            "ssl.ca.location": str(ca),  # librdkafka's own names pass through
        }
    )
    assert got == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "s",
        "ssl.ca.location": str(ca),
        "ssl.endpoint.identification.algorithm": "none",
        "request.timeout.ms": "5000",
    }


def test_key_stores(tmp_path: Path) -> None:
    pem = tmp_path / "client.pem"
    pem.write_text(PEM)
    assert security_properties(
        {"ssl.keystore.password": "x", "ssl.keystore.location": str(pem), "ssl.key.password": "k"}
    ) == {
        "ssl.certificate.location": str(pem),
        "ssl.key.location": str(pem),
        "ssl.key.password": "k",
    }
    p12 = tmp_path / "client.p12"
    p12.write_bytes(b"\x30\x82binary")
    props = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(p12)}
    assert security_properties({**props, "ssl.keystore.password": "x"}) == {
        "ssl.keystore.location": str(p12),
        "ssl.keystore.password": "x",
    }


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"security.protocol": "TLS"}, "security.protocol must be one of"),
        ({"ssl.truststore.location": "{jks}"}, "a JKS trust store cannot be read here"),
        (
            {"ssl.truststore.location": "{jks}", "ssl.truststore.type": "PKCS12"},
            "a PKCS12 trust store",
        ),
        ({"ssl.keystore.location": "{jks}"}, "a JKS key store cannot be read here"),
        ({"ssl.truststore.location": "{missing}"}, "cannot read"),
    ],
)
def test_unreadable_settings_are_one_line(
    tmp_path: Path, props: dict[str, str], message: str
) -> None:
    jks = tmp_path / "store.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed binary")
    names = {"jks": str(jks), "missing": str(tmp_path / "nope.pem")}
    with pytest.raises(CliError, match=message) as err:
        security_properties({k: v.format(**names) for k, v in props.items()})
    assert "\n" not in str(err.value)
