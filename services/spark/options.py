"""Options of the `kafkapy` source and sink, with Spark's Kafka-source names and meanings.

Spark passes options case-insensitively; they are folded to lower case once here (never
`dict(options)` on the original keys). Every bad option raises `KafkaPySparkError` with one
readable line, as Spark's own Kafka source does (same wording where Spark has one).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import PySparkValueError

EARLIEST = -2  # Spark's Kafka-source JSON: -2 = earliest, -1 = latest
LATEST = -1

# kafka.* settings Spark's source refuses, with its reason.
_UNSUPPORTED_CONSUMER = {
    "auto.offset.reset": "set the source option 'startingOffsets' to 'earliest' or 'latest' "
    "to specify where to start",
    "key.deserializer": "keys are always read as byte arrays; use DataFrame operations to "
    "deserialize them",
    "value.deserializer": "values are always read as byte arrays; use DataFrame operations to "
    "deserialize them",
    "enable.auto.commit": "the source does not commit any offsets",
    "interceptor.classes": "the source always reads keys and values as byte arrays",
}
_UNSUPPORTED_PRODUCER = {
    "key.serializer": "keys are written as byte arrays or strings",
    "value.serializer": "values are written as byte arrays or strings",
}


class KafkaPySparkError(PySparkValueError):
    """A bad option, unknown topic, unreachable cluster or lost data: one readable line."""


def fold(options: Mapping[str, str]) -> dict[str, str]:
    """Options with lower-case keys (Spark's options are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def client_config(opts: Mapping[str, str]) -> dict[str, str]:
    """The `kafka.*` options without their prefix (passed to the Kafka client)."""
    return {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}


def _int(opts: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise KafkaPySparkError(f"Option '{name}' must be an integer, got '{raw}'") from None


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    value = _int(opts, name)
    if value is not None and value <= 0:
        raise KafkaPySparkError(f"Option '{name}' must be a positive integer, got {value}")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise KafkaPySparkError(f"Option '{name}' must be 'true' or 'false', got '{raw}'")


def _duration_ms(opts: Mapping[str, str], name: str, default_ms: int) -> int:
    """Spark's time strings ('15m', '30s', '500ms', '2h', or plain milliseconds)."""
    raw = opts.get(name.lower())
    if raw is None:
        return default_ms
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", raw.lower())
    if not m:
        raise KafkaPySparkError(f"Option '{name}' must be a duration like '15m', got '{raw}'")
    unit = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
    return int(m.group(1)) * unit.get(m.group(2), 86_400_000)


def _partition_json(name: str, raw: str) -> dict[str, dict[int, int]]:
    """`{"topic":{"0":23,"1":-1}}` -> {topic: {0: 23, 1: -1}}."""
    try:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict):
            raise ValueError
        return {str(t): {int(p): int(v) for p, v in parts.items()} for t, parts in parsed.items()}
    except (ValueError, TypeError, AttributeError):
        raise KafkaPySparkError(
            f'Option \'{name}\' expects JSON like {{"topicA":{{"0":23,"1":-1}}}}, got {raw}'
        ) from None


@dataclass(frozen=True)
class OffsetSpec:
    """Where a query starts or ends: 'earliest', 'latest', per-partition offsets, or timestamps.

    `kind` is one of earliest, latest, offsets, timestamps, global_timestamp.
    """

    kind: str
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    timestamp: int | None = None


def _offset_spec(opts: Mapping[str, str], which: str, default: str) -> OffsetSpec:
    """Spark's precedence: <which>Timestamp, then <which>OffsetsByTimestamp, then <which>Offsets."""
    glob = _int(opts, f"{which}Timestamp")
    if glob is not None:
        return OffsetSpec("global_timestamp", timestamp=glob)
    by_ts = opts.get(f"{which}offsetsbytimestamp")
    if by_ts is not None:
        return OffsetSpec("timestamps", _partition_json(f"{which}OffsetsByTimestamp", by_ts))
    raw = opts.get(f"{which}offsets", default).strip()
    if raw.lower() in ("earliest", "latest"):
        return OffsetSpec(raw.lower())
    return OffsetSpec("offsets", _partition_json(f"{which}Offsets", raw))


def _all_offsets(spec: OffsetSpec) -> set[int]:
    if spec.kind != "offsets":
        return set()
    return {v for parts in spec.offsets.values() for v in parts.values()}


@dataclass(frozen=True)
class SourceOptions:
    """Parsed read options (batch and streaming)."""

    bootstrap: str
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] = field(default_factory=dict)
    starting: OffsetSpec = OffsetSpec("latest")
    ending: OffsetSpec = OffsetSpec("latest")
    timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = 120_000
    api_timeout_ms: int = 60_000
    group_id_prefix: str = "spark-kafka-source"
    client: dict[str, str] = field(default_factory=dict)

    @property
    def isolation_level(self) -> str:
        return self.client.get("isolation.level", "read_uncommitted")

    def topic_matches(self, topic: str) -> bool:
        """Whether the subscription covers `topic` (subscribePattern: a whole-name match)."""
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None and not topic.startswith("__")
        if self.subscribe:
            return topic in self.subscribe
        return topic in self.assign


