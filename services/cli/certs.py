"""``kafka-py certs init``: a cluster CA and one certificate per service for internal mutual TLS.

Files in ``--dir`` (PEM; keys mode 0600):

- ``ca.pem`` / ``ca-key.pem``: the cluster CA (kept: a second run issues new service
  certificates from the same CA, which is how certificates are rotated without a restart);
- ``<service>.pem`` / ``<service>-key.pem``: each service's certificate (client and server
  use) with SANs for localhost, 127.0.0.1, ::1 and the Kubernetes Service DNS names of the
  chart (``<base>-<service>``, its headless Service's pods, ``.<namespace>.svc[.<domain>]``;
  ``<base>`` is the chart's name rule: the release, or ``<release>-kafka-py`` when the release
  does not contain ``kafka-py``);
- with ``--kubernetes``: ``internal-tls-secret.yaml``, the Secret ``<base>-internal-tls`` the
  chart's ``global.internalTls`` mounts (``kubectl apply -f``): the CA certificate and every
  service's certificate and key, never the CA's key.

The settings of a service then are ``internal.ssl.keystore.location=<service>.pem``,
``internal.ssl.key.location=<service>-key.pem``, ``internal.ssl.truststore.location=ca.pem``.
Keys are ECDSA P-256. New files are written beside the old and renamed over them, the key
first, so a service reloading mid-way sees either set whole or a mismatch it refuses.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from services.cli.common import CliError, UsageError

SERVICES = ("storage", "controller", "gateway", "group-coordinator", "transaction-coordinator")
DEFAULT_DAYS = 365
MAX_DAYS = 36500
CA_FILE, CA_KEY_FILE = "ca.pem", "ca-key.pem"
SECRET_FILE = "internal-tls-secret.yaml"
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_DNS = re.compile(
    r"^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"
)


@dataclass(frozen=True, slots=True)
class ServiceFiles:
    certificate: Path
    key: Path


@dataclass(frozen=True, slots=True)
class CertsLayout:
    """What ``init_certs`` wrote (or found)."""

    directory: Path
    ca: Path
    services: dict[str, ServiceFiles]
    ca_created: bool
    secret: Path | None = None  # the Kubernetes Secret manifest (--kubernetes)


def service_files(directory: Path, service: str) -> ServiceFiles:
    return ServiceFiles(directory / f"{service}.pem", directory / f"{service}-key.pem")


def chart_base(release: str) -> str:
    """The prefix of every object the chart names for ``release`` (``kafkapy.base`` in
    deploy/charts/kafka-py-common/templates/_helpers.tpl)."""
    base = release if "kafka-py" in release else f"{release}-kafka-py"
    return base[:40].rstrip("-")


def secret_name(release: str) -> str:
    """The Secret ``global.internalTls`` mounts when its ``secretName`` is empty."""
    return f"{chart_base(release)}-internal-tls"


def dns_names(service: str, release: str, namespace: str, cluster_domain: str) -> list[str]:
    """localhost and the chart's Service names of ``service``; the wildcards cover the pods
    behind its headless Service (``<pod>.<base>-<service>-headless.<namespace>.svc...``),
    which is what storage, and with internal TLS every gRPC server, advertises."""
    name = f"{chart_base(release)}-{service}"[:63].rstrip("-")
    names = ["localhost"]
    for svc in (name, f"{name}-headless"):
        names += [svc, f"{svc}.{namespace}", f"{svc}.{namespace}.svc"]
        names.append(f"{svc}.{namespace}.svc.{cluster_domain}")
    headless = f"{name}-headless.{namespace}.svc"
    names += [f"*.{headless}", f"*.{headless}.{cluster_domain}"]
    return names


def init_certs(
    directory: Path,
    services: Sequence[str] = SERVICES,
    *,
    days: int = DEFAULT_DAYS,
    release: str = "kafka-py",
    namespace: str = "default",
    cluster_domain: str = "cluster.local",
    extra_sans: Sequence[str] = (),
    kubernetes: bool = False,
) -> CertsLayout:
    """Make (or reuse) the CA in ``directory`` and issue a certificate per service (and with
    ``kubernetes`` the chart's Secret manifest of them). Raises CliError (one line) on bad
    input or unusable files."""
    _check(services, days, release, namespace, extra_sans)
    try:
        import cryptography  # noqa: F401 - the dependency, checked before any file is written
    except ImportError as exc:
        raise CliError(f"certs init needs the 'cryptography' package: {exc}") from None

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create {directory}: {exc.strerror}") from None
    ca_path, ca_key_path = directory / CA_FILE, directory / CA_KEY_FILE
    ca_created = False
    if ca_path.exists() or ca_key_path.exists():
        ca_cert, ca_key = _load_ca(ca_path, ca_key_path)
    else:
        ca_cert, ca_key = _new_ca(days=max(days, 3650))
        _write(ca_key_path, _key_pem(ca_key), private=True)
        _write(ca_path, _cert_pem(ca_cert))
        ca_created = True
    written: dict[str, ServiceFiles] = {}
    for service in services:
        sans = [*dns_names(service, release, namespace, cluster_domain), *extra_sans]
        cert, key = _new_leaf(service, sans, ca_cert, ca_key, days)
        files = service_files(directory, service)
        _write(files.key, _key_pem(key), private=True)
        _write(files.certificate, _cert_pem(cert))
        written[service] = files
    secret = None
    if kubernetes:
        secret = directory / SECRET_FILE
        _write(secret, _secret_manifest(ca_path, written, release, namespace), private=True)
    return CertsLayout(directory, ca_path, written, ca_created, secret)


def write_keystore(files: ServiceFiles, path: Path) -> Path:
    """A PEM keystore as ZooKeeper (``ssl.keyStore.type=PEM``) and kafka-py's ZooKeeper clients
    (``zookeeper.ssl.keystore.location``) read it: the certificate chain and its key in one
    file (mode 0600)."""
    try:
        pem = files.certificate.read_bytes() + files.key.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {exc.filename}: {exc.strerror}") from None
    _write(path, pem, private=True)
    return path


def _secret_manifest(
    ca: Path, services: dict[str, ServiceFiles], release: str, namespace: str
) -> bytes:
    """The Secret (JSON, which is YAML) keyed by file name, as the chart's volumes pick them."""
    paths = [ca] + [p for f in services.values() for p in (f.certificate, f.key)]
    data = {p.name: base64.b64encode(p.read_bytes()).decode("ascii") for p in paths}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(release),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "kafka-py",
                "app.kubernetes.io/part-of": "kafka-py",
            },
        },
        "type": "Opaque",
        "data": data,
    }
    return (json.dumps(secret, indent=2) + "\n").encode()


