"""The dynamic broker configs a storage node applies (KIP-226), without a restart.

- broker-level topic defaults (``log.retention.ms``, ``log.segment.bytes``,
  ``log.cleanup.policy``, ``min.insync.replicas``...): every hosted partition's configuration is
  recomputed (topic overrides still win) and applied to its log;
- the log cleaner's ``log.cleaner.*`` settings (rate at once, buffers from the next cleaning,
  backoff from the next wait);
- ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate``: the
  node's replication throttles (``replication/quota.py``), at once; also shown as gauges.

Layers (highest first): ``/config/brokers/<broker.id>``, ``/config/brokers/<default>``, the
node's own settings, the defaults.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Gauge

from services.common.broker_config import (
    DEFAULT_ENTITY,
    DYNAMIC_BROKER_CONFIGS,
    STORAGE,
    typed_layer,
)
from services.common.broker_config_store import BrokerConfigStore
from services.common.logging import get_logger
from services.common.topic_config import LONG_MAX, format_value
from services.storage.log.cleaner import CleanerSettings
from services.storage.log_cleaner import LogCleaner
from services.storage.replica_manager import ReplicaManager
from services.storage.settings import BROKER_TOPIC_DEFAULTS, StorageSettingsBase

log = get_logger("storage.config")

THROTTLED_RATE = Gauge(
    "kafkapy_storage_replication_throttled_rate_bytes",
    "leader.replication.throttled.rate / follower.replication.throttled.rate in force (bytes/s)",
    ["role"],
)

_CLEANER_FIELDS = {
    "log.cleaner.dedupe.buffer.size": "dedupe_buffer_size",
    "log.cleaner.io.buffer.load.factor": "io_buffer_load_factor",
    "log.cleaner.io.buffer.size": "io_buffer_size",
    "log.cleaner.io.max.bytes.per.second": "io_max_bytes_per_second",
}


# Configs set through another property (Kafka's synonyms log.retention.hours/minutes, log.roll.hours).
_DERIVED = {
    "log.retention.ms": {"log_retention_ms", "log_retention_minutes", "log_retention_hours"},
    "log.roll.ms": {"log_roll_ms", "log_roll_hours"},
}


class StorageBrokerConfig:
    def __init__(self, settings: StorageSettingsBase, store: BrokerConfigStore) -> None:
        self.settings = settings
        self.store = store
        self.rm: ReplicaManager | None = None
        self.cleaner: LogCleaner | None = None
        self.values: dict[str, Any] = {}
        self.refresh()

    def attach(self, rm: ReplicaManager, cleaner: LogCleaner | None) -> None:
        self.rm, self.cleaner = rm, cleaner
        self.apply()

    def _dynamic(self) -> dict[str, Any]:
        """Typed dynamic values for this node (per-broker over cluster default)."""
        per_broker, default = self.store.layers(self.settings.broker_id)
        out: dict[str, Any] = {}
        for entity, layer in (
            (DEFAULT_ENTITY, default),
            (str(self.settings.broker_id), per_broker),
        ):
            for k, v in typed_layer(entity, layer).items():
                if STORAGE in DYNAMIC_BROKER_CONFIGS[k].services:
                    out[k] = v
        return out

    def refresh(self) -> dict[str, Any]:
        s = self.settings
        values: dict[str, Any] = dict(s.broker_topic_defaults())
        values.update(
            {
                "log.cleaner.backoff.ms": s.log_cleaner_backoff_ms,
                "log.cleaner.dedupe.buffer.size": s.log_cleaner_dedupe_buffer_size,
                "log.cleaner.io.buffer.load.factor": s.log_cleaner_io_buffer_load_factor,
                "log.cleaner.io.buffer.size": s.log_cleaner_io_buffer_size,
                "log.cleaner.io.max.bytes.per.second": s.log_cleaner_io_max_bytes_per_second,
                "leader.replication.throttled.rate": LONG_MAX,
                "follower.replication.throttled.rate": LONG_MAX,
            }
        )
        values.update(self._dynamic())
        self.values = values
        return values

    def static_configs(self) -> tuple[tuple[str, str], ...]:
        """The node's explicitly set configs among those that can change dynamically
        (published in its registration: DescribeConfigs shows them as STATIC_BROKER_CONFIG)."""
        s = self.settings
        explicit = s.model_fields_set
        props = type(s).properties()
        typed = s.broker_topic_defaults()
        out: dict[str, str] = {}
        for name, defn in DYNAMIC_BROKER_CONFIGS.items():
            if STORAGE not in defn.services or name not in props:
                continue
            if props[name] in explicit:
                out[name] = format_value(typed.get(name, getattr(s, props[name])))
        for derived, fields in _DERIVED.items():
            if explicit & fields:
                out[derived] = format_value(typed[derived])
        return tuple(sorted(out.items()))

    def topic_defaults(self) -> dict[str, Any]:
        return {k: v for k, v in self.values.items() if k in BROKER_TOPIC_DEFAULTS}

    def cleaner_settings(self) -> CleanerSettings:
        return CleanerSettings(**{f: self.values[name] for name, f in _CLEANER_FIELDS.items()})

    @property
    def cleaner_backoff_ms(self) -> int:
        return int(self.values["log.cleaner.backoff.ms"])

    def on_change(self, entity: str) -> None:
        """BrokerConfigStore listener."""
        if entity in (DEFAULT_ENTITY, str(self.settings.broker_id)):
            self.apply()

    def apply(self) -> None:
        self.refresh()
        if self.rm is not None:
            self.rm.set_broker_defaults(self.topic_defaults())
            self.rm.quotas.set_rates(
                self.values["leader.replication.throttled.rate"],
                self.values["follower.replication.throttled.rate"],
            )
        if self.cleaner is not None:
            self.cleaner.update_settings(self.cleaner_settings())
        THROTTLED_RATE.labels("leader").set(self.values["leader.replication.throttled.rate"])
        THROTTLED_RATE.labels("follower").set(self.values["follower.replication.throttled.rate"])
        log.info("broker config applied", config=self._dynamic())
