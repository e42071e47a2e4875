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

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

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
            loc = str(err["loc"][0]) if err["loc"] else "?"
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
