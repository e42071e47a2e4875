"""MirrorMaker's job as a Spark streaming query: copy topics (a list or a pattern) from one
Kafka-compatible cluster to another, keeping keys, values, headers, timestamps (written as the
copies' CreateTime) and partitions; topic names are kept.

Target topics missing at start are created with the source's partition count and the configs
set on the source topic (MirrorMaker 2's config sync at creation, without the configs it never
syncs), with the target's default replication factor: a copy of old records must not be deleted
by a shorter default `retention.ms` than its source's. A target topic with fewer partitions than
its source is refused, since a record could not keep its partition. Progress lives in the query's
checkpoint (the source's offsets), so a restarted mirror continues where it stopped; with
`exactly_once` the copies are written in transactions (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from services.spark.options import KafkaPySparkError, parse_source

COLUMNS = ("key", "value", "topic", "partition", "headers", "timestamp")

# MirrorMaker 2's DefaultConfigPropertyFilter: topic configs never copied to the target
NOT_SYNCED = frozenset(
    {
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "min.insync.replicas",
    }
)


def source_topics(
    conf: dict[str, Any], topics: list[str], pattern: str | None, timeout_s: float
) -> dict[str, int]:
    """Partition counts of the source topics the mirror covers now."""
    sub = {"subscribePattern": pattern} if pattern else {"subscribe": ",".join(topics)}
    opts = parse_source(
        {"kafka.bootstrap.servers": conf["bootstrap.servers"], **sub}, streaming=True
    )
    meta = AdminClient(conf).list_topics(timeout=timeout_s).topics
    if not pattern:
        missing = sorted(set(topics) - set(meta))
        if missing:
            raise KafkaPySparkError(f"source topics not found: {', '.join(missing)}")
    return {name: len(t.partitions) for name, t in meta.items() if opts.topic_matches(name)}


def source_configs(
    conf: dict[str, Any], topics: list[str], timeout_s: float
) -> dict[str, dict[str, str]]:
    """The configs set on each source topic (not defaults), without those MirrorMaker 2 never
    syncs."""
    if not topics:
        return {}
    admin = AdminClient(conf)  # kept until the answers came: its end fails them
    futures = admin.describe_configs(
        [ConfigResource("topic", t) for t in topics], request_timeout=timeout_s
    )
    out: dict[str, dict[str, str]] = {}
    for res, fut in futures.items():
        try:
            entries = fut.result(timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - KafkaException or a timeout: one line
            raise KafkaPySparkError(f"reading the configs of {res.name} failed: {exc}") from None
        out[res.name] = {
            name: str(e.value)
            for name, e in entries.items()
            # confluent-kafka gives the source as its int, not as ConfigSource
            if int(getattr(e.source, "value", e.source)) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            and name not in NOT_SYNCED
            and e.value is not None
            and not e.is_sensitive
        }
    return out


def ensure_target_topics(
    conf: dict[str, Any],
    wanted: dict[str, int],
    timeout_s: float,
    configs: dict[str, dict[str, str]] | None = None,
) -> None:
    """Create the missing target topics with their source's partition count and `configs`;
    refuse one with fewer partitions than its source."""
    admin = AdminClient(conf)
    existing = admin.list_topics(timeout=timeout_s).topics
    for name, count in sorted(wanted.items()):
        if name in existing and len(existing[name].partitions) < count:
            raise KafkaPySparkError(
                f"target topic {name} has {len(existing[name].partitions)} partitions, its source "
                f"{count}: records could not keep their partition"
            )
    new = [
        NewTopic(n, c, -1, config=(configs or {}).get(n, {}))
        for n, c in sorted(wanted.items())
        if n not in existing
    ]
    for name, fut in (admin.create_topics(new) if new else {}).items():
        try:
            fut.result(timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - created meanwhile by another run is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise KafkaPySparkError(f"creating target topic {name} failed: {exc}") from None


def start(
    spark: Any,
    source_bootstrap: str,
    target_bootstrap: str,
    checkpoint: str,
    *,
    topics: list[str],
    pattern: str | None = None,
    exactly_once: bool = False,
    available_now: bool = False,
    processing_time: str = "1 second",
    max_offsets_per_trigger: int | None = None,
    source_options: Mapping[str, str] | None = None,
    target_options: Mapping[str, str] | None = None,
) -> Any:
    """Start the mirror query; returns Spark's StreamingQuery. `source_options` and
    `target_options` (`kafka.*`, e.g. security settings) go to the source and the sink."""
    reader = (
        spark.readStream.format("kafkapy")
        .options(**dict(source_options or {}))
        .option("kafka.bootstrap.servers", source_bootstrap)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )
    if pattern:
        reader = reader.option("subscribePattern", pattern)
    else:
        reader = reader.option("subscribe", ",".join(topics))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    writer = (
        reader.load()
        .select(*COLUMNS)
        .writeStream.format("kafkapy")
        .options(**dict(target_options or {}))
        .option("kafka.bootstrap.servers", target_bootstrap)
        .option("deliveryGuarantee", "exactly-once" if exactly_once else "at-least-once")
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()
