"""Kafka's zookeeper.ssl.* settings (KIP-515): validated at start, one readable line each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from services.cli.certs import init_certs, service_files, write_keystore
from services.cli.common import CliError
from services.cli.zk_client import tool_zk_security
from services.common.settings import ConfigError, ServiceSettings
from services.common.zk.security import ZkTls, zk_security


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("zk-tls")
    layout = init_certs(d, ("client", "other"))
    client, other = service_files(d, "client"), service_files(d, "other")
    key = serialization.load_pem_private_key(client.key.read_bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret"),
    )
    (d / "encrypted.pem").write_bytes(client.certificate.read_bytes() + encrypted)
    (d / "mismatch.pem").write_bytes(client.certificate.read_bytes() + other.key.read_bytes())
    return {
        "ca": layout.ca,
        "keystore": write_keystore(client, d / "client-keystore.pem"),
        "cert_only": client.certificate,
        "encrypted": d / "encrypted.pem",
        "mismatch": d / "mismatch.pem",
    }


def load(*flags: str) -> ServiceSettings:
    return ServiceSettings.load(["--zookeeper.ssl.client.enable", "true", *flags], env={})


def tls_of(*flags: str) -> ZkTls | None:
    return zk_security(load(*flags)).tls


def test_plaintext_by_default_and_enabled_with_kafka_names(pem: dict[str, Path]) -> None:
    assert zk_security(ServiceSettings.load([], env={})).tls is None
    tls = tls_of(
        "--zookeeper.ssl.keystore.location", str(pem["keystore"]),
        "--zookeeper.ssl.keystore.type", "PEM",
        "--zookeeper.ssl.truststore.location", str(pem["ca"]),
        "--zookeeper.ssl.truststore.type", "pem",
        "--zookeeper.clientCnxnSocket", "org.apache.zookeeper.ClientCnxnSocketNetty",
    )  # fmt: skip
    assert tls == ZkTls(str(pem["ca"]), str(pem["keystore"]), None, check_hostname=True)
    ctx = tls.context()
    assert ctx.check_hostname and ctx.get_ca_certs()
    # hostname verification is on unless the algorithm is empty, as Kafka
    assert tls_of("--zookeeper.ssl.endpoint.identification.algorithm", "https").check_hostname
    off = tls_of("--override", "zookeeper.ssl.endpoint.identification.algorithm=")
    assert off is not None and not off.check_hostname and not off.context().check_hostname


def test_the_environment_configures_it_too(pem: dict[str, Path]) -> None:
    env = {
        "KAFKAPY_ZOOKEEPER_SSL_CLIENT_ENABLE": "true",
        "KAFKAPY_ZOOKEEPER_SSL_TRUSTSTORE_LOCATION": str(pem["ca"]),
    }
    tls = zk_security(ServiceSettings.load([], env=env)).tls
    assert tls == ZkTls(str(pem["ca"]), None)


def test_encrypted_key_with_its_password(pem: dict[str, Path]) -> None:
    flags = ("--zookeeper.ssl.keystore.location", str(pem["encrypted"]))
    tls = tls_of(*flags, "--zookeeper.ssl.keystore.password", "s3cret")
    assert tls is not None and tls.key_password == "s3cret"
    tls.context()  # loads


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--zookeeper.ssl.keystore.type", "JKS"],
            "invalid setting zookeeper.ssl.keystore.type: JKS is not supported, "
            "kafka-py reads PEM files only",
        ),
        (
            ["--zookeeper.ssl.truststore.type", "PKCS12"],
            "invalid setting zookeeper.ssl.truststore.type: PKCS12 is not supported",
        ),
        (
            ["--zookeeper.ssl.endpoint.identification.algorithm", "LDAPS"],
            "invalid setting zookeeper.ssl.endpoint.identification.algorithm: 'LDAPS'",
        ),
    ],
)
def test_unsupported_settings(flags: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load(*flags)
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "store, file, password, message",
    [
        ("truststore", "missing", None, "No such file or directory"),
        ("keystore", "missing", None, "No such file or directory"),
        ("truststore", "keystore_key_only", None, "no PEM certificate in it"),
        ("keystore", "cert_only", None, "no PEM private key in it"),
        ("keystore", "mismatch", None, "the private key is not the key of the certificate"),
        ("keystore", "encrypted", "wrong", "cannot decrypt the private key"),
        ("keystore", "encrypted", None, "cannot decrypt the private key"),  # never prompts
    ],
)
def test_unusable_files_are_one_line_naming_the_setting(
    pem: dict[str, Path], tmp_path: Path, store: str, file: str, password: str | None, message: str
) -> None:
    if file == "missing":
        path = tmp_path / "nope.pem"
    elif file == "keystore_key_only":
        path = tmp_path / "key.pem"
        path.write_text(pem["keystore"].read_text().split("-----END CERTIFICATE-----")[-1])
    else:
        path = pem[file]
    flags = [f"--zookeeper.ssl.{store}.location", str(path)]
    if password:
        flags += ["--zookeeper.ssl.keystore.password", password]
    with pytest.raises(ConfigError) as exc:
        tls_of(*flags)
    text = str(exc.value)
    assert text.startswith(f"invalid setting zookeeper.ssl.{store}.location: {path}: "), text
    assert message in text and "\n" not in text


def test_tools_take_the_settings_from_a_zk_tls_config_file(
    pem: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("KAFKAPY_ZOOKEEPER_")]:
        monkeypatch.delenv(key)
    assert tool_zk_security().tls is None
    config = tmp_path / "zk-tls.properties"
    config.write_text(
        "zookeeper.ssl.client.enable=true\n"
        "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty\n"
        f"zookeeper.ssl.keystore.location={pem['keystore']}\n"
        f"zookeeper.ssl.truststore.location={pem['ca']}\n"
        "bootstrap.servers=ignored:9092\n"
    )
    assert tool_zk_security(str(config)).tls == ZkTls(str(pem["ca"]), str(pem["keystore"]))
    config.write_text("zookeeper.ssl.client.enable=true\nzookeeper.ssl.keystore.type=JKS\n")
    with pytest.raises(CliError, match="zookeeper.ssl.keystore.type: JKS is not supported"):
        tool_zk_security(str(config))
