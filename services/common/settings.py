"""Typed service settings loaded from flags and environment variables.

Each service declares one pydantic model whose field aliases are Kafka's
property names (``num.partitions``, ``zookeeper.connect``...). Values come from,
in increasing precedence: defaults, environment (``KAFKAPY_NUM_PARTITIONS``),
and flags (``--num.partitions 3`` or ``--override num.partitions=3``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any, Self

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

ENV_PREFIX = "KAFKAPY_"


class ConfigError(ValueError):
    """A setting is unknown or has a bad value; the message is one readable line."""


def env_name(prop: str) -> str:
    return ENV_PREFIX + prop.upper().replace(".", "_").replace("-", "_")


def kafka_prop(
    default: Any,
    name: str,
    description: str = "",
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
) -> Any:
    """A field whose external name is the Kafka property ``name``, with optional bounds
    (a value outside them is a ConfigError naming the property)."""
    return Field(
        default,
        alias=name,
        validation_alias=AliasChoices(name, name.replace(".", "_")),
        description=description,
        gt=gt,
        ge=ge,
        le=le,
    )


class ServiceSettings(BaseModel):
    """Settings every service shares."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid")

    zookeeper_connect: str = kafka_prop(
        "127.0.0.1:2181", "zookeeper.connect", "ZooKeeper hosts, host:port[,host:port][/chroot]"
    )
    zookeeper_session_timeout_ms: int = kafka_prop(
        18000, "zookeeper.session.timeout.ms", "ZooKeeper session timeout"
    )
    admin_host: str = kafka_prop(
        "127.0.0.1", "admin.host", "bind address of /metrics, /healthz, /readyz"
    )
    admin_port: int = kafka_prop(
        0, "admin.port", "port of the admin HTTP server (0 = any free port)"
    )
    log_format: str = kafka_prop("auto", "log.format", "auto | json | console")
    log_level: str = kafka_prop("info", "log.level", "debug | info | warning | error")
    # ---- ZooKeeper authentication and znode ACLs (Kafka's zookeeper.set.acl) ----------
    zookeeper_set_acl: bool = kafka_prop(
        False,
        "zookeeper.set.acl",
        "create znodes with ACLs: creator-all (+ world-read except /config/users, /kafka-acl*)",
    )
    zookeeper_digest_auth_file: str | None = kafka_prop(
        None,
        "zookeeper.digest.auth.file",
        "file holding user:password for ZooKeeper's digest scheme (never on the command line)",
    )
    # ---- TLS to ZooKeeper (Kafka's KIP-515 names; PEM files only) ---------------------
    zookeeper_connection_timeout_ms: int | None = kafka_prop(
        None,
        "zookeeper.connection.timeout.ms",
        "how long a service waits for ZooKeeper at start before it exits "
        "(default: zookeeper.session.timeout.ms, at least 15000)",
        gt=0,
    )
    zookeeper_ssl_client_enable: bool = kafka_prop(
        False, "zookeeper.ssl.client.enable", "connect to ZooKeeper over TLS (its secureClientPort)"
    )
    zookeeper_client_cnxn_socket: str | None = kafka_prop(
        None,
        "zookeeper.clientCnxnSocket",
        "accepted for Kafka configs (ClientCnxnSocketNetty); kazoo has one socket implementation",
    )
    zookeeper_ssl_keystore_location: str | None = kafka_prop(
        None,
        "zookeeper.ssl.keystore.location",
        "PEM: the client certificate chain and its private key, in one file",
    )
    zookeeper_ssl_keystore_password: str | None = kafka_prop(
        None, "zookeeper.ssl.keystore.password", "password of the keystore's encrypted private key"
    )
    zookeeper_ssl_keystore_type: str | None = kafka_prop(
        None, "zookeeper.ssl.keystore.type", "PEM (the only type kafka-py reads)"
    )
    zookeeper_ssl_truststore_location: str | None = kafka_prop(
        None,
        "zookeeper.ssl.truststore.location",
        "PEM: the CA(s) ZooKeeper's certificate must chain to (default: the system's CAs)",
    )
    zookeeper_ssl_truststore_password: str | None = kafka_prop(
        None, "zookeeper.ssl.truststore.password", "accepted; a PEM truststore has no password"
    )
    zookeeper_ssl_truststore_type: str | None = kafka_prop(
        None, "zookeeper.ssl.truststore.type", "PEM (the only type kafka-py reads)"
    )
    zookeeper_ssl_endpoint_identification_algorithm: str = kafka_prop(
        "HTTPS",
        "zookeeper.ssl.endpoint.identification.algorithm",
        "HTTPS: ZooKeeper's certificate must name the host dialled; empty: not checked",
    )
    # ---- mutual TLS between services (internal gRPC) ----------------------------------
    internal_ssl_enabled: bool = kafka_prop(
        False, "internal.ssl.enabled", "mutual TLS on every internal gRPC server and channel"
    )
    internal_ssl_keystore_location: str | None = kafka_prop(
        None,
        "internal.ssl.keystore.location",
        "PEM: this service's certificate chain (and key unless internal.ssl.key.location)",
    )
    internal_ssl_key_location: str | None = kafka_prop(
        None, "internal.ssl.key.location", "PEM: this service's private key (unencrypted)"
    )
    internal_ssl_truststore_location: str | None = kafka_prop(
        None, "internal.ssl.truststore.location", "PEM: the cluster CA(s) peers must chain to"
    )
    internal_ssl_reload_check_interval_ms: int = kafka_prop(
        5000,
        "internal.ssl.reload.check.interval.ms",
        "how often clients check the PEM files for a rotation (servers check per handshake)",
        gt=0,
    )

    @model_validator(mode="after")
    def _internal_ssl_files(self) -> Self:
        if self.internal_ssl_enabled:
            for name in ("keystore", "truststore"):
                if not getattr(self, f"internal_ssl_{name}_location"):
                    raise ValueError(
                        f"invalid setting internal.ssl.{name}.location: "
                        "required when internal.ssl.enabled is true"
                    )
        if self.zookeeper_set_acl and not self.zookeeper_digest_auth_file:
            raise ValueError(
                "invalid setting zookeeper.digest.auth.file: required when zookeeper.set.acl is true"
            )
        self._check_zookeeper_ssl()
        return self

    def _check_zookeeper_ssl(self) -> None:
        if not self.zookeeper_ssl_client_enable:
            return
        for store in ("keystore", "truststore"):
            kind = getattr(self, f"zookeeper_ssl_{store}_type")
            if kind is not None and kind.upper() != "PEM":
                raise ValueError(
                    f"invalid setting zookeeper.ssl.{store}.type: {kind} is not supported, "
                    "kafka-py reads PEM files only (convert the store with keytool and openssl)"
                )
        algorithm = self.zookeeper_ssl_endpoint_identification_algorithm
        if algorithm.upper() not in ("HTTPS", ""):
            raise ValueError(
                "invalid setting zookeeper.ssl.endpoint.identification.algorithm: "
                f"{algorithm!r} is not supported (HTTPS, or empty to disable)"
            )

    @classmethod
    def properties(cls) -> dict[str, str]:
        """Kafka property name -> field name."""
        return {(f.alias or name): name for name, f in cls.model_fields.items()}

    @classmethod
    def load(
        cls,
        argv: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> Self:
        """Build settings from env vars, flags and keyword overrides (field names)."""
        env = os.environ if env is None else env
        props = cls.properties()
        values: dict[str, Any] = {}
        for prop, field in props.items():
            if (raw := env.get(env_name(prop))) is not None:
                values[field] = raw
        if argv:
            values.update(cls._parse_flags(argv, props))
        values.update(overrides)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            err = exc.errors()[0]
            if not err["loc"]:  # a model validator's message names its settings itself
                raise ConfigError(str(err["msg"]).removeprefix("Value error, ")) from None
            loc = str(err["loc"][0])
            info = cls.model_fields.get(loc)
            name = (info.alias if info else None) or loc
            raise ConfigError(f"invalid setting {name}: {err['msg']}") from None

    @classmethod
    def _parse_flags(cls, argv: Sequence[str], props: Mapping[str, str]) -> dict[str, Any]:
        parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
        for prop, field in props.items():
            parser.add_argument(f"--{prop}", dest=field, default=None)
        parser.add_argument("--override", action="append", default=[])
        try:
            ns, unknown = parser.parse_known_args(list(argv))
        except argparse.ArgumentError as exc:
            raise ConfigError(str(exc)) from None
        if unknown:
            raise ConfigError(f"unknown setting {unknown[0]}")
        values = {k: v for k, v in vars(ns).items() if v is not None and k != "override"}
        for item in ns.override:
            key, sep, value = item.partition("=")
            if not sep or key not in props:
                raise ConfigError(f"unknown setting in --override {item!r}")
            values[props[key]] = value
        return values

    def as_properties(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)
