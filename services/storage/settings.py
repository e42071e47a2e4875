"""Storage node settings (Kafka broker property names).

Besides the node's own settings, every broker-level default of a topic config (the
``broker_name`` column of ``services.common.topic_config.TOPIC_CONFIGS``: ``log.segment.bytes``,
``log.retention.ms``, ``message.max.bytes``, ``min.insync.replicas``...) is a setting; the
fields are generated from that table so the two never drift apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationInfo, create_model, field_validator

from services.common.errors import KafkaError
from services.common.listeners import ListenerAddress, ListenerSettings
from services.common.listeners import parse_listener as _parse_listener
from services.common.settings import ServiceSettings, kafka_prop
from services.common.topic_config import (
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigType,
    TopicConfigDef,
    deprecation_warnings,
    format_value,
    parse_value,
)
from services.common.zone import RackDiscoverySettings

# Broker property name -> topic config definition (e.g. "log.segment.bytes" -> segment.bytes).
BROKER_TOPIC_DEFAULTS: dict[str, TopicConfigDef] = {
    d.broker_name: d for d in TOPIC_CONFIGS.values() if d.broker_name
}
_FIELD_TO_BROKER_PROP = {name.replace(".", "_"): name for name in BROKER_TOPIC_DEFAULTS}

LISTENER_SCHEMES = ("GRPC",)


def parse_listener(value: str, prop: str = "listeners") -> ListenerAddress:
    return _parse_listener(value, prop, LISTENER_SCHEMES)


class StorageSettingsBase(ServiceSettings, ListenerSettings, RackDiscoverySettings):
    """The storage node's own settings; the generated subclass adds the topic defaults."""

    LISTENER_SCHEMES = LISTENER_SCHEMES

    broker_id: int = kafka_prop(..., "broker.id", "this storage node's id (required)", ge=0)
    listeners: str = kafka_prop(
        "GRPC://127.0.0.1:0", "listeners", "gRPC bind address, host:port or GRPC://host:port"
    )
    advertised_listeners: str | None = kafka_prop(
        None, "advertised.listeners", "address registered in ZooKeeper (default: the bound one)"
    )
    log_dirs: str = kafka_prop(
        "/tmp/kafka-py-logs",
        "log.dirs",
        "log directories, comma-separated: new replicas go to the one with the fewest partitions",
    )
    broker_rack: str | None = kafka_prop(None, "broker.rack", "rack (zone) of this node")
    kafkapy_storage_capacity_bytes: int = kafka_prop(
        0,
        "kafkapy.storage.capacity.bytes",
        "bytes this node's volume may hold, for the rebalancer and autoscaler (0 = the size of "
        "the file system of the first log dir)",
        ge=0,
    )
    kafkapy_usage_report_interval_ms: int = kafka_prop(
        5000,
        "kafkapy.usage.report.interval.ms",
        "how often disk use is published to ZooKeeper for the controller",
        gt=0,
    )
    log_retention_check_interval_ms: int = kafka_prop(
        300000, "log.retention.check.interval.ms", "how often retention runs", gt=0
    )
    log_flush_scheduler_interval_ms: int = kafka_prop(
        LONG_MAX,
        "log.flush.scheduler.interval.ms",
        "how often logs are checked for flush.ms (default: never)",
        gt=0,
    )
    log_flush_offset_checkpoint_interval_ms: int = kafka_prop(
        60000,
        "log.flush.offset.checkpoint.interval.ms",
        "how often recovery points are checkpointed (recovery-point-offset-checkpoint)",
        gt=0,
    )
    log_flush_start_offset_checkpoint_interval_ms: int = kafka_prop(
        60000,
        "log.flush.start.offset.checkpoint.interval.ms",
        "how often log start offsets are checkpointed (log-start-offset-checkpoint)",
        gt=0,
    )
    log_recovery_flush_interval_ms: int = kafka_prop(
        10000,
        "log.recovery.flush.interval.ms",
        "kafka-py: logs whose data stayed unflushed this long are fsynced in the background, "
        "moving their recovery point, so a crash rescans only the recent tail (Kafka's "
        "behaviour, fsync only at rolls, with 9223372036854775807)",
        gt=0,
    )
    replica_high_watermark_checkpoint_interval_ms: int = kafka_prop(
        5000,
        "replica.high.watermark.checkpoint.interval.ms",
        "how often high watermarks are checkpointed",
        gt=0,
    )
    replica_lag_time_max_ms: int = kafka_prop(
        30000,
        "replica.lag.time.max.ms",
        "a follower not caught up for this long leaves the ISR",
        gt=0,
    )
    replica_fetch_wait_max_ms: int = kafka_prop(
        500, "replica.fetch.wait.max.ms", "long-poll time of a follower's fetch", gt=0
    )
    replica_fetch_min_bytes: int = kafka_prop(
        1, "replica.fetch.min.bytes", "bytes a follower's fetch waits for", gt=0
    )
    replica_fetch_max_bytes: int = kafka_prop(
        1048576, "replica.fetch.max.bytes", "bytes fetched per partition by a follower", gt=0
    )
    replica_fetch_response_max_bytes: int = kafka_prop(
        10485760, "replica.fetch.response.max.bytes", "bytes of a follower's whole fetch", gt=0
    )
    replica_fetch_backoff_ms: int = kafka_prop(
        1000, "replica.fetch.backoff.ms", "longest back-off of a follower after fetch errors", gt=0
    )
    replica_socket_timeout_ms: int = kafka_prop(
        30000, "replica.socket.timeout.ms", "timeout of a follower's requests to its leader", gt=0
    )
    log_retention_hours: int = kafka_prop(168, "log.retention.hours", "retention (hours)", gt=0)
    log_retention_minutes: int | None = kafka_prop(
        None, "log.retention.minutes", "retention (minutes; overrides hours)"
    )
    log_roll_hours: int = kafka_prop(
        168, "log.roll.hours", "segment age before a roll (hours)", gt=0
    )
    shutdown_grace_ms: int = kafka_prop(
        5000, "shutdown.grace.ms", "gRPC drain time at shutdown", ge=0
    )
    controlled_shutdown_enable: bool = kafka_prop(
        True,
        "controlled.shutdown.enable",
        "at SIGTERM, ask the controller to move leadership away and take this node out of the "
        "ISRs before stopping",
    )
    controlled_shutdown_max_retries: int = kafka_prop(
        3,
        "controlled.shutdown.max.retries",
        "controlled shutdown attempts before the node stops anyway",
        ge=0,
    )
    controlled_shutdown_retry_backoff_ms: int = kafka_prop(
        5000,
        "controlled.shutdown.retry.backoff.ms",
        "pause between controlled shutdown attempts",
        ge=0,
    )
    controller_socket_timeout_ms: int = kafka_prop(
        30000,
        "controller.socket.timeout.ms",
        "timeout of one controlled shutdown request to the controller",
        gt=0,
    )
    log_cleaner_enable: bool = kafka_prop(
        True, "log.cleaner.enable", "compact logs whose cleanup.policy includes compact"
    )
    log_cleaner_backoff_ms: int = kafka_prop(
        15000, "log.cleaner.backoff.ms", "pause of the cleaner when no log needs cleaning", gt=0
    )
    log_cleaner_threads: int = kafka_prop(1, "log.cleaner.threads", "cleaner threads (only 1)")
    log_cleaner_dedupe_buffer_size: int = kafka_prop(
        134217728,
        "log.cleaner.dedupe.buffer.size",
        "memory of a cleaning's offset map (about 145 bytes a key; keys over 16 bytes hashed)",
        gt=0,
    )
    log_cleaner_io_buffer_load_factor: float = kafka_prop(
        0.9,
        "log.cleaner.io.buffer.load.factor",
        "share of the offset map that may be filled",
        gt=0,
        le=1,
    )
    log_cleaner_io_buffer_size: int = kafka_prop(
        524288,
        "log.cleaner.io.buffer.size",
        "the cleaner's I/O buffers; it reads segments in chunks of half of it",
        gt=0,
    )
    log_cleaner_io_max_bytes_per_second: float = kafka_prop(
        1.7976931348623157e308,
        "log.cleaner.io.max.bytes.per.second",
        "bytes the cleaner may read and write per second (default: unlimited)",
        gt=0,
    )

    @field_validator("log_cleaner_threads")
    @classmethod
    def _one_cleaner_thread(cls, v: int) -> int:
        if v != 1:
            raise ValueError("only 1 cleaner thread is supported")
        return v

    @field_validator("log_dirs")
    @classmethod
    def _log_dirs(cls, v: str) -> str:
        if not [d for d in v.split(",") if d.strip()]:
            raise ValueError("at least one directory is required")
        return v

    @field_validator("*", mode="before")
    @classmethod
    def _topic_default(cls, v: Any, info: ValidationInfo) -> Any:
        prop = _FIELD_TO_BROKER_PROP.get(str(info.field_name))
        if prop is None or v is None:
            return v
        defn = BROKER_TOPIC_DEFAULTS[prop]
        raw = v if isinstance(v, str) else format_value(v)
        try:
            return parse_value(defn, raw)
        except KafkaError as exc:
            raise ValueError(exc.message or str(exc)) from None

    # ---- derived values ---------------------------------------------------------------
    @property
    def log_dir(self) -> Path:
        """The log directory in use (the first of ``log.dirs``)."""
        return Path(self.all_log_dirs[0])

    @property
    def all_log_dirs(self) -> list[str]:
        return [d.strip() for d in self.log_dirs.split(",") if d.strip()]

    def deprecation_warnings(self) -> list[str]:
        """Deprecated settings that were set (accepted, without effect)."""
        set_props = [
            prop
            for prop in BROKER_TOPIC_DEFAULTS
            if prop.replace(".", "_") in self.model_fields_set
        ]
        return deprecation_warnings(set_props, broker=True)

    def broker_topic_defaults(self) -> dict[str, Any]:
        """Broker-level topic defaults keyed by broker property name, typed.

        ``log.retention.ms`` wins over ``log.retention.minutes`` over ``log.retention.hours``,
        and ``log.roll.ms`` over ``log.roll.hours``, as in Kafka.
        """
        out = {prop: getattr(self, prop.replace(".", "_")) for prop in BROKER_TOPIC_DEFAULTS}
        if "log_retention_ms" not in self.model_fields_set:
            if self.log_retention_minutes is not None:
                out["log.retention.ms"] = self.log_retention_minutes * 60_000
            else:
                out["log.retention.ms"] = self.log_retention_hours * 3_600_000
        if "log_roll_ms" not in self.model_fields_set:
            out["log.roll.ms"] = self.log_roll_hours * 3_600_000
        return out


def _topic_default_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for prop, defn in BROKER_TOPIC_DEFAULTS.items():
        field_name = prop.replace(".", "_")
        if field_name in StorageSettingsBase.model_fields:
            raise RuntimeError(f"topic default {prop} collides with a storage setting")
        default = defn.default
        if isinstance(default, str) and defn.type == ConfigType.LIST:
            default = [s for s in default.split(",") if s]
        fields[field_name] = (
            Any,
            kafka_prop(default, prop, f"default for topic config {defn.name}: {defn.doc}"),
        )
    return fields


StorageSettings = create_model(  # type: ignore[call-overload]
    "StorageSettings", __base__=StorageSettingsBase, **_topic_default_fields()
)
StorageSettings.__doc__ = "Storage node settings: own settings plus broker-level topic defaults."
