"""Config entries as DescribeConfigs and CreateTopics (v5+) report them.

Topic configs come from ``services.common.topic_config``: an override is DYNAMIC_TOPIC_CONFIG,
otherwise the broker-level default applies: the cluster-wide dynamic default
(DYNAMIC_DEFAULT_BROKER_CONFIG), this gateway's own setting when set explicitly
(STATIC_BROKER_CONFIG, for ``message.max.bytes``) or DEFAULT_CONFIG. Broker entries are the
dynamic broker configs (``services.common.broker_config``) resolved for one broker id, plus
this gateway's read-only settings when the id is its own.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from services.common.broker_config import (
    DEFAULT_ENTITY,
    DYNAMIC_BROKER_CONFIGS,
    GATEWAY,
    STORAGE,
    BrokerConfigDef,
    Resolved,
    default_text,
    resolve,
)
from services.common.broker_ids import services_of_broker_id
from services.common.topic_config import (
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    TopicConfigDef,
    format_value,
)
from services.gateway.context import GatewayServices
from services.gateway.dynamic_config import static_configs
from services.gateway.handlers.base import Body


def is_broker_id(s: GatewayServices, broker_id: int) -> bool:
    """A broker id this gateway answers BROKER resources for: its own, or any registered
    gateway or storage node (``services.common.broker_ids``)."""
    return broker_id == s.node_id or services_of_broker_id(s.cache, broker_id).known


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    type: ConfigType
    doc: str
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...] = ()


def _static(s: GatewayServices, broker_id: int, defn: BrokerConfigDef) -> Mapping[str, str]:
    """STATIC_BROKER_CONFIG layer of broker ``broker_id`` for one config: this gateway's own
    settings for what gateways apply, the storage node's published ones for what it applies
    (another gateway's flags are not known here)."""
    if GATEWAY in defn.services and broker_id == s.node_id:
        return static_configs(s.settings)
    reg = s.cache.brokers.get(broker_id)
    if STORAGE in defn.services and reg is not None:
        return dict(reg.static_configs)
    return {}


def _resolve(s: GatewayServices, broker_id: int | None, defn: BrokerConfigDef) -> Resolved:
    """A broker config of ``broker_id`` (None: the cluster-wide default, as topics see it)."""
    static: Mapping[str, str]
    if broker_id is None:
        per_broker: Mapping[str, str] = {}
        default = s.broker_configs.entity(DEFAULT_ENTITY)
        static = static_configs(s.settings) if GATEWAY in defn.services else {}
    else:
        per_broker, default = s.broker_configs.layers(broker_id)
        static = _static(s, broker_id, defn)
    return resolve(defn.name, per_broker, default, static, default_text(defn))


def broker_default(s: GatewayServices, defn: TopicConfigDef) -> Resolved:
    """Value, source and synonyms of the cluster-wide default of one topic config."""
    return _resolve(s, None, DYNAMIC_BROKER_CONFIGS[defn.broker_name])


def _no_server_default_entry(defn: TopicConfigDef, override: str | None) -> ConfigEntry:
    if override is None:
        return ConfigEntry(
            defn.name, format_value(defn.default), ConfigSource.DEFAULT_CONFIG, defn.type, defn.doc
        )
    source = ConfigSource.DYNAMIC_TOPIC_CONFIG
    return ConfigEntry(
        defn.name, override, source, defn.type, defn.doc, synonyms=((defn.name, override, source),)
    )


def topic_entries(s: GatewayServices, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    out = []
    for name, defn in sorted(TOPIC_CONFIGS.items()):
        if not defn.broker_name:  # no broker-wide default: the override, else the default
            out.append(_no_server_default_entry(defn, overrides.get(name)))
            continue
        default = broker_default(s, defn)
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        value: str | None
        if name in overrides:
            value, source = overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG
            synonyms.append((name, value, source))
        else:
            value, source = default.value, default.source
        synonyms.extend(default.synonyms)
        out.append(ConfigEntry(name, value, source, defn.type, defn.doc, synonyms=tuple(synonyms)))
    return out


def _own_entries(s: GatewayServices) -> list[ConfigEntry]:
    """This gateway's read-only settings (only a restart changes them)."""
    st = s.settings
    explicit = st.model_fields_set

    def own(name: str, field: str, value: Any, ctype: ConfigType) -> ConfigEntry:
        source = (
            ConfigSource.STATIC_BROKER_CONFIG if field in explicit else ConfigSource.DEFAULT_CONFIG
        )
        text = None if value is None else format_value(value)
        doc = type(st).model_fields[field].description or ""
        return ConfigEntry(
            name, text, source, ctype, doc, read_only=True, synonyms=((name, text, source),)
        )

    adv = s.endpoint
    return [
        own("broker.id", "node_id", st.node_id, ConfigType.INT),
        own("broker.rack", "broker_rack", st.broker_rack, ConfigType.STRING),
        own("listeners", "listeners", st.listeners, ConfigType.STRING),
        own(
            "advertised.listeners",
            "advertised_listeners",
            f"PLAINTEXT://{adv.host}:{adv.port}",
            ConfigType.STRING,
        ),
        own(
            "auto.create.topics.enable",
            "auto_create_topics_enable",
            st.auto_create_topics_enable,
            ConfigType.BOOLEAN,
        ),
        own(
            "socket.request.max.bytes",
            "socket_request_max_bytes",
            st.socket_request_max_bytes,
            ConfigType.INT,
        ),
        own(
            "connections.max.idle.ms",
            "connections_max_idle_ms",
            st.connections_max_idle_ms,
            ConfigType.LONG,
        ),
        own("zookeeper.connect", "zookeeper_connect", st.zookeeper_connect, ConfigType.STRING),
        own(
            "zookeeper.session.timeout.ms",
            "zookeeper_session_timeout_ms",
            st.zookeeper_session_timeout_ms,
            ConfigType.INT,
        ),
    ]


def broker_entries(s: GatewayServices, broker_id: int) -> list[ConfigEntry]:
    """Every dynamic broker config of ``broker_id`` with its source (and, for this gateway,
    its read-only settings too)."""
    entries = _own_entries(s) if broker_id == s.node_id else []
    for name, defn in sorted(DYNAMIC_BROKER_CONFIGS.items()):
        r = _resolve(s, broker_id, defn)
        entries.append(
            ConfigEntry(name, r.value, r.source, defn.type, defn.doc, synonyms=r.synonyms)
        )
    return entries


def default_broker_entries(s: GatewayServices) -> list[ConfigEntry]:
    """The BROKER resource "": the cluster-wide dynamic defaults that are set, with the
    built-in default as a synonym (Kafka lists every synonym but the per-broker one)."""
    out = []
    for name, value in sorted(s.broker_configs.entity(DEFAULT_ENTITY).items()):
        defn = DYNAMIC_BROKER_CONFIGS.get(name)
        src = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        synonyms: tuple[tuple[str, str | None, ConfigSource], ...] = ((name, value, src),)
        if defn is not None:
            synonyms += ((name, default_text(defn), ConfigSource.DEFAULT_CONFIG),)
        out.append(
            ConfigEntry(
                name,
                value,
                src,
                defn.type if defn else ConfigType.STRING,
                defn.doc if defn else "",
                synonyms=synonyms,
            )
        )
    return out


def describe_entries(
    entries: list[ConfigEntry],
    keys: Collection[str] | None,
    version: int,
    include_synonyms: bool,
    include_documentation: bool,
) -> list[Body]:
    """DescribeConfigs ``configs`` array (``keys`` None or empty = all)."""
    out = []
    for e in entries:
        if keys and e.name not in keys:
            continue
        out.append(
            {
                "name": e.name,
                "value": e.value,
                "read_only": e.read_only,
                "config_source": int(e.source),
                "is_sensitive": e.sensitive,
                "synonyms": (
                    [{"name": n, "value": v, "source": int(src)} for n, v, src in e.synonyms]
                    if include_synonyms
                    else []
                ),
                "config_type": int(e.type) if version >= 3 else 0,
                "documentation": e.doc if include_documentation else None,
            }
        )
    return out


def topic_config_entries(s: GatewayServices, overrides: Mapping[str, str]) -> list[Body]:
    """CreateTopics v5+ ``configs`` array."""
    return [
        {
            "name": e.name,
            "value": e.value,
            "read_only": e.read_only,
            "config_source": int(e.source),
            "is_sensitive": e.sensitive,
        }
        for e in topic_entries(s, overrides)
    ]
