"""TLS and SASL for the CLI's own Kafka connections (wire.py), from the client configuration the
CLI's librdkafka clients get (``--command-config`` in librdkafka's names, client_security.py):
``security.protocol``, ``ssl.ca.location``/``ssl.ca.pem``, ``ssl.certificate.location`` +
``ssl.key.location`` (+ ``ssl.key.password``), ``ssl.endpoint.identification.algorithm``,
``enable.ssl.certificate.verification``, ``sasl.mechanisms`` (PLAIN, SCRAM-SHA-256/512),
``sasl.username``/``sasl.password``. A connection authenticates as Kafka's clients do:
SaslHandshake v1, then SaslAuthenticate v2 tokens.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from services.cli.common import CliError
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.scram import MECHANISMS, ScramClient, ScramError

#: one request/response on an open connection: (api key, version, body) -> response body
RoundTrip = Callable[[int, int, dict[str, Any]], dict[str, Any]]
SASL_MECHANISMS = ("PLAIN", *MECHANISMS)


@dataclass(frozen=True, slots=True)
class WireSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "GSSAPI"  # librdkafka's default
    username: str = ""
    password: str = ""
    ca_location: str | None = None
    ca_pem: str | None = None
    cert_location: str | None = None
    key_location: str | None = None
    key_password: str | None = None
    keystore: str | None = None
    check_hostname: bool = True
    verify: bool = True

    @classmethod
    def from_client_config(cls, conf: Mapping[str, Any]) -> WireSecurity:
        def get(name: str) -> str | None:
            value = conf.get(name)
            return None if value is None else str(value)

        return cls(
            protocol=(get("security.protocol") or "PLAINTEXT").upper(),
            mechanism=get("sasl.mechanisms") or get("sasl.mechanism") or "GSSAPI",
            username=get("sasl.username") or "",
            password=get("sasl.password") or "",
            ca_location=get("ssl.ca.location"),
            ca_pem=get("ssl.ca.pem"),
            cert_location=get("ssl.certificate.location"),
            key_location=get("ssl.key.location"),
            key_password=get("ssl.key.password"),
            keystore=get("ssl.keystore.location"),
            check_hostname=(get("ssl.endpoint.identification.algorithm") or "https").lower()
            == "https",
            verify=(get("enable.ssl.certificate.verification") or "true").lower() == "true",
        )

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of these settings (made once: files are read on the first use)."""
        return _ssl_context(self)

    def _make_ssl_context(self) -> ssl.SSLContext:
        if self.keystore:
            raise CliError(
                "ssl.keystore.location: this command reads a PEM client certificate only "
                "(ssl.keystore.type=PEM, or ssl.certificate.location and ssl.key.location)"
            )
        try:
            ctx = ssl.create_default_context(cafile=self.ca_location, cadata=self.ca_pem)
            if self.cert_location:
                ctx.load_cert_chain(
                    self.cert_location, self.key_location or None, self.key_password or None
                )
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise CliError(f"TLS settings: {exc}") from None
        ctx.check_hostname = self.check_hostname and self.verify
        if not self.verify:
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def authenticate(self, round_trip: RoundTrip, where: str) -> None:
        """SaslHandshake + SaslAuthenticate on a fresh connection; CliError when refused."""
        if self.mechanism not in SASL_MECHANISMS:
            raise CliError(
                f"SASL mechanism {self.mechanism} is not supported by this command "
                f"({', '.join(SASL_MECHANISMS)})"
            )
        hs = round_trip(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": self.mechanism})
        if hs["error_code"] != ErrorCode.NONE:
            raise CliError(
                f"{where} does not enable SASL mechanism {self.mechanism} "
                f"(enabled: {', '.join(hs.get('mechanisms') or []) or 'none'})",
                kind="forbidden",
            )

        def token(data: bytes) -> bytes:
            resp = round_trip(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": data})
            if resp["error_code"] != ErrorCode.NONE:
                detail = resp.get("error_message") or ErrorCode(resp["error_code"]).name
                detail = detail.removeprefix("Authentication failed: ")
                raise CliError(f"Authentication failed at {where}: {detail}", kind="forbidden")
            return bytes(resp.get("auth_bytes") or b"")

        if self.mechanism == "PLAIN":
            token(f"\0{self.username}\0{self.password}".encode())
            return
        scram = ScramClient(self.mechanism, self.username, self.password)
        try:
            scram.verify(token(scram.final(token(scram.first()))))
        except ScramError as exc:
            raise CliError(f"Authentication failed at {where}: {exc}", kind="forbidden") from None


@functools.cache
def _ssl_context(sec: WireSecurity) -> ssl.SSLContext:
    return sec._make_ssl_context()
