"""A storage node's layers of dynamic broker configs: settings, then the cluster default,
then its own broker id; what it publishes as static."""

from __future__ import annotations

from services.common.broker_config_store import BrokerConfigStore
from services.common.zk import layout
from services.storage.dynamic_config import StorageBrokerConfig
from services.storage.settings import StorageSettings


def test_layers_and_published_static_configs() -> None:
    settings = StorageSettings.load(
        ["--broker.id", "3", "--log.retention.hours", "2", "--log.segment.bytes", "1000"], env={}
    )
    store = BrokerConfigStore()
    cfg = StorageBrokerConfig(settings, store)
    store.on_change(cfg.on_change)
    assert cfg.static_configs() == (("log.retention.ms", "7200000"), ("log.segment.bytes", "1000"))
    assert cfg.topic_defaults()["log.retention.ms"] == 7_200_000
    store.apply(
        "<default>", layout.topic_config_json({"log.retention.ms": "5", "max.connections": "1"})
    )
    store.apply("4", layout.topic_config_json({"log.retention.ms": "9"}))  # another node
    assert cfg.topic_defaults()["log.retention.ms"] == 5
    store.apply(
        "3", layout.topic_config_json({"log.retention.ms": "7", "log.cleaner.backoff.ms": "50"})
    )
    assert cfg.topic_defaults()["log.retention.ms"] == 7
    assert cfg.topic_defaults()["log.segment.bytes"] == 1000
    assert cfg.cleaner_backoff_ms == 50
    assert "max.connections" not in cfg.values  # a gateway's config
    store.apply("3", None)
    assert cfg.topic_defaults()["log.retention.ms"] == 5 and cfg.cleaner_backoff_ms == 15000
