"""Config entries as DescribeConfigs and CreateTopics (v5+) report them.

Topic configs come from ``services.common.topic_config``: an override is DYNAMIC_TOPIC_CONFIG,
otherwise the broker-level default applies (DEFAULT_CONFIG, or STATIC_BROKER_CONFIG when this
gateway's own setting was set explicitly, which is the case for ``message.max.bytes``). Broker
entries are the gateway's own settings plus the broker-level defaults of the topic table.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from services.common.topic_config import (
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    TopicConfigDef,
    format_value,
)
from services.gateway.context import GatewayServices
from services.gateway.handlers.base import Body

# Broker-level default names this gateway sets itself (broker name -> settings field).
_GATEWAY_OWNED = {"message.max.bytes": "message_max_bytes"}


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


def broker_default(s: GatewayServices, defn: TopicConfigDef) -> tuple[str, ConfigSource]:
    """Value and source of the cluster-wide default of one topic config."""
    field = _GATEWAY_OWNED.get(defn.broker_name)
    if field is not None:
        explicit = field in s.settings.model_fields_set
        return (
            format_value(getattr(s.settings, field)),
            ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG,
        )
    return format_value(defn.default), ConfigSource.DEFAULT_CONFIG


def topic_entries(s: GatewayServices, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    out = []
    for name, defn in sorted(TOPIC_CONFIGS.items()):
        default_value, default_source = broker_default(s, defn)
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        if name in overrides:
            value, source = overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG
            synonyms.append((name, value, source))
        else:
            value, source = default_value, default_source
        synonyms.append((defn.broker_name, default_value, default_source))
        out.append(ConfigEntry(name, value, source, defn.type, defn.doc, synonyms=tuple(synonyms)))
    return out


def broker_entries(s: GatewayServices) -> list[ConfigEntry]:
    st = s.settings
    explicit = st.model_fields_set

    def own(
        name: str, field: str, value: Any, ctype: ConfigType, read_only: bool = True
    ) -> ConfigEntry:
        source = (
            ConfigSource.STATIC_BROKER_CONFIG if field in explicit else ConfigSource.DEFAULT_CONFIG
        )
        text = None if value is None else format_value(value)
        doc = type(st).model_fields[field].description or ""
        return ConfigEntry(
            name, text, source, ctype, doc, read_only=read_only, synonyms=((name, text, source),)
        )

    adv = s.endpoint
    entries = [
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
            "message.max.bytes",
            "message_max_bytes",
            st.message_max_bytes,
            ConfigType.INT,
            read_only=False,
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
    taken = {e.name for e in entries}
    for defn in sorted(TOPIC_CONFIGS.values(), key=lambda d: d.broker_name):
        if defn.broker_name in taken:
            continue
        value, source = broker_default(s, defn)
        entries.append(
            ConfigEntry(
                defn.broker_name,
                value,
                source,
                defn.type,
                defn.doc,
                synonyms=((defn.broker_name, value, source),),
            )
        )
    return entries


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
