"""TLS on a gateway listener: the server SSLContext from Kafka's ``ssl.*`` settings (PEM),
live reload when the key/certificate files change, and the principal of a client certificate.

``ssl.keystore.location`` is one PEM file with the certificate chain and the private key
(``ssl.key.password`` decrypts the key); ``ssl.truststore.location`` holds the CA certificates
client certificates must chain to. TLS 1.2 is the lowest version accepted.

A reload builds a whole new context from the files (off the event loop) and, only if that
succeeds, makes it the one every later handshake switches to (the listening context's SNI
callback, which OpenSSL calls for every ClientHello, with or without SNI). Loading new files
into the live context instead would let a handshake meet the new certificate with the old key
(OpenSSL replaces them one after the other) and would leave a half-loaded context behind a bad
file. Open connections are not touched.
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
from dataclasses import dataclass
from typing import Any

from services.common.logging import get_logger
from services.common.settings import ConfigError

log = get_logger("gateway.tls")

_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
# X.500 attribute names as RFC 2253 writes them (what Kafka's principal builder prints)
_RDN_NAMES = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


@dataclass(frozen=True, slots=True)
class TlsConfig:
    keystore: str
    key_password: str | None
    truststore: str | None
    client_auth: str  # none | requested | required


class ReloadingContext:
    """A server SSLContext whose files are re-read when their modification time changes."""

    def __init__(self, cfg: TlsConfig, listener: str) -> None:
        self.cfg = cfg
        self.listener = listener
        self._stamp, self._current = self._build()
        # the context the listener is created with; each handshake moves to the current one
        self.context = self._current
        self.context.sni_callback = self._select

    def _files(self) -> list[str]:
        return [f for f in (self.cfg.keystore, self.cfg.truststore) if f]

    def _mtimes(self) -> tuple[float, ...]:
        return tuple(os.stat(f).st_mtime_ns for f in self._files())

    def _build(self) -> tuple[tuple[float, ...], ssl.SSLContext]:
        """A fully loaded context from the files as they are now (and their stamp)."""
        try:
            stamp = self._mtimes()
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.verify_mode = _CLIENT_AUTH[self.cfg.client_auth]
            ctx.load_cert_chain(self.cfg.keystore, password=self.cfg.key_password)
            if self.cfg.truststore:
                ctx.load_verify_locations(cafile=self.cfg.truststore)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"invalid setting ssl.keystore.location: listener {self.listener}: {exc}"
            ) from None
        return stamp, ctx

    def _select(self, conn: ssl.SSLObject | ssl.SSLSocket, name: str | None, _: Any) -> None:
        if conn.context is not self._current:
            conn.context = self._current

    async def watch(self, interval_s: float) -> None:
        """Reload whenever the files change; a bad new file is logged and the old kept."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                changed = await asyncio.to_thread(self._mtimes) != self._stamp
                if changed:
                    self._stamp, self._current = await asyncio.to_thread(self._build)
                    log.info("tls_certificates_reloaded", listener=self.listener)
            except (ConfigError, OSError) as exc:
                log.error("tls_reload_failed", listener=self.listener, error=str(exc))


def subject_dn(peercert: dict[str, Any] | None) -> str | None:
    """The certificate subject as RFC 2253 (most specific RDN first), or None without one."""
    if not peercert or not peercert.get("subject"):
        return None
    rdns = []
    for rdn in reversed(peercert["subject"]):
        rdns.append("+".join(f"{_RDN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "", "L" or "U"


_RULE = re.compile(r"\s*RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)\s*")


def parse_mapping_rules(text: str) -> list[_Rule]:
    """``ssl.principal.mapping.rules``: comma-separated ``RULE:pattern/replacement/[LU]`` and
    ``DEFAULT`` (Kafka's SslPrincipalMapper syntax)."""
    rules: list[_Rule] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        if text.startswith("DEFAULT", pos):
            rules.append(_Rule(None))
            pos += len("DEFAULT")
        else:
            m = _RULE.match(text, pos)
            if m is None:
                raise ConfigError(
                    f"invalid setting ssl.principal.mapping.rules: cannot parse {text[pos:]!r}"
                )
            try:
                pattern = re.compile(m.group(1).replace("\\/", "/"))
            except re.error as exc:
                raise ConfigError(f"invalid setting ssl.principal.mapping.rules: {exc}") from None
            rules.append(_Rule(pattern, m.group(2).replace("\\/", "/"), m.group(3)))
            pos = m.end()
        while pos < len(text) and text[pos] in ", ":
            pos += 1
    return rules or [_Rule(None)]


def map_principal(rules: list[_Rule], dn: str) -> str:
    """The principal name of ``dn``: the first rule whose pattern matches it wholly."""
    for rule in rules:
        if rule.pattern is None:
            return dn
        m = rule.pattern.fullmatch(dn)
        if m is None:
            continue
        name = _substitute(rule.replacement, (m.group(0), *m.groups()))
        return name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
    raise ValueError(f"no ssl.principal.mapping.rules rule matches {dn!r}")


def _substitute(replacement: str, groups: tuple[str | None, ...]) -> str:
    """Kafka's ``$n`` references in a mapping rule's replacement (missing groups: empty)."""

    def one(g: re.Match[str]) -> str:
        n = int(g.group(1))
        return (groups[n] or "") if n < len(groups) else ""

    return re.sub(r"\$(\d)", one, replacement)
