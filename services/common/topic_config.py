"""Topic-level configuration: Kafka's names, defaults, types and validation.

Used by the controller (validate overrides), the gateway (DescribeConfigs) and
storage (the effective log configuration of each partition).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol

from services.common.errors import ErrorCode, KafkaError

LONG_MAX = 9223372036854775807


class ConfigType(IntEnum):
    """DescribeConfigs config_type values."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


class ConfigSource(IntEnum):
    """DescribeConfigs config_source values."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    broker_name: str  # the cluster-wide default's property name ("": none, see NO_SERVER_DEFAULT)
    default: Any
    type: ConfigType
    doc: str
    valid: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None  # a STRING value must match it (re.fullmatch)
    deprecated: str = ""  # why it is accepted but has no effect (logged when set)
    format_hint: str = ""  # a LIST whose items must match ``pattern``: the expected format


# Kafka's throttled-replica lists: '*' or partition:broker pairs (ThrottledReplicaListValidator)
THROTTLED_REPLICAS_PATTERN = r"\*|\d+:\d+"
_THROTTLED_FORMAT = (
    "must be the literal '*' or a list of replicas in the following format: "
    "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
)


# Kafka's MetadataVersion strings: 0.8.0, 0.10.0-IV1, 2.8, 3.0-IV1...
_VERSION = r"\d+\.\d+(\.\d+)?(-IV\d+)?"
_FORMAT_VERSION_DEPRECATED = (
    "deprecated since Kafka 3.0 and ignored: record batches are always written in message "
    "format v2 (magic 2)"
)

_D = TopicConfigDef
TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in [
        _D(
            "cleanup.policy",
            "log.cleanup.policy",
            "delete",
            ConfigType.LIST,
            "delete and/or compact",
            valid=("delete", "compact"),
        ),
        _D(
            "compression.type",
            "compression.type",
            "producer",
            ConfigType.STRING,
            "final compression of the topic's batches",
            valid=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        ),
        _D(
            "delete.retention.ms",
            "log.cleaner.delete.retention.ms",
            86400000,
            ConfigType.LONG,
            "how long tombstones are kept in compacted topics",
            minimum=0,
        ),
        _D(
            "file.delete.delay.ms",
            "log.segment.delete.delay.ms",
            60000,
            ConfigType.LONG,
            "delay before a deleted segment's files are removed",
            minimum=0,
        ),
        _D(
            "flush.messages",
            "log.flush.interval.messages",
            LONG_MAX,
            ConfigType.LONG,
            "fsync after this many messages",
            minimum=1,
        ),
        _D(
            "flush.ms",
            "log.flush.interval.ms",
            LONG_MAX,
            ConfigType.LONG,
            "fsync after this many milliseconds",
            minimum=0,
        ),
        _D(
            "index.interval.bytes",
            "log.index.interval.bytes",
            4096,
            ConfigType.INT,
            "bytes between offset-index entries",
            minimum=0,
        ),
        _D(
            "max.compaction.lag.ms",
            "log.cleaner.max.compaction.lag.ms",
            LONG_MAX,
            ConfigType.LONG,
            "longest time a record stays uncompacted",
            minimum=1,
        ),
        _D(
            "max.message.bytes",
            "message.max.bytes",
            1048588,
            ConfigType.INT,
            "largest record batch the topic accepts",
            minimum=0,
        ),
        _D(
            "message.timestamp.type",
            "log.message.timestamp.type",
            "CreateTime",
            ConfigType.STRING,
            "CreateTime or LogAppendTime",
            valid=("CreateTime", "LogAppendTime"),
        ),
        _D(
            "message.timestamp.difference.max.ms",
            "log.message.timestamp.difference.max.ms",
            LONG_MAX,
            ConfigType.LONG,
            "largest allowed CreateTime skew",
            minimum=0,
        ),
        _D(
            "min.cleanable.dirty.ratio",
            "log.cleaner.min.cleanable.ratio",
            0.5,
            ConfigType.DOUBLE,
            "dirty ratio that makes a log cleanable",
            minimum=0,
            maximum=1,
        ),
        _D(
            "min.compaction.lag.ms",
            "log.cleaner.min.compaction.lag.ms",
            0,
            ConfigType.LONG,
            "shortest time a record stays uncompacted",
            minimum=0,
        ),
        _D(
            "min.insync.replicas",
            "min.insync.replicas",
            1,
            ConfigType.INT,
            "replicas that must acknowledge an acks=all write",
            minimum=1,
        ),
        _D(
            "preallocate", "log.preallocate", False, ConfigType.BOOLEAN, "preallocate segment files"
        ),
        _D(
            "retention.bytes",
            "log.retention.bytes",
            -1,
            ConfigType.LONG,
            "largest partition size before old segments are deleted (-1 = unlimited)",
        ),
        _D(
            "retention.ms",
            "log.retention.ms",
            604800000,
            ConfigType.LONG,
            "age after which segments are deleted (-1 = forever)",
            minimum=-1,
        ),
        _D(
            "segment.bytes",
            "log.segment.bytes",
            1073741824,
            ConfigType.INT,
            "segment size before a roll",
            minimum=14,
        ),
        _D(
            "segment.index.bytes",
            "log.index.size.max.bytes",
            10485760,
            ConfigType.INT,
            "size of a segment's offset index",
            minimum=8,
        ),
        _D(
            "segment.jitter.ms",
            "log.roll.jitter.ms",
            0,
            ConfigType.LONG,
            "random jitter subtracted from segment.ms",
            minimum=0,
        ),
        _D(
            "segment.ms",
            "log.roll.ms",
            604800000,
            ConfigType.LONG,
            "age of a segment before a roll",
            minimum=1,
        ),
        _D(
            "unclean.leader.election.enable",
            "unclean.leader.election.enable",
            False,
            ConfigType.BOOLEAN,
            "allow out-of-sync replicas to become leader",
        ),
        _D(
            "message.downconversion.enable",
            "log.message.downconversion.enable",
            True,
            ConfigType.BOOLEAN,
            "down-convert batches for old fetch versions",
        ),
        _D(
            "leader.replication.throttled.replicas",
            "",
            [],
            ConfigType.LIST,
            "replicas whose log a leader sends within leader.replication.throttled.rate: "
            "partition:broker pairs or '*'",
            pattern=THROTTLED_REPLICAS_PATTERN,
            format_hint=_THROTTLED_FORMAT,
        ),
        _D(
            "follower.replication.throttled.replicas",
            "",
            [],
            ConfigType.LIST,
            "replicas whose log a follower fetches within follower.replication.throttled.rate: "
            "partition:broker pairs or '*'",
            pattern=THROTTLED_REPLICAS_PATTERN,
            format_hint=_THROTTLED_FORMAT,
        ),
        _D(
            "message.format.version",
            "log.message.format.version",
            "3.0-IV1",
            ConfigType.STRING,
            "[DEPRECATED] message format version; " + _FORMAT_VERSION_DEPRECATED,
            pattern=_VERSION,
            deprecated=_FORMAT_VERSION_DEPRECATED,
        ),
    ]
}

# Topic configs without a broker-wide default (Kafka's LogConfig.CONFIGS_WITH_NO_SERVER_DEFAULTS).
NO_SERVER_DEFAULT = frozenset(d.name for d in TOPIC_CONFIGS.values() if not d.broker_name)


def deprecation_warnings(names: Iterable[str], broker: bool = False) -> list[str]:
    """One line per deprecated config among ``names`` (topic names, or broker property
    names when ``broker``), for the log of the service that accepted them."""
    by_name = {(d.broker_name if broker else d.name): d for d in TOPIC_CONFIGS.values()}
    return [
        f"{name} is {by_name[name].deprecated}"
        for name in names
        if name in by_name and by_name[name].deprecated
    ]


class ConfigDefLike(Protocol):
    """What ``parse_value`` needs of a config definition (topic or broker)."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> ConfigType: ...
    @property
    def valid(self) -> tuple[str, ...]: ...
    @property
    def minimum(self) -> float | None: ...
    @property
    def maximum(self) -> float | None: ...
    @property
    def pattern(self) -> str | None: ...


