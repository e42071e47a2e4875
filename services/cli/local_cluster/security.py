"""The local cluster's secure layout (``cluster up --secure``): internal mutual TLS with a CA
and one certificate per role made by ``certs init`` in ``<data_dir>/certs``, and ZooKeeper
digest credentials (``<data_dir>/certs/zookeeper.digest``, mode 0600) with ``zookeeper.set.acl``.

``cluster up --zookeeper-tls``: ZooKeeper on its ``secureClientPort`` only, requiring client
certificates, and every service and tool of the cluster connecting with TLS (``ZkTlsLayout``):
certificates ``zookeeper`` and ``zookeeper-client`` from the same CA, each with a PEM keystore
(certificate + key in one file, as ZooKeeper reads it).

All are made once per data dir and kept, so a restarted cluster keeps its CA and credentials.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from services.cli.local_cluster.layout import ROLES, ZOOKEEPER
from services.common.zk.security import ZkSecurity, ZkTls, read_digest
from services.common.zk.server import ServerTls

CERTS_DIR = "certs"
DIGEST_FILE = "zookeeper.digest"
ZK_USER = "kafkapy"
ZK_SERVER_CERT = "zookeeper"
ZK_CLIENT_CERT = "zookeeper-client"
NETTY_CLIENT_SOCKET = "org.apache.zookeeper.ClientCnxnSocketNetty"


def cert_name(role: str) -> str:
    """The certificate of a role: ``group_coordinator`` -> ``group-coordinator``."""
    return role.replace("_", "-")


@dataclass(frozen=True, slots=True)
class SecureLayout:
    certs_dir: Path
    digest_file: Path

    @property
    def ca(self) -> Path:
        return self.certs_dir / "ca.pem"

    def certificate(self, role: str) -> Path:
        return self.certs_dir / f"{cert_name(role)}.pem"

    def key(self, role: str) -> Path:
        return self.certs_dir / f"{cert_name(role)}-key.pem"

    @property
    def zk_security(self) -> ZkSecurity:
        return ZkSecurity(read_digest(str(self.digest_file)), set_acl=True)

    def flags(self, role: str) -> list[str]:
        """The settings that turn internal mTLS and ZooKeeper ACLs on for one role."""
        return [
            "--internal.ssl.enabled", "true",
            "--internal.ssl.keystore.location", str(self.certificate(role)),
            "--internal.ssl.key.location", str(self.key(role)),
            "--internal.ssl.truststore.location", str(self.ca),
            "--zookeeper.set.acl", "true",
            "--zookeeper.digest.auth.file", str(self.digest_file),
        ]  # fmt: skip


def secure_layout(data_dir: Path) -> SecureLayout:
    """Make (or find) the certificates and the ZooKeeper credentials of ``data_dir``."""
    from services.cli.certs import init_certs  # needs cryptography: only for secure clusters

    layout = SecureLayout(data_dir / CERTS_DIR, data_dir / CERTS_DIR / DIGEST_FILE)
    missing = [r for r in ROLES if not layout.certificate(r).exists() or not layout.key(r).exists()]
    if missing or not layout.ca.exists():
        init_certs(layout.certs_dir, [cert_name(r) for r in (missing or ROLES)])
    if not layout.digest_file.exists():
        fd = os.open(layout.digest_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"{ZK_USER}:{secrets.token_urlsafe(24)}\n")
    return layout


@dataclass(frozen=True, slots=True)
class ZkTlsLayout:
    """The files of ``cluster up --zookeeper-tls`` in ``<data_dir>/certs``."""

    certs_dir: Path

    @property
    def ca(self) -> Path:
        return self.certs_dir / "ca.pem"

    def keystore(self, name: str) -> Path:
        return self.certs_dir / f"{name}-keystore.pem"

    @property
    def server(self) -> ServerTls:
        return ServerTls(self.keystore(ZK_SERVER_CERT), self.ca, self.keystore(ZK_CLIENT_CERT))

    @property
    def client(self) -> ZkTls:
        return ZkTls(str(self.ca), str(self.keystore(ZK_CLIENT_CERT)))

    def flags(self) -> list[str]:
        """Kafka's ZooKeeper TLS settings (KIP-515) for every service of the cluster."""
        return [
            "--zookeeper.ssl.client.enable", "true",
            "--zookeeper.clientCnxnSocket", NETTY_CLIENT_SOCKET,
            "--zookeeper.ssl.keystore.location", str(self.keystore(ZK_CLIENT_CERT)),
            "--zookeeper.ssl.keystore.type", "PEM",
            "--zookeeper.ssl.truststore.location", str(self.ca),
            "--zookeeper.ssl.truststore.type", "PEM",
        ]  # fmt: skip


def zk_tls_layout(data_dir: Path, host: str) -> ZkTlsLayout:
    """Make (or find) ZooKeeper's and its clients' certificates (the cluster CA's, names
    ``localhost``, 127.0.0.1 and ``host``) and their PEM keystores."""
    from services.cli.certs import init_certs, service_files, write_keystore

    layout = ZkTlsLayout(data_dir / CERTS_DIR)
    names = (ZK_SERVER_CERT, ZK_CLIENT_CERT)
    if not layout.ca.exists() or not all(layout.keystore(n).exists() for n in names):
        init_certs(layout.certs_dir, names, extra_sans=[host])
        for name in names:
            write_keystore(service_files(layout.certs_dir, name), layout.keystore(name))
    return layout


def zk_tls_of(data_dir: Path) -> ZkTls | None:
    """The client TLS of the cluster in ``data_dir`` when its ZooKeeper was configured with
    TLS (its zoo.cfg has a secureClientPort), else None: for tools that find a cluster by its
    data dir."""
    try:
        cfg = (data_dir / ZOOKEEPER / "zoo.cfg").read_text()
    except OSError:
        return None
    return ZkTlsLayout(data_dir / CERTS_DIR).client if "secureClientPort=" in cfg else None
