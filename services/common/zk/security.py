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

TLS (Kafka's ``zookeeper.ssl.*``, KIP-515): with ``zookeeper.ssl.client.enable`` every session
connects to ZooKeeper's ``secureClientPort`` through ``TlsHandler``, which trusts only the
configured CA (kazoo's own TLS would add the system's CAs), presents the keystore's certificate
and checks ZooKeeper's name unless ``zookeeper.ssl.endpoint.identification.algorithm`` is
empty. The files are checked once at start (``zk_tls``: one-line ConfigError) and read again for
every connection, so renewed certificates apply on the next reconnect. A failed handshake is
logged and retried like any lost connection.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.security import ACL, CREATOR_ALL_ACL, READ_ACL_UNSAFE

from services.common.logging import get_logger
from services.common.settings import ConfigError, ServiceSettings

log = get_logger("zk.tls")

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
class ZkTls:
    """A client's TLS to ZooKeeper: PEM files (``keystore``: certificate chain + key)."""

    truststore: str | None = None  # None: the system's CAs
    keystore: str | None = None  # None: no client certificate
    key_password: str | None = None
    check_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        """A client context from the files as they are now (ssl.SSLError, OSError)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.truststore:
            ctx.load_verify_locations(self.truststore)
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if self.keystore:
            # a callable password: an encrypted key without one fails, never prompts on a tty
            ctx.load_cert_chain(self.keystore, password=self.key_password or _no_password)
        ctx.check_hostname = self.check_hostname
        return ctx


@dataclass(frozen=True, slots=True)
class ZkSecurity:
    digest: str | None = None  # "user:password"
    set_acl: bool = False
    tls: ZkTls | None = None

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


def zk_tls(settings: ServiceSettings) -> ZkTls | None:
    """The TLS of ``settings`` (None: plaintext), its files checked now: ConfigError naming
    the setting on a missing or unreadable file, a keystore without a certificate or a key, a
    key that is not the certificate's, or a truststore without a CA certificate."""
    if not settings.zookeeper_ssl_client_enable:
        return None
    tls = ZkTls(
        settings.zookeeper_ssl_truststore_location or None,
        settings.zookeeper_ssl_keystore_location or None,
        settings.zookeeper_ssl_keystore_password or None,
        settings.zookeeper_ssl_endpoint_identification_algorithm.upper() == "HTTPS",
    )
    if tls.truststore is not None:
        _check_pem("truststore", tls.truststore)
    if tls.keystore is not None:
        _check_pem("keystore", tls.keystore, tls.key_password)
    try:
        tls.context()
    except ssl.SSLError as exc:  # what _check_pem could not tell: the key is not the cert's
        if exc.reason == "KEY_VALUES_MISMATCH":
            why = "the private key is not the key of the certificate"
        else:
            why = str(exc.reason or exc).lower().replace("_", " ")
        store = "keystore" if tls.keystore is not None else "truststore"
        path = tls.keystore or tls.truststore
        raise ConfigError(
            f"invalid setting zookeeper.ssl.{store}.location: {path}: {why}"
        ) from None
    return tls


def _no_password() -> str:
    return ""


def _check_pem(store: str, path: str, password: str | None = None) -> None:
    """One-line ConfigError when the PEM file at ``path`` cannot be a ``store``."""
    prop = f"zookeeper.ssl.{store}.location"
    try:
        with open(path, "rb") as f:
            pem = f.read()
    except OSError as exc:
        raise ConfigError(f"invalid setting {prop}: {path}: {exc.strerror}") from None
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ConfigError(f"invalid setting {prop}: {path}: no PEM certificate in it")
    if store == "truststore":
        return
    if b"PRIVATE KEY-----" not in pem:
        raise ConfigError(
            f"invalid setting {prop}: {path}: no PEM private key in it "
            "(the keystore holds the certificate chain and its key)"
        )
    if b"ENCRYPTED" in pem:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            ctx.load_cert_chain(path, password=password or _no_password)
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                return  # reported by the caller
            raise ConfigError(
                f"invalid setting {prop}: {path}: cannot decrypt the private key "
                "(check zookeeper.ssl.keystore.password)"
            ) from None


def zk_security(settings: ServiceSettings) -> ZkSecurity:
    """Digest credentials, ACLs and TLS of ``settings``; ConfigError on an unusable file."""
    file = settings.zookeeper_digest_auth_file
    return ZkSecurity(
        read_digest(file) if file else None, settings.zookeeper_set_acl, zk_tls(settings)
    )


@dataclass(slots=True)
class _LastError:
    text: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class TlsHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler whose connections are TLS as ``tls`` says.

    kazoo turns the ``ssl.SSLError`` of a failed handshake into a dropped connection and
    retries; the handshake error is logged here (kazoo's own line drops the reason) and kept
    in ``last_error`` for a start that gives up."""

    def __init__(self, tls: ZkTls) -> None:
        super().__init__()
        self.tls = tls
        self._last = _LastError()

    @property
    def last_error(self) -> str | None:
        return self._last.text

    def create_connection(
        self,
        address: tuple[str, int],
        hostname: str | None = None,
        timeout: float | None = None,
        **_kazoo_tls: Any,  # kazoo's own TLS arguments: this handler does TLS itself
    ) -> ssl.SSLSocket:
        server = f"{hostname or address[0]}:{address[1]}"
        try:
            ctx = self.tls.context()
        except (OSError, ssl.SSLError) as exc:  # files replaced by something unusable
            self._failed(server, f"cannot load the TLS files: {exc}")
            raise
        sock = socket.create_connection(address, timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = ctx.wrap_socket(sock, server_hostname=hostname or address[0])
        except ssl.SSLError as exc:
            sock.close()
            self._failed(server, _reason(exc))
            raise
        except BaseException:
            sock.close()
            raise
        with self._last.lock:
            if self._last.text is not None:
                log.info("zookeeper TLS handshake succeeded", server=server)
            self._last.text = None
        return conn

    def _failed(self, server: str, reason: str) -> None:
        with self._last.lock:
            self._last.text = f"TLS handshake with ZooKeeper at {server} failed: {reason}"
        log.warning("zookeeper TLS handshake failed, retrying", server=server, error=reason)


def _reason(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    if exc.reason:
        return str(exc.reason).lower().replace("_", " ")
    return str(exc)


def tls_error(client: KazooClient) -> str | None:
    """The last TLS handshake failure of ``client`` (None: none, or not TLS)."""
    handler = client.handler
    return handler.last_error if isinstance(handler, TlsHandler) else None


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
    """A kazoo client authenticating, setting ACLs and using TLS as ``security`` says: the one
    place kafka-py's services and tools make their ZooKeeper clients."""
    cls = AclKazooClient if security.set_acl else KazooClient
    if security.tls is not None:
        kw["handler"] = TlsHandler(security.tls)
        kw["use_ssl"] = True  # what kazoo logs; TlsHandler makes the connections
    return cls(hosts=hosts, auth_data=security.auth_data or None, **kw)
