"""Mutual TLS between services: the credentials of every internal gRPC server and channel.

One process-wide ``InternalTls`` made by ``configure(settings)`` from the ``internal.ssl.*``
settings (PEM files); ``runtime.new_channel`` / ``runtime.add_port`` use it when it is set, so
storage, controller, coordinators and gateways get their credentials from this one place.

Servers require a client certificate chaining to ``internal.ssl.truststore.location``
(``require_client_authentication``); channels present this service's certificate and verify the
server's against the same CA (and its name against the address dialled).

Rotation: servers take new files through gRPC's certificate-configuration fetcher, which runs
before every TLS handshake they accept (open connections keep theirs). Clients cannot swap a
channel's credentials, so ``generation`` counts reloads (checked every
``internal.ssl.reload.check.interval.ms``) and the channel pools re-create their channels when
it changes. Files replaced one at a time (key and certificate briefly disagreeing) are refused
and retried: the previous certificates stay in use until the new set loads whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from services.common.logging import get_logger
from services.common.settings import ConfigError, ServiceSettings

log = get_logger("internal_tls")

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.+?-----END \1-----\s*", re.DOTALL)


@dataclass(frozen=True, slots=True)
class TlsFiles:
    keystore: str  # certificate chain (and the key unless ``key`` is set)
    key: str | None
    truststore: str


@dataclass(frozen=True, slots=True)
class Material:
    """The PEM bytes gRPC takes."""

    private_key: bytes
    certificate_chain: bytes
    root_certificates: bytes


def read_material(files: TlsFiles) -> Material:
    """Read and check the files (key matches certificate, CA parses); ConfigError otherwise."""
    try:
        keystore = _read(files.keystore)
        key_pem = _read(files.key) if files.key else keystore
        ca = _read(files.truststore)
    except OSError as exc:
        raise ConfigError(f"invalid setting internal.ssl: {exc}") from None
    key = _blocks(key_pem, lambda label: label.endswith("PRIVATE KEY"))
    chain = _blocks(keystore, lambda label: label == "CERTIFICATE")
    roots = _blocks(ca, lambda label: label == "CERTIFICATE")
    where = "internal.ssl.key.location" if files.key else "internal.ssl.keystore.location"
    if not key:
        raise ConfigError(f"invalid setting {where}: no PEM private key in it")
    if b"ENCRYPTED PRIVATE KEY" in key:
        raise ConfigError(f"invalid setting {where}: encrypted private keys are not supported")
    if not chain:
        raise ConfigError("invalid setting internal.ssl.keystore.location: no PEM certificate")
    if not roots:
        raise ConfigError("invalid setting internal.ssl.truststore.location: no PEM certificate")
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_cert_chain(files.keystore, files.key)  # the key belongs to the certificate
        ctx.load_verify_locations(cadata=roots.decode("ascii"))
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"invalid setting internal.ssl.keystore.location: {exc}") from None
    return Material(key, chain, roots)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _blocks(pem: bytes, wanted: Callable[[str], bool]) -> bytes:
    picked = [m.group(0) for m in _PEM_BLOCK.finditer(pem) if wanted(m.group(1).decode())]
    return b"".join(picked)


class InternalTls:
    """The current certificates of this process, reloaded when their files change."""

    def __init__(self, files: TlsFiles, reload_check_interval_s: float = 5.0) -> None:
        self.files = files
        self.reload_check_interval_s = reload_check_interval_s
        self._lock = threading.Lock()  # gRPC calls the fetcher off the event loop's thread
        self._stamp = self._mtimes()
        self.material = read_material(files)
        self.generation = 0
        self._watcher: asyncio.Task[None] | None = None

    def _paths(self) -> list[str]:
        return [p for p in (self.files.keystore, self.files.key, self.files.truststore) if p]

    def _mtimes(self) -> tuple[int, ...]:
        return tuple(os.stat(p).st_mtime_ns for p in self._paths())

    def reload_if_changed(self) -> bool:
        """Re-read the files if they changed since the last load; True when new ones loaded.
        A set that does not load (half written, mismatched) is logged and the old one kept."""
        with self._lock:
            try:
                stamp = self._mtimes()
                if stamp == self._stamp:
                    return False
                material = read_material(self.files)
            except (OSError, ConfigError) as exc:
                log.warning("internal_tls_reload_failed", error=str(exc))
                return False
            self._stamp = stamp
            if material == self.material:
                return False
            self.material = material
            self.generation += 1
        log.info("internal_tls_certificates_reloaded", generation=self.generation)
        return True

    # ---- servers ---------------------------------------------------------------------
    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials that require a client certificate from the cluster CA and follow
        rotations of this service's own certificate (and of the CA file)."""
        served = self.generation

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            nonlocal served
            try:
                self.reload_if_changed()
                if self.generation == served:
                    return None
                served = self.generation
                return self._server_config()
            except Exception as exc:  # noqa: BLE001 - must never raise into gRPC's handshake
                log.error("internal_tls_fetch_failed", error=repr(exc))
                return None

        return grpc.dynamic_ssl_server_credentials(
            self._server_config(), fetch, require_client_authentication=True
        )

    def _server_config(self) -> grpc.ServerCertificateConfiguration:
        m = self.material
        return grpc.ssl_server_certificate_configuration(
            [(m.private_key, m.certificate_chain)], root_certificates=m.root_certificates
        )

    # ---- channels --------------------------------------------------------------------
    def channel_credentials(self) -> grpc.ChannelCredentials:
        m = self.material
        return grpc.ssl_channel_credentials(
            root_certificates=m.root_certificates,
            private_key=m.private_key,
            certificate_chain=m.certificate_chain,
        )

    def ensure_watching(self) -> None:
        """Start checking the files for the channels' sake (idempotent; needs a running loop)."""
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(
                self._watch(), name="internal-tls-watch"
            )

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.reload_check_interval_s)
            await asyncio.to_thread(self.reload_if_changed)


_active: InternalTls | None = None


def _from_settings(settings: ServiceSettings) -> InternalTls:
    assert settings.internal_ssl_keystore_location and settings.internal_ssl_truststore_location
    return InternalTls(
        TlsFiles(
            settings.internal_ssl_keystore_location,
            settings.internal_ssl_key_location,
            settings.internal_ssl_truststore_location,
        ),
        settings.internal_ssl_reload_check_interval_ms / 1000.0,
    )


def tool_channel(target: str) -> grpc.Channel:
    """A blocking channel for command-line tools that call a service directly: mutual TLS when
    the environment says so (``KAFKAPY_INTERNAL_SSL_ENABLED=true`` and the file settings, as
    for the services), plaintext otherwise."""
    settings = ServiceSettings.load(argv=[])
    if not settings.internal_ssl_enabled:
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, _from_settings(settings).channel_credentials())


def configure(settings: ServiceSettings) -> InternalTls | None:
    """Set this process's internal TLS from its settings (None: plaintext); ConfigError on bad
    files, so a service with unusable certificates does not start."""
    global _active
    if not settings.internal_ssl_enabled:
        _active = None
        return None
    _active = _from_settings(settings)
    log.info("internal_tls_enabled", keystore=settings.internal_ssl_keystore_location)
    with contextlib.suppress(RuntimeError):  # no running loop: channels start the watch later
        _active.ensure_watching()
    return _active


def active() -> InternalTls | None:
    return _active


def generation() -> int:
    """Changes when this process's client certificates were rotated (channels re-created)."""
    return _active.generation if _active is not None else 0
