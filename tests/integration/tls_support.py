"""Test certificates made at run time with the openssl CLI (no key is ever committed): a CA, a
server certificate for 127.0.0.1/localhost and client certificates, all PEM."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_SERVER_SAN = "IP:127.0.0.1,DNS:localhost"


@dataclass(frozen=True)
class Pki:
    ca: Path  # CA certificate (truststore of clients and of the gateway)
    server: Path  # server certificate chain + key, one PEM (the gateway's keystore)
    server_cert: Path
    server_key: Path
    dir: Path

    def client(self, name: str, subject: str, days: int = 2) -> tuple[Path, Path]:
        """A client certificate signed by the CA: (certificate, key)."""
        return _issue(self.dir, name, subject, days, self.ca, self.dir / "ca.key")

    def server_like(self, name: str) -> tuple[Path, Path]:
        """Another server certificate for 127.0.0.1/localhost (a rotation): (cert, key)."""
        return _issue(
            self.dir, name, "/CN=localhost", 2, self.ca, self.dir / "ca.key", san=_SERVER_SAN
        )


def _run(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _issue(
    d: Path, name: str, subject: str, days: int, ca: Path, ca_key: Path, san: str | None = None
) -> tuple[Path, Path]:
    key, csr, cert = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.crt"
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-subj", subject,
         "-out", str(csr))  # fmt: skip
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    _run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
         "-CAcreateserial", "-days", str(days), "-sha256", "-extfile", str(ext),
         "-out", str(cert))  # fmt: skip
    return cert, key


def make_pki(d: Path) -> Pki:
    d.mkdir(parents=True, exist_ok=True)
    ca, ca_key = d / "ca.crt", d / "ca.key"
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-days", "2",
         "-subj", "/CN=kafka-py test CA", "-out", str(ca))  # fmt: skip
    cert, key = _issue(d, "server", "/CN=localhost", 2, ca, ca_key, san=_SERVER_SAN)
    server = d / "server.pem"
    server.write_bytes(cert.read_bytes() + key.read_bytes())
    return Pki(ca, server, cert, key, d)
