"""What one listener needs to secure its connections: its TLS context, its SASL settings and
the principal mapping of client certificates; :meth:`ListenerSecurity.session` starts the
Session of a new connection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.common.settings import ConfigError
from services.gateway.listeners import Listener
from services.gateway.sasl import ANONYMOUS, SaslConfig, Session, plain_users
from services.gateway.settings import GatewaySettings
from services.gateway.tls import (
    ReloadingContext,
    TlsConfig,
    map_principal,
    parse_mapping_rules,
    subject_dn,
)


@dataclass(slots=True)
class ListenerSecurity:
    listener: Listener
    tls: ReloadingContext | None = None
    sasl: SaslConfig | None = None
    rules: list[Any] | None = None

    def session(self, peercert: dict[str, Any] | None) -> Session:
        """A new connection's Session; ValueError when its certificate maps to no principal."""
        principal = ANONYMOUS
        dn = subject_dn(peercert) if self.tls is not None else None
        if dn is not None:
            principal = "User:" + map_principal(self.rules or parse_mapping_rules("DEFAULT"), dn)
        return Session(self.listener, self.sasl, principal)


def listener_security(settings: GatewaySettings, listener: Listener) -> ListenerSecurity:
    """Build (and check: ConfigError) the security of ``listener`` from the settings."""

    def conf(prop: str) -> Any:
        return settings.listener_config(listener.name, prop)

    sec = ListenerSecurity(listener)
    if listener.tls:
        keystore = conf("ssl.keystore.location")
        if not keystore:
            raise ConfigError(
                f"invalid setting ssl.keystore.location: listener {listener.name} uses "
                f"{listener.protocol} and needs a keystore"
            )
        client_auth = str(conf("ssl.client.auth")).lower()
        if client_auth != "none" and not conf("ssl.truststore.location"):
            raise ConfigError(
                f"invalid setting ssl.truststore.location: listener {listener.name} has "
                f"ssl.client.auth={client_auth} and needs a truststore"
            )
        sec.tls = ReloadingContext(
            TlsConfig(
                keystore,
                conf("ssl.key.password"),
                conf("ssl.truststore.location"),
                client_auth,
            ),
            listener.name,
        )
        sec.rules = parse_mapping_rules(str(conf("ssl.principal.mapping.rules")))
    if listener.sasl:
        mechanisms = tuple(
            m.strip().upper() for m in str(conf("sasl.enabled.mechanisms")).split(",") if m.strip()
        )
        sec.sasl = SaslConfig(
            mechanisms,
            plain_users(settings.listener_config(listener.name, "plain.sasl.jaas.config")),
            int(conf("connections.max.reauth.ms")),
            settings.connection_failed_authentication_delay_ms,
        )
    return sec
