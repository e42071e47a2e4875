"""Dynamic broker configs: Kafka's validation errors, value layers and sources, and the
catalogue covering every setting the services take."""

from __future__ import annotations

import pytest

from services.common.broker_config import (
    DYNAMIC_BROKER_CONFIGS,
    READ_ONLY_BROKER_CONFIGS,
    entity_name,
    list_default,
    parse_ip_overrides,
    resolve,
    typed_layer,
    validate_broker_configs,
)
from services.common.broker_config_store import BrokerConfigStore
from services.common.errors import ErrorCode, KafkaError
from services.common.topic_config import TOPIC_CONFIGS, ConfigSource
from services.common.zk import layout
from services.controller.validation import ConfigOp, OpType, apply_config_ops
from services.gateway.settings import GatewaySettings
from services.storage.settings import StorageSettings


def _refused(name: str, configs: dict[str, str]) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        validate_broker_configs(name, configs)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    return info.value


def test_read_only_configs_are_refused_with_kafkas_message() -> None:
    exc = _refused("0", {"log.dirs": "/x", "broker.id": "3", "log.retention.ms": "5"})
    assert exc.message == (
        "Invalid config value for resource ConfigResource(type=BROKER, name='0'): "
        "Cannot update these configs dynamically: Set(broker.id, log.dirs)"
    )
    assert (
        "Unknown broker configs: Set(no.such.config)"
        in _refused("", {"no.such.config": "1"}).message
    )


def test_values_are_typed_and_checked() -> None:
    typed = validate_broker_configs(
        "",
        {
            "log.retention.ms": "1000",
            "log.cleanup.policy": "compact,delete",
            "log.cleaner.io.max.bytes.per.second": "1e6",
            "max.connections.per.ip.overrides": "127.0.0.2:5, host-a:0",
            "log.message.timestamp.type": "LogAppendTime",
        },
    )
    assert typed["log.retention.ms"] == 1000
    assert typed["log.cleanup.policy"] == ["compact", "delete"]
    assert typed["log.cleaner.io.max.bytes.per.second"] == 1e6
    assert typed["log.message.timestamp.type"] == "LogAppendTime"
    assert validate_broker_configs("", {"unclean.leader.election.enable": "true"}) == {
        "unclean.leader.election.enable": True
    }
    assert "Invalid value x for configuration max.connections: Not a number of type INT" in (
        _refused("0", {"max.connections": "x"}).message
    )
    assert "Value must be at least 0" in _refused("0", {"max.connections": "-1"}).message
    assert "log.cleaner.threads" in _refused("0", {"log.cleaner.threads": "2"}).message
    assert "is not host:count" in _refused("0", {"max.connections.per.ip.overrides": "a"}).message
    assert "can be set to zero only if max.connections.per.ip.overrides" in (
        _refused("0", {"max.connections.per.ip": "0"}).message
    )
    validate_broker_configs(
        "0", {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "h:1"}
    )


def test_parse_ip_overrides() -> None:
    assert parse_ip_overrides("") == {}
    assert parse_ip_overrides("10.0.0.1:5,[::1]:7 , host:0") == {"10.0.0.1": 5, "::1": 7, "host": 0}
    for bad in ("host", "host:x", "host:-1", ":3"):
        with pytest.raises(ValueError):
            parse_ip_overrides(bad)


def test_incremental_ops_on_broker_configs() -> None:
    def run(current: dict[str, str], *ops: ConfigOp) -> dict[str, str]:
        return apply_config_ops(
            current,
            list(ops),
            True,
            lambda c: validate_broker_configs("", c),
            list_default,
        )

    assert run({"log.retention.ms": "5"}, ConfigOp("max.connections", "9")) == {
        "log.retention.ms": "5",
        "max.connections": "9",
    }
    assert run({"log.retention.ms": "5"}, ConfigOp("log.retention.ms", "", OpType.DELETE)) == {}
    assert run({}, ConfigOp("log.cleanup.policy", "compact", OpType.APPEND)) == {
        "log.cleanup.policy": "delete,compact"
    }
    with pytest.raises(KafkaError) as info:
        run({}, ConfigOp("max.connections", "1", OpType.APPEND))
    assert (
        info.value.message == "Config value append is not allowed for config key: max.connections"
    )


def test_resolve_layers_and_sources() -> None:
    r = resolve(
        "max.connections",
        {"max.connections": "3"},
        {"max.connections": "7"},
        {"max.connections": "9"},
        "2147483647",
    )
    assert (r.value, r.source) == ("3", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [s for _, _, s in r.synonyms] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG,
        ConfigSource.DEFAULT_CONFIG,
    ]
    r = resolve("max.connections", {}, {"max.connections": "7"}, {}, "2147483647")
    assert (r.value, r.source) == ("7", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    r = resolve("max.connections", {}, {}, {"max.connections": "9"}, "2147483647")
    assert (r.value, r.source) == ("9", ConfigSource.STATIC_BROKER_CONFIG)
    r = resolve("max.connections", {}, {}, {}, "2147483647")
    assert (r.value, r.source, r.synonyms) == (
        "2147483647",
        ConfigSource.DEFAULT_CONFIG,
        (("max.connections", "2147483647", ConfigSource.DEFAULT_CONFIG),),
    )


def test_store_layers_and_bad_values_skipped() -> None:
    store = BrokerConfigStore()
    seen: list[str] = []
    store.on_change(seen.append)
    store.apply(entity_name(""), layout.topic_config_json({"log.retention.ms": "10"}))
    store.apply("2", layout.topic_config_json({"log.retention.ms": "20", "max.connections": "x"}))
    assert seen == ["<default>", "2"]
    per_broker, default = store.layers(2)
    assert default == {"log.retention.ms": "10"} and per_broker["log.retention.ms"] == "20"
    assert typed_layer("2", per_broker) == {"log.retention.ms": 20}  # bad value skipped
    store.apply("2", None)
    assert store.layers(2)[0] == {} and seen[-1] == "2"


def test_every_service_setting_is_dynamic_or_read_only() -> None:
    """A broker property a service takes is either dynamically updatable or refused as
    read-only, never 'unknown'."""
    kafka_props = set(GatewaySettings.properties()) | set(StorageSettings.properties())
    ours = {p for p in kafka_props if not p.startswith("kafkapy.")}
    missing = ours - set(DYNAMIC_BROKER_CONFIGS) - READ_ONLY_BROKER_CONFIGS
    assert missing == set()
    assert not set(DYNAMIC_BROKER_CONFIGS) & READ_ONLY_BROKER_CONFIGS
    assert {d.broker_name for d in TOPIC_CONFIGS.values() if d.broker_name} <= set(
        DYNAMIC_BROKER_CONFIGS
    )