def _check(
    services: Sequence[str], days: int, release: str, namespace: str, sans: Sequence[str]
) -> None:
    if not services:
        raise UsageError("--services needs at least one service")
    for service in services:
        if not _NAME.match(service):
            raise UsageError(f"--services: {service!r} is not a service name (a-z, 0-9, -)")
    if not 1 <= days <= MAX_DAYS:
        raise UsageError(f"--days must be between 1 and {MAX_DAYS}, got {days}")
    for flag, value in (("--release", release), ("--namespace", namespace)):
        if not _NAME.match(value):
            raise UsageError(f"{flag}: {value!r} is not a DNS label")
    for san in sans:
        if not _is_ip(san) and not _DNS.match(san):
            raise UsageError(f"--san: {san!r} is neither a DNS name nor an IP address")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


# ---- cryptography --------------------------------------------------------------------------
def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _name(common_name: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kafka-py"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _new_ca(days: int) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(f"kafka-py cluster CA {_now():%Y-%m-%d %H:%M:%S}")
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _key_usage(*, signs_certificates: bool) -> Any:
    """Digital signatures always; certificate and CRL signing only for the CA."""
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def _new_leaf(
    service: str, sans: Sequence[str], ca_cert: Any, ca_key: Any, days: int
) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for san in dict.fromkeys([*sans, "127.0.0.1", "::1"]):
        if _is_ip(san):
            alt.append(x509.IPAddress(ipaddress.ip_address(san)))
        else:
            alt.append(x509.DNSName(san))
    now = _now()
    ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(service))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _load_ca(cert_path: Path, key_path: Path) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except OSError as exc:
        raise CliError(f"cannot read the existing CA: {exc.filename}: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:
        raise CliError(f"the existing CA in {cert_path.parent} is unusable: {exc}") from None
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if cert.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise CliError(f"{key_path} is not the key of {cert_path}")
    return cert, key


def _key_pem(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(  # type: ignore[no-any-return]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)  # type: ignore[no-any-return]


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Write beside ``path`` and rename over it (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror}") from None


# ---- command line ----------------------------------------------------------------------------
def add_parser(sub: Any, _common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    certs = sub.add_parser(
        "certs",
        help="make the cluster CA and service certificates (internal mutual TLS)",
        description="Certificates for mutual TLS between kafka-py's services.",
    )
    ops = certs.add_subparsers(dest="certs_op", metavar="{init}")
    ops.required = True
    p = ops.add_parser(
        "init",
        help="create a CA (or reuse the one in --dir) and issue one certificate per service",
        description="Create a cluster CA in --dir unless one is there, then issue a new "
        "certificate for each service (running it again rotates the service certificates).",
    )
    p.add_argument("--dir", required=True, help="where the PEM files go")
    p.add_argument(
        "--services",
        default=",".join(SERVICES),
        help=f"comma-separated certificate names (default {','.join(SERVICES)})",
    )
    p.add_argument("--days", type=int, default=DEFAULT_DAYS, help="service certificate validity")
    p.add_argument("--release", default="kafka-py", help="Helm release name for the DNS SANs")
    p.add_argument("--namespace", default="default", help="Kubernetes namespace for the SANs")
    p.add_argument("--cluster-domain", default="cluster.local")
    p.add_argument(
        "--san", action="append", default=[], metavar="NAME", help="an extra DNS name or IP"
    )
    p.add_argument(
        "--kubernetes",
        action="store_true",
        help=f"also write {SECRET_FILE}: the Secret the chart's global.internalTls mounts "
        "(CA certificate, service certificates and keys; not the CA key)",
    )


def run(args: argparse.Namespace, out: TextIO) -> int:
    services = [s.strip() for s in args.services.split(",") if s.strip()]
    layout = init_certs(
        Path(args.dir).expanduser(),
        services,
        days=args.days,
        release=args.release,
        namespace=args.namespace,
        cluster_domain=args.cluster_domain,
        extra_sans=args.san,
        kubernetes=args.kubernetes,
    )
    made = "created" if layout.ca_created else "reused"
    print(f"CA {made}: {layout.ca}", file=out)
    for service, files in layout.services.items():
        print(f"{service}: {files.certificate} (key {files.key})", file=out)
    if layout.secret is not None:
        print(f"Secret {secret_name(args.release)}: {layout.secret} (kubectl apply -f)", file=out)
    return 0