def parse_source(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate and parse read options the way Spark's Kafka source does."""
    opts = fold(options)
    client = client_config(opts)
    bootstrap = client.get("bootstrap.servers")
    if not bootstrap:
        raise KafkaPySparkError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer"
        )
    for key, why in _UNSUPPORTED_CONSUMER.items():
        if key in client:
            raise KafkaPySparkError(f"Kafka option '{key}' is not supported: {why}")
    chosen = [k for k in ("assign", "subscribe", "subscribepattern") if k in opts]
    if len(chosen) != 1:
        raise KafkaPySparkError(
            "One (and only one) of the following options must be specified for Kafka source: "
            f"subscribe, subscribePattern, assign (got {len(chosen)})"
        )
    subscribe: tuple[str, ...] = ()
    pattern = None
    assign: dict[str, tuple[int, ...]] = {}
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise KafkaPySparkError(
                f"No topics to subscribe to as specified value for option "
                f"'subscribe' is '{opts['subscribe']}'"
            )
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise KafkaPySparkError(
                "Pattern to subscribe is empty as specified value for option "
                "'subscribePattern' is ''"
            )
        try:
            re.compile(pattern)
        except re.error as e:
            raise KafkaPySparkError(
                f"Option 'subscribePattern' is not a valid pattern: {e}"
            ) from None
    else:
        try:
            parsed = json.loads(opts["assign"])
            assign = {str(t): tuple(int(p) for p in ps) for t, ps in parsed.items()}
        except (ValueError, TypeError, AttributeError):
            raise KafkaPySparkError(
                f'Option \'assign\' expects JSON like {{"topicA":[0,1],"topicB":[2,4]}}, '
                f"got {opts['assign']}"
            ) from None
        if not assign:
            raise KafkaPySparkError("Option 'assign' names no topic partitions")
    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest")
    ending = _offset_spec(opts, "ending", "latest")
    if streaming and any(k.startswith("ending") for k in opts):
        raise KafkaPySparkError("Ending offsets not valid in streaming queries")
    if not streaming:
        if starting.kind == "latest" or LATEST in _all_offsets(starting):
            raise KafkaPySparkError("Starting offset can't be latest for batch queries on Kafka")
        if ending.kind == "earliest" or EARLIEST in _all_offsets(ending):
            raise KafkaPySparkError("Ending offset can't be earliest for batch queries on Kafka")
        for name in ("maxoffsetspertrigger", "minoffsetspertrigger"):
            if name in opts:
                raise KafkaPySparkError(f"Option '{name}' is only for streaming queries")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise KafkaPySparkError(
            f"Option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got "
            f"'{strategy}'"
        )
    return SourceOptions(
        bootstrap=bootstrap,
        subscribe=subscribe,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        max_offsets_per_trigger=_positive(opts, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=_positive(opts, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", 15 * 60_000),
        min_partitions=_positive(opts, "minPartitions"),
        max_records_per_partition=_positive(opts, "maxRecordsPerPartition"),
        poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs", 120_000) or 120_000,
        api_timeout_ms=_int(opts, "kafka.default.api.timeout.ms", 60_000) or 60_000,
        group_id_prefix=opts.get("groupidprefix", "spark-kafka-source"),
        client=client,
    )


@dataclass(frozen=True)
class SinkOptions:
    """Parsed write options."""

    bootstrap: str
    topic: str | None
    client: dict[str, str]
    exactly_once: bool = False
    transactional_id_prefix: str = "spark-kafkapy-"


DELIVERY_GUARANTEES = ("at-least-once", "exactly-once")


def parse_sink(options: Mapping[str, str]) -> SinkOptions:
    opts = fold(options)
    client = client_config(opts)
    bootstrap = client.get("bootstrap.servers")
    if not bootstrap:
        raise KafkaPySparkError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer"
        )
    for key, why in _UNSUPPORTED_PRODUCER.items():
        if key in client:
            raise KafkaPySparkError(f"Kafka option '{key}' is not supported: {why}")
    if "transactional.id" in client:
        raise KafkaPySparkError(
            "Kafka option 'transactional.id' is not supported: one id would fence every other "
            "task; use deliveryGuarantee=exactly-once (and transactionalIdPrefix)"
        )
    guarantee = opts.get("deliveryguarantee", "at-least-once").strip().lower()
    if guarantee not in DELIVERY_GUARANTEES:
        raise KafkaPySparkError(
            f"Option 'deliveryGuarantee' must be 'at-least-once' or 'exactly-once', got "
            f"'{guarantee}'"
        )
    topic = opts.get("topic")
    return SinkOptions(
        bootstrap=bootstrap,
        topic=topic.strip() if topic else None,
        client=client,
        exactly_once=guarantee == "exactly-once",
        transactional_id_prefix=opts.get("transactionalidprefix", "spark-kafkapy-"),
    )


def librdkafka_config(client: Mapping[str, str], **defaults: Any) -> dict[str, Any]:
    """`kafka.*` settings for confluent-kafka (librdkafka), over the source's defaults.

    Java-only settings librdkafka does not know are dropped (e.g. `default.api.timeout.ms`).
    """
    conf: dict[str, Any] = dict(defaults)
    for k, v in client.items():
        if k in _JAVA_ONLY:
            continue
        conf[k] = v
    return conf


_JAVA_ONLY = frozenset(
    {
        "default.api.timeout.ms",
        "key.deserializer",
        "value.deserializer",
        "key.serializer",
        "value.serializer",
        "max.poll.records",
    }
)