def parse_value(defn: ConfigDefLike, raw: str) -> Any:
    """Parse and validate one raw string value; raises KafkaError(INVALID_CONFIG)."""

    def bad(why: str) -> KafkaError:
        return KafkaError(
            ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {defn.name}: {why}"
        )

    t = defn.type
    value: Any
    if t == ConfigType.BOOLEAN:
        if raw.strip().lower() not in ("true", "false"):
            raise bad("Expected value to be either true or false")
        return raw.strip().lower() == "true"
    if t in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
        try:
            value = int(raw.strip())
        except ValueError:
            raise bad("Not a number of type " + t.name) from None
        if t == ConfigType.INT and not -(2**31) <= value < 2**31:
            raise bad("Not a number of type INT")
    elif t == ConfigType.DOUBLE:
        try:
            value = float(raw.strip())
        except ValueError:
            raise bad("Not a number of type DOUBLE") from None
    elif t == ConfigType.LIST:
        items = [s.strip() for s in raw.split(",") if s.strip()]
        if defn.pattern is not None and (
            any(not re.fullmatch(defn.pattern, i) for i in items)
            or ("*" in items and len(items) > 1)
        ):
            raise bad(getattr(defn, "format_hint", "") or f"items must match {defn.pattern}")
        for item in items:
            if defn.valid and item not in defn.valid:
                raise bad(f"String must be one of: {', '.join(defn.valid)}")
        return items
    else:
        value = raw
        if defn.valid and value not in defn.valid:
            raise bad(f"String must be one of: {', '.join(defn.valid)}")
        if defn.pattern is not None and not re.fullmatch(defn.pattern, value.strip()):
            raise bad(f"Version `{value}` is not a valid version")
        return value
    if defn.minimum is not None and value < defn.minimum:
        raise bad(f"Value must be at least {defn.minimum:g}")
    if defn.maximum is not None and value > defn.maximum:
        raise bad(f"Value must be no more than {defn.maximum:g}")
    return value


def validate_overrides(overrides: Mapping[str, str]) -> dict[str, Any]:
    """Validate topic overrides; unknown names and bad values raise INVALID_CONFIG."""
    parsed: dict[str, Any] = {}
    for name, raw in overrides.items():
        defn = TOPIC_CONFIGS.get(name)
        if defn is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if raw is None:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Null value not supported for topic config: {name}"
            )
        parsed[name] = parse_value(defn, raw)
    return parsed


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def effective_config(
    overrides: Mapping[str, str], broker_defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Typed effective topic configuration: defaults < broker defaults < overrides."""
    broker_defaults = broker_defaults or {}
    out: dict[str, Any] = {}
    for name, defn in TOPIC_CONFIGS.items():
        out[name] = broker_defaults.get(defn.broker_name, defn.default)
    out.update(validate_overrides(overrides))
    return out
