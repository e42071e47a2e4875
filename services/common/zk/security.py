"""ZooKeeper authentication (the digest scheme) and znode ACLs, as Kafka's ``zookeeper.set.acl``.

With ``zookeeper.digest.auth.file`` every session of a service adds ``digest`` credentials
(``user:password``, read from the file, never from the command line). With
``zookeeper.set.acl=true`` every znode kafka-py creates gets the ACL Kafka gives its znodes:
all permissions for the authenticated creator (``auth`` scheme, i.e. every session with the same
credentials), plus read for the world, except on sensitive paths (SCRAM credentials under
``/config/users`` and ACLs under ``/kafka-acl*``), which the world can neither read nor change.

The ACL is chosen per path in one place, the kazoo client below, so ``create``,
``ensure_path``/``makepath`` (parents too) and multi-op transactions all get it.
Znodes created before the setting was turned on keep their ACLs (Kafka's
zookeeper-security-migration tool has no equivalent here yet).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.security import ACL, CREATOR_ALL_ACL, READ_ACL_UNSAFE

from services.common.settings import ConfigError, ServiceSettings

# created at start under zookeeper.set.acl (the ACL store's roots; /config/users is persistent)
SECURED_ROOTS = (
    "/kafka-acl",
    "/kafka-acl-changes",
    "/kafka-acl-extended/prefixed",
    "/kafka-acl-extended-changes",
)


def is_sensitive(path: str) -> bool:
    """SCRAM credentials and ACLs: no world access."""
    if path == "/config/users" or path.startswith("/config/users/"):
        return True
    return path.startswith("/kafka-acl")


def acl_for(path: str) -> list[ACL]:
    """Kafka's ACL for a znode it creates under ``zookeeper.set.acl``."""
    if is_sensitive(path):
        return list(CREATOR_ALL_ACL)
    return [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]


@dataclass(frozen=True, slots=True)
class ZkSecurity:
    digest: str | None = None  # "user:password"
    set_acl: bool = False

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", self.digest)] if self.digest else []


NO_SECURITY = ZkSecurity()


def read_digest(path: str) -> str:
    """``user:password`` from the first line of ``path``; ConfigError otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline().strip()
    except OSError as exc:
        raise ConfigError(
            f"invalid setting zookeeper.digest.auth.file: {path}: {exc.strerror}"
        ) from None
    user, sep, password = line.partition(":")
    if not sep or not user or not password:
        raise ConfigError(
            f"invalid setting zookeeper.digest.auth.file: {path} must hold user:password"
        )
    return line


def zk_security(settings: ServiceSettings) -> ZkSecurity:
    file = settings.zookeeper_digest_auth_file
    return ZkSecurity(read_digest(file) if file else None, settings.zookeeper_set_acl)


class _AclTransaction(TransactionRequest):  # type: ignore[misc]
    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Sequence[ACL] | None = None,
        ephemeral: bool = False,
        sequence: bool = False,
    ) -> Any:
        if acl is None:
            acl = acl_for(path)
        return super().create(path, value, acl, ephemeral, sequence)


class AclKazooClient(KazooClient):  # type: ignore[misc]
    """A KazooClient that creates every znode with ``acl_for(path)`` unless told otherwise."""

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, **kw: Any) -> Any:
        return super().create_async(path, value, acl=acl or acl_for(path), **kw)

    def ensure_path_async(self, path: str, acl: Any = None) -> Any:
        # kazoo hands a created node's ACL to the parents ``makepath`` creates: each level
        # gets its own instead (a sensitive child must not hide /config from readers)
        return super().ensure_path_async(path, None)

    def transaction(self) -> TransactionRequest:
        return _AclTransaction(self)


def kazoo_client(hosts: str, security: ZkSecurity = NO_SECURITY, **kw: Any) -> KazooClient:
    """A kazoo client authenticating and setting ACLs as ``security`` says."""
    cls = AclKazooClient if security.set_acl else KazooClient
    return cls(hosts=hosts, auth_data=security.auth_data or None, **kw)
