"""The local cluster's secure layout (``cluster up --secure``): internal mutual TLS with a CA
and one certificate per role made by ``certs init`` in ``<data_dir>/certs``, and ZooKeeper
digest credentials (``<data_dir>/certs/zookeeper.digest``, mode 0600) with ``zookeeper.set.acl``.

Both are made once per data dir and kept, so a restarted cluster keeps its CA and credentials.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from services.cli.local_cluster.layout import ROLES
from services.common.zk.security import ZkSecurity, read_digest

CERTS_DIR = "certs"
DIGEST_FILE = "zookeeper.digest"
ZK_USER = "kafkapy"


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
