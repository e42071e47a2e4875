"""`kafka-py certs init`: the files, their chains and SANs, rotation from the same CA, one-line
errors; and the ZooKeeper ACL policy the secure layout relies on."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest
from kazoo.security import ACL

from services.cli.main import main
from services.common.settings import ConfigError
from services.common.zk.security import acl_for, read_digest


def test_init_makes_a_ca_and_service_certificates_then_reuses_the_ca(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "certs"
    assert main(["certs", "init", "--dir", str(d), "--services", "storage,gateway"]) == 0
    assert "CA created" in capsys.readouterr().out
    assert (d / "ca-key.pem").stat().st_mode & 0o777 == 0o600
    assert (d / "storage-key.pem").stat().st_mode & 0o777 == 0o600
    text = subprocess.run(
        ["openssl", "x509", "-in", str(d / "storage.pem"), "-noout", "-text"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    for san in ("DNS:localhost", "IP Address:127.0.0.1", "DNS:kafka-py-storage.default.svc"):
        assert san in text
    assert "*.kafka-py-storage-headless.default.svc.cluster.local" in text
    ca_before = (d / "ca.pem").read_bytes()
    leaf_before = (d / "storage.pem").read_bytes()

    assert main(["certs", "init", "--dir", str(d), "--services", "storage", "--days", "2"]) == 0
    assert "CA reused" in capsys.readouterr().out
    assert (d / "ca.pem").read_bytes() == ca_before
    assert (d / "storage.pem").read_bytes() != leaf_before
    ctx = ssl.create_default_context(cafile=str(d / "ca.pem"))  # the new leaf chains to it
    ctx.load_cert_chain(str(d / "storage.pem"), str(d / "storage-key.pem"))
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(d / "ca.pem"), str(d / "storage.pem")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--days", "0"], "error: --days must be between 1 and 36500, got 0"),
        (["--services", "Storage"], "error: --services: 'Storage' is not a service name"),
        (["--services", ","], "error: --services needs at least one service"),
        (["--san", "bad name"], "error: --san: 'bad name' is neither a DNS name nor an IP"),
        (["--namespace", "A_B"], "error: --namespace: 'A_B' is not a DNS label"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["certs", "init", "--dir", str(tmp_path / "c"), *args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(message), err
    assert not (tmp_path / "c").exists()  # nothing written


def test_unusable_existing_ca_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    (tmp_path / "ca-key.pem").write_text("not a key\n")
    assert main(["certs", "init", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "the existing CA" in err, err


def _perms(acls: list[ACL]) -> set[tuple[str, str, int]]:
    return {(a.id.scheme, a.id.id, a.perms) for a in acls}


def test_zookeeper_acl_policy() -> None:
    creator_all = ("auth", "", 31)
    world_read = ("world", "anyone", 1)
    for path in ("/brokers/topics/t", "/config/topics/t", "/controller", "/config", "/kafka-py"):
        assert _perms(acl_for(path)) == {creator_all, world_read}, path
    for path in (
        "/config/users",
        "/config/users/alice",
        "/kafka-acl/Topic/t",
        "/kafka-acl-extended/prefixed/Topic/t",
        "/kafka-acl-changes/acl_changes_0000000001",
    ):
        assert _perms(acl_for(path)) == {creator_all}, path


def test_digest_file(tmp_path: Path) -> None:
    f = tmp_path / "digest"
    f.write_text("kafkapy:s3cret\n")
    assert read_digest(str(f)) == "kafkapy:s3cret"
    f.write_text("no-colon\n")
    with pytest.raises(ConfigError, match="must hold user:password"):
        read_digest(str(f))
    with pytest.raises(ConfigError, match="zookeeper.digest.auth.file"):
        read_digest(str(tmp_path / "missing"))


def test_an_existing_ca_with_another_key_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        assert main(["certs", "init", "--dir", str(d), "--services", "gateway"]) == 0
    (a / "ca-key.pem").write_bytes((b / "ca-key.pem").read_bytes())
    capsys.readouterr()
    assert main(["certs", "init", "--dir", str(a), "--services", "gateway"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "is not the key of" in err, err
