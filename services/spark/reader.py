"""Executor side of the source: one offset range of one partition -> Arrow record batches.

Records come through Fetch requests decoded by aiokafka's Cython record-batch reader
(services/spark/fast_reader.py) or, for `kafka.*` settings only librdkafka takes, through
confluent-kafka; see docs/decisions.md for the measurements behind that choice. Offsets below the log start are lost data: `failOnDataLoss=true` fails the
task with Spark's message, `false` skips to the first offset still there. Offsets missing inside
the range (compaction, transaction markers, aborted records under read_committed) are no loss.
"""

from __future__ import annotations

import bisect
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, TopicPartition

from services.spark.options import KafkaPySparkError, SourceOptions, librdkafka_config

ROWS_PER_BATCH = 8192
PARTITION_FETCH_BYTES = 8 << 20  # librdkafka's default is 1 MiB (docs/benchmarks-spark.md)

# confluent-kafka's Message.timestamp(): (type, epoch milliseconds)
_STAMP = pa.struct([pa.field("type", pa.int32()), pa.field("ms", pa.int64())])

HEADERS_TYPE = pa.list_(
    pa.field(
        "element",
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]),
    )
)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Spark's Kafka-source schema as Arrow (timestamps in UTC microseconds)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


@dataclass(frozen=True)
class OffsetRange:
    """[start, until) of one topic partition: one Spark task's share."""

    topic: str
    partition: int
    start: int
    until: int


def data_loss_message(what: str) -> str:
    return (
        f"{what}. Some data may have been lost because they are not available in Kafka any "
        "more; either the data was aged out by Kafka or the topic may have been deleted before "
        "all the data in the topic was processed. If you don't want your streaming query to "
        'fail on such cases, set the source option "failOnDataLoss" to "false".'
    )


