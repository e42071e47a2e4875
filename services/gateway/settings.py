"""Gateway settings (Kafka broker property names where Kafka has one)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Self

from pydantic import ValidationInfo, field_validator, model_validator

from services.common.broker_config import parse_ip_overrides
from services.common.listeners import ListenerAddress, ListenerSettings
from services.common.listeners import parse_listener as _parse_listener
from services.common.settings import ENV_PREFIX, ConfigError, ServiceSettings, kafka_prop
from services.common.zone import RackDiscoverySettings
from services.gateway.authorizer import AUTHORIZER_CLASSES
from services.gateway.listeners import (
    DEFAULT_PROTOCOL_MAP,
    Listener,
    parse_listeners,
    parse_protocol_map,
)

LISTENER_SCHEMES = ("PLAINTEXT",)
LISTENER_PREFIX = "listener.name."
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# per-listener overrides Kafka accepts as listener.name.<listener>.<prop>
_PER_LISTENER = {
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.key.password",
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.client.auth",
    "ssl.principal.mapping.rules",
    "sasl.enabled.mechanisms",
    "connections.max.reauth.ms",
}


def parse_listener(value: str, prop: str = "listeners") -> ListenerAddress:
    return _parse_listener(value, prop, LISTENER_SCHEMES)


# KAFKAPY_LISTENER_NAME_<LISTENER>_<PROP>: the property part is matched longest first, so
# listener names may contain "_" (SASL_SSL_PLAIN_SASL_JAAS_CONFIG -> sasl_ssl + plain.sasl...)
_LISTENER_ENV = ENV_PREFIX + "LISTENER_NAME_"
_ENV_PROPS = sorted(
    ((p.upper().replace(".", "_").replace("-", "_"), p) for p in (
        *_PER_LISTENER, *(f"{m.lower()}.sasl.jaas.config" for m in SASL_MECHANISMS)
    )),
    key=lambda item: -len(item[0]),
)  # fmt: skip


def listener_env(env: Mapping[str, str]) -> dict[str, str]:
    """``listener.name.<l>.<prop>`` settings given as ``KAFKAPY_LISTENER_NAME_<L>_<PROP>``
    environment variables (so secrets such as PLAIN users' JAAS lines can come from a
    Kubernetes Secret instead of the command line)."""
    out: dict[str, str] = {}
    for var, value in env.items():
        if not var.startswith(_LISTENER_ENV):
            continue
        rest = var[len(_LISTENER_ENV) :]
        for suffix, prop in _ENV_PROPS:
            if rest.endswith("_" + suffix) and len(rest) > len(suffix) + 1:
                out[f"{LISTENER_PREFIX}{rest[: -len(suffix) - 1].lower()}.{prop}"] = value
                break
        else:
            raise ConfigError(f"unknown setting {var}")
    return out


def _check_listener_key(key: str) -> None:
    rest = key[len(LISTENER_PREFIX) :]
    name, _, prop = rest.partition(".")
    mech, _, jaas = prop.partition(".")
    ok = bool(name) and (
        prop in _PER_LISTENER or (mech.upper() in SASL_MECHANISMS and jaas == "sasl.jaas.config")
    )
    if not ok:
        raise ConfigError(f"unknown setting {key}")


class GatewaySettings(ServiceSettings, ListenerSettings, RackDiscoverySettings):
    LISTENER_SCHEMES = LISTENER_SCHEMES
    node_id: int = kafka_prop(
        ...,
        "node.id",
        "this gateway's node id, as clients see it (required; -1: generated, from 1001)",
        ge=-1,
    )
    listeners: str = kafka_prop(
        "PLAINTEXT://127.0.0.1:9092",
        "listeners",
        "Kafka listeners, NAME://host:port[,NAME://host:port...] (host:port: one PLAINTEXT)",
    )
    advertised_listeners: str | None = kafka_prop(
        None, "advertised.listeners", "addresses clients are told, per listener name"
    )
    listener_security_protocol_map: str = kafka_prop(
        DEFAULT_PROTOCOL_MAP,
        "listener.security.protocol.map",
        "listener name -> PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL",
    )
    ssl_keystore_location: str | None = kafka_prop(
        None, "ssl.keystore.location", "PEM file with the certificate chain and private key"
    )
    ssl_keystore_type: str = kafka_prop("PEM", "ssl.keystore.type", "PEM (the only type)")
    ssl_key_password: str | None = kafka_prop(
        None, "ssl.key.password", "password of the keystore's private key"
    )
    ssl_truststore_location: str | None = kafka_prop(
        None, "ssl.truststore.location", "PEM file of CA certificates client certificates chain to"
    )
    ssl_truststore_type: str = kafka_prop("PEM", "ssl.truststore.type", "PEM (the only type)")
    ssl_client_auth: str = kafka_prop(
        "none", "ssl.client.auth", "client certificates: none | requested | required"
    )
    ssl_principal_mapping_rules: str = kafka_prop(
        "DEFAULT",
        "ssl.principal.mapping.rules",
        "certificate subject -> principal name (RULE:pattern/replacement/[LU], DEFAULT)",
    )
    ssl_reload_check_interval_ms: int = kafka_prop(
        5000,
        "kafkapy.ssl.reload.check.interval.ms",
        "how often the keystore/truststore files are checked for changes (reloaded live)",
        gt=0,
    )
    sasl_enabled_mechanisms: str = kafka_prop(
        ",".join(SASL_MECHANISMS),
        "sasl.enabled.mechanisms",
        "SASL mechanisms offered on SASL listeners (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)",
    )
    connections_max_reauth_ms: int = kafka_prop(
        0,
        "connections.max.reauth.ms",
        "SASL session lifetime (KIP-368); 0: sessions do not expire",
        ge=0,
    )
    connection_failed_authentication_delay_ms: int = kafka_prop(
        100,
        "connection.failed.authentication.delay.ms",
        "delay before a connection that failed authentication is closed",
        ge=0,
    )
    authorizer_class_name: str = kafka_prop(
        "",
        "authorizer.class.name",
        "empty: no authorization; Kafka's AclAuthorizer/StandardAuthorizer class name: ACLs on",
    )
    super_users: str = kafka_prop(
        "", "super.users", "principals allowed everything, ';'-separated (User:admin;User:ops)"
    )
    allow_everyone_if_no_acl_found: bool = kafka_prop(
        False, "allow.everyone.if.no.acl.found", "allow access to resources without any ACL"
    )
    quota_window_num: int = kafka_prop(
        11, "quota.window.num", "samples a client quota's rate is measured over", ge=2
    )
    quota_window_size_seconds: int = kafka_prop(
        1, "quota.window.size.seconds", "time span of one client quota sample", ge=1
    )
    listener_name_configs: dict[str, str] = kafka_prop(
        {},
        "listener.name.*",
        "per-listener settings: listener.name.<listener>.<setting> (e.g. "
        "listener.name.sasl_ssl.plain.sasl.jaas.config)",
    )
    broker_rack: str | None = kafka_prop(None, "broker.rack", "zone of this gateway")
    auto_create_topics_enable: bool = kafka_prop(
        True, "auto.create.topics.enable", "create unknown topics named in Metadata requests"
    )
    socket_request_max_bytes: int = kafka_prop(
        104857600,
        "socket.request.max.bytes",
        "largest request frame; bigger ones close the connection",
        gt=0,
    )
    message_max_bytes: int = kafka_prop(
        1048588,
        "message.max.bytes",
        "largest record batch (default of the topic's max.message.bytes)",
        gt=0,
    )
    connections_max_idle_ms: int = kafka_prop(
        600000, "connections.max.idle.ms", "idle connections are closed after this long", gt=0
    )
    max_connections: int = kafka_prop(
        2147483647,
        "max.connections",
        "client connections this gateway keeps open; more are closed right after accept",
        ge=0,
    )
    max_connections_per_ip: int = kafka_prop(
        2147483647,
        "max.connections.per.ip",
        "connections accepted from one IP address; more are closed right after accept",
        ge=0,
    )
    max_connections_per_ip_overrides: str = kafka_prop(
        "",
        "max.connections.per.ip.overrides",
        "per-IP or hostname limits overriding max.connections.per.ip ('host:count,...')",
    )
    request_timeout_ms: int = kafka_prop(
        30000, "request.timeout.ms", "bound of internal calls made for one client request", gt=0
    )
    producer_id_block_size: int = kafka_prop(
        1000,
        "kafkapy.producer.id.block.size",
        "producer ids claimed from ZooKeeper at a time",
        gt=0,
    )
    max_inflight_requests: int = kafka_prop(
        128,
        "kafkapy.connection.max.inflight.requests",
        "requests handled concurrently per connection before reading pauses",
        gt=0,
    )
    coordinator_lookup_wait_ms: int = kafka_prop(
        3000,
        "kafkapy.coordinator.lookup.wait.ms",
        "how long FindCoordinator waits for a coordinator being created or placed before "
        "answering COORDINATOR_NOT_AVAILABLE (bounded by request.timeout.ms)",
        ge=0,
    )
    shutdown_timeout_ms: int = kafka_prop(
        15000,
        "kafkapy.shutdown.timeout.ms",
        "how long in-flight requests may run after SIGTERM",
        ge=0,
    )
    auto_create_wait_ms: int = kafka_prop(
        5000,
        "kafkapy.auto.create.wait.ms",
        "how long a Metadata request waits for the controller when auto-creating a topic",
        ge=0,
    )
    fetch_node_max_bytes: int = kafka_prop(
        8 * 1024 * 1024,
        "kafkapy.fetch.node.max.bytes",
        "most record bytes one storage node reads for one consumer Fetch (its share of the "
        "Fetch's max_bytes is cut to this; the first batch still comes whole); 0 = no limit",
        ge=0,
    )

    @classmethod
    def load(
        cls,
        argv: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> Self:
        env = os.environ if env is None else env
        from_env = listener_env(env)
        try:
            settings = super().load(argv, env, **overrides)
        except ConfigError as exc:  # a model-level check: its own message names the setting
            msg = str(exc)
            if msg.startswith("invalid setting ?: Value error, "):
                raise ConfigError(msg.removeprefix("invalid setting ?: Value error, ")) from None
            raise
        if not from_env:
            return settings
        merged = {**from_env, **settings.listener_name_configs}  # flags win, as for the rest
        return settings.model_copy(update={"listener_name_configs": merged})

    @classmethod
    def _parse_flags(cls, argv: Sequence[str], props: Mapping[str, str]) -> dict[str, Any]:
        """Also takes ``--listener.name.<l>.<prop> VALUE`` (and ``--override``/``=`` forms)."""
        rest: list[str] = []
        per_listener: dict[str, str] = {}
        items = list(argv)
        i = 0
        while i < len(items):
            arg = items[i]
            key = value = None
            if arg.startswith("--" + LISTENER_PREFIX):
                key, sep, value = arg[2:].partition("=")
                if not sep:
                    if i + 1 >= len(items):
                        raise ConfigError(f"setting {key} needs a value")
                    value = items[i + 1]
                    i += 1
            elif (
                arg == "--override"
                and i + 1 < len(items)
                and items[i + 1].startswith(LISTENER_PREFIX)
            ):
                key, _, value = items[i + 1].partition("=")
                i += 1
            if key is None:
                rest.append(arg)
            else:
                _check_listener_key(key)
                per_listener[key.lower()] = value or ""
            i += 1
        values = super()._parse_flags(rest, props)
        if per_listener:
            values["listener_name_configs"] = per_listener
        return values

    @field_validator("listener_name_configs")
    @classmethod
    def _listener_keys(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            _check_listener_key(key)
        return {k.lower(): val for k, val in v.items()}

    @field_validator("listener_security_protocol_map")
    @classmethod
    def _protocol_map(cls, v: str) -> str:
        parse_protocol_map(v)
        return v

    @field_validator("listeners", "advertised_listeners")
    @classmethod
    def _check_listener(cls, v: str | None, info: ValidationInfo) -> str | None:
        return v  # checked with the protocol map, in _check_listeners

    @model_validator(mode="after")
    def _check_listeners(self) -> Self:
        pmap = parse_protocol_map(self.listener_security_protocol_map)
        for prop, value in (
            ("listeners", self.listeners),
            ("advertised.listeners", self.advertised_listeners),
        ):
            if value is not None:
                parse_listeners(value, prop, pmap)  # ConfigError: one readable line
        return self

    @field_validator("ssl_keystore_type", "ssl_truststore_type")
    @classmethod
    def _pem_only(cls, v: str) -> str:
        if v.upper() != "PEM":
            raise ValueError(f"only PEM is supported, got {v!r}")
        return "PEM"

    @field_validator("ssl_client_auth")
    @classmethod
    def _client_auth(cls, v: str) -> str:
        if v.lower() not in ("none", "requested", "required"):
            raise ValueError(f"must be none, requested or required, got {v!r}")
        return v.lower()

    @field_validator("sasl_enabled_mechanisms")
    @classmethod
    def _mechanisms(cls, v: str) -> str:
        for m in (x.strip().upper() for x in v.split(",") if x.strip()):
            if m not in SASL_MECHANISMS:
                raise ValueError(f"unsupported mechanism {m!r} ({', '.join(SASL_MECHANISMS)})")
        return v

    @field_validator("authorizer_class_name")
    @classmethod
    def _authorizer(cls, v: str) -> str:
        if v.strip() and v.strip() not in AUTHORIZER_CLASSES:
            raise ValueError(f"unknown authorizer {v!r} ({', '.join(AUTHORIZER_CLASSES)})")
        return v.strip()

    # ---- listeners ------------------------------------------------------------------------
    @property
    def protocol_map(self) -> dict[str, str]:
        return parse_protocol_map(self.listener_security_protocol_map)

    @property
    def kafka_listeners(self) -> list[Listener]:
        return parse_listeners(self.listeners, "listeners", self.protocol_map)

    @property
    def advertised_kafka_listeners(self) -> list[Listener] | None:
        if not self.advertised_listeners:
            return None
        return parse_listeners(self.advertised_listeners, "advertised.listeners", self.protocol_map)

    @property
    def listener(self) -> ListenerAddress:
        """The first listener (the one local tools and readiness probes use)."""
        return self.kafka_listeners[0].address

    def advertised(self, bound_port: int) -> ListenerAddress:
        from services.gateway.listeners import advertised_addresses

        first = self.kafka_listeners[0]
        return advertised_addresses(
            [first],
            [a for a in self.advertised_kafka_listeners or [] if a.name == first.name],
            {first.name: bound_port},
        )[first.name]

    def listener_config(self, listener: str, prop: str) -> Any:
        """``listener.name.<listener>.<prop>`` if set, else the setting ``prop`` (None if none)."""
        key = f"{LISTENER_PREFIX}{listener.lower()}.{prop}"
        if key in self.listener_name_configs:
            return self.listener_name_configs[key]
        field = type(self).properties().get(prop)
        return getattr(self, field) if field is not None else None

    @field_validator("max_connections_per_ip_overrides")
    @classmethod
    def _ip_overrides(cls, v: str) -> str:
        parse_ip_overrides(v)  # ValueError: one readable line
        return v