class _Columns:
    """Column buffers for one Arrow record batch, filled a consumed slice of messages at a time
    (one list comprehension per field; timestamps converted in Arrow, not per row)."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.stamps: list[tuple[int, int]] = []
        self.headers: list[list[dict[str, Any]] | None] = []

    def add(self, msgs: list[Any], offsets: list[int]) -> None:
        """Messages without error, in offset order, with their offsets."""
        self.keys += [m.key() for m in msgs]
        self.values += [m.value() for m in msgs]
        self.offsets += offsets
        self.stamps += [m.timestamp() for m in msgs]
        if self.include_headers:
            # Spark's Kafka source gives null, not an empty array, for a record without headers
            self.headers += [
                [{"key": k, "value": v} for k, v in h] if (h := m.headers()) else None for m in msgs
            ]

    def __len__(self) -> int:
        return len(self.offsets)

    def batch(self, schema: pa.Schema, topic: str, partition: int) -> pa.RecordBatch:
        stamps = pa.array(self.stamps, _STAMP)
        out = arrow_batch(
            schema,
            topic,
            partition,
            keys=self.keys,
            values=self.values,
            offsets=self.offsets,
            millis=stamps.field(1),
            # confluent-kafka: 1 = CreateTime, 2 = LogAppendTime; Spark: Kafka's ids 0 and 1
            types=pc.cast(pc.equal(stamps.field(0), 2), pa.int32()),
            headers=self.headers if self.include_headers else None,
        )
        self.clear()
        return out


def arrow_batch(
    schema: pa.Schema,
    topic: str,
    partition: int,
    *,
    keys: list[bytes | None],
    values: list[bytes | None],
    offsets: list[int],
    millis: pa.Array,
    types: pa.Array,
    headers: list[list[dict[str, Any]] | None] | None,
) -> pa.RecordBatch:
    """One Arrow batch of Spark's Kafka-source schema from column lists (timestamps in epoch
    milliseconds, timestamp types as Kafka's ids; topic and partition repeated by Arrow)."""
    n = len(offsets)
    cols = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC")),
        types,
    ]
    if headers is not None:
        cols.append(pa.array(headers, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def consumer_for(opts: SourceOptions) -> Consumer:
    return Consumer(
        librdkafka_config(
            opts.client,
            **{
                "group.id": f"{opts.group_id_prefix}-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",
                "isolation.level": opts.isolation_level,
                "fetch.wait.max.ms": 100,
                # one task reads one partition: larger fetches, fewer round trips per record
                "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
            },
        )
    )


def read_range(opts: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Every record of `rng` in offset order, as Arrow record batches of Spark's schema: through
    Fetch requests and aiokafka's Cython decoder when the `kafka.*` settings allow
    (services/spark/fast_reader.py), else through confluent-kafka."""
    if rng.until <= rng.start:
        return
    from services.spark.fast_reader import aiokafka_settings, read_range_fast  # imports this module

    settings = aiokafka_settings(opts.client)
    if settings is not None:
        yield from read_range_fast(opts, settings, rng.topic, rng.partition, rng.start, rng.until)
        return
    yield from read_range_confluent(opts, rng)


def read_range_confluent(opts: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """read_range through a confluent-kafka consumer (any `kafka.*` setting librdkafka takes)."""
    if rng.until <= rng.start:
        return
    schema = arrow_schema(opts.include_headers)
    consumer = consumer_for(opts)
    try:
        start = _checked_start(consumer, opts, rng)
        if start >= rng.until:
            return
        consumer.assign([TopicPartition(rng.topic, rng.partition, start)])
        cols = _Columns(opts.include_headers)
        position = start
        deadline = time.monotonic() + opts.poll_timeout_ms / 1000
        while position < rng.until:
            msgs = consumer.consume(num_messages=ROWS_PER_BATCH, timeout=0.5)
            if not msgs and time.monotonic() > deadline:
                raise KafkaPySparkError(
                    f"Cannot fetch records of {rng.topic}-{rng.partition} in "
                    f"[{position}, {rng.until}) within kafkaConsumer.pollTimeoutMs="
                    f"{opts.poll_timeout_ms}"
                )
            had = len(cols)
            position = _take(consumer, opts, rng, msgs, cols, position)
            if len(cols) > had:
                deadline = time.monotonic() + opts.poll_timeout_ms / 1000
            if len(cols) >= ROWS_PER_BATCH:
                yield cols.batch(schema, rng.topic, rng.partition)
        if len(cols):
            yield cols.batch(schema, rng.topic, rng.partition)
    finally:
        consumer.close()


def _take(
    consumer: Consumer,
    opts: SourceOptions,
    rng: OffsetRange,
    msgs: list[Any],
    cols: _Columns,
    position: int,
) -> int:
    """Add the records of `msgs` below `rng.until` to `cols`, slice by slice between the messages
    carrying an error (partition EOF, out of range: `_on_error`); returns the next position."""
    errors = [i for i, m in enumerate(msgs) if m.error() is not None]
    lo = 0
    for hi in [*errors, len(msgs)]:
        if position >= rng.until:
            break
        if hi > lo:
            good = msgs[lo:hi]
            offsets = [m.offset() for m in good]
            cut = bisect.bisect_left(offsets, rng.until)
            if cut:
                cols.add(good[:cut], offsets[:cut])
                position = offsets[cut - 1] + 1
            if cut < len(offsets):
                return rng.until
        if hi < len(msgs):
            position = _on_error(consumer, opts, rng, msgs[hi].error(), position)
        lo = hi + 1
    return position


def _checked_start(consumer: Consumer, opts: SourceOptions, rng: OffsetRange) -> int:
    """The offset to start at, after the data-loss check against the log start."""
    tp = TopicPartition(rng.topic, rng.partition)
    try:
        low, _high = consumer.get_watermark_offsets(tp, timeout=opts.api_timeout_ms / 1000)
    except Exception as e:  # noqa: BLE001 - one readable line instead of a worker traceback
        raise KafkaPySparkError(
            f"Cannot read {rng.topic}-{rng.partition} at {opts.bootstrap}: {e}"
        ) from None
    if low > rng.start:
        if opts.fail_on_data_loss:
            raise KafkaPySparkError(
                data_loss_message(
                    f"Cannot fetch offset {rng.start} of {rng.topic}-{rng.partition}: the log "
                    f"starts at {low}"
                )
            )
        return low
    return rng.start


def _on_error(
    consumer: Consumer, opts: SourceOptions, rng: OffsetRange, err: KafkaError, position: int
) -> int:
    """Partition EOF: whatever lies between here and `until` is invisible (markers, aborted or
    not yet stable records); out of range: data loss; anything else fails the task."""
    code = err.code()
    if code == KafkaError._PARTITION_EOF:
        at = consumer.position([TopicPartition(rng.topic, rng.partition)])[0].offset
        if at >= rng.until or at < 0:
            return rng.until
        return max(position, at)
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        restart = _checked_start(
            consumer, opts, OffsetRange(rng.topic, rng.partition, position, rng.until)
        )
        consumer.assign([TopicPartition(rng.topic, rng.partition, restart)])
        return restart
    raise KafkaPySparkError(f"Cannot read {rng.topic}-{rng.partition} at {opts.bootstrap}: {err}")
