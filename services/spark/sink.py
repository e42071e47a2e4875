"""The `kafkapy` sink: DataFrame rows (`key`, `value`, optional `topic`, `partition`, `headers`,
`timestamp`)
written with an idempotent confluent-kafka producer, batch and streaming, Arrow in.

Delivery is at-least-once by default: a task succeeds only after every record was acknowledged
(`acks=all`, idempotence on, so retries inside a task never duplicate); a task or micro-batch
replayed after a failure may write its records again. `deliveryGuarantee=exactly-once` writes
each partition-task of a micro-batch in one transaction with a commit marker
(services/spark/exactly_once.py), so read_committed readers see every row once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from services.spark.options import KafkaPySparkError, SinkOptions, librdkafka_config, parse_sink


@dataclass
class WrittenRecords(WriterCommitMessage):
    """What one task wrote (acknowledged records)."""

    records: int


def _check_type(name: str, dtype: DataType, allowed: tuple[type, ...], what: str) -> None:
    if not isinstance(dtype, allowed):
        raise KafkaPySparkError(f"{name} attribute type must be {what}, got {dtype.simpleString()}")


def validate_schema(schema: StructType, opts: SinkOptions) -> None:
    """Spark's Kafka-sink rules for the columns of the DataFrame written."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise KafkaPySparkError("Required attribute 'value' not found")
    _check_type("value", fields["value"], (StringType, BinaryType), "a string or binary")
    if "key" in fields:
        _check_type("key", fields["key"], (StringType, BinaryType), "a string or binary")
    if "topic" in fields:
        _check_type("topic", fields["topic"], (StringType,), "a string")
    elif opts.topic is None:
        raise KafkaPySparkError(
            "topic option required when no 'topic' attribute is present. Use the topic option "
            "for setting a topic."
        )
    if "partition" in fields:
        _check_type("partition", fields["partition"], (IntegerType,), "an int")
    if "timestamp" in fields:
        _check_type("timestamp", fields["timestamp"], (TimestampType,), "a timestamp")
    if "headers" in fields:
        headers = fields["headers"]
        ok = (
            isinstance(headers, ArrayType)
            and isinstance(headers.elementType, StructType)
            and [f.name for f in headers.elementType.fields] == ["key", "value"]
            and isinstance(headers.elementType.fields[0].dataType, StringType)
            and isinstance(headers.elementType.fields[1].dataType, BinaryType)
        )
        if not ok:
            raise KafkaPySparkError(
                "headers attribute type must be array<struct<key:string,value:binary>>, got "
                f"{headers.simpleString()}"
            )


class _Delivery:
    """Counts acknowledged records and keeps the first delivery error."""

    def __init__(self) -> None:
        self.acked = 0
        self.error: KafkaError | None = None

    def __call__(self, err: KafkaError | None, _msg: Any) -> None:
        if err is None:
            self.acked += 1
        elif self.error is None:
            self.error = err


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    names = [n.lower() for n in batch.schema.names]
    return batch.column(names.index(name)) if name in names else None


def _millis(col: pa.Array) -> list[int]:
    """The `timestamp` column (an extension of Spark's Kafka sink: the record's CreateTime) as
    epoch milliseconds (truncated); null is 0, the producer's "now"."""
    micros = pc.cast(col.cast(pa.timestamp("us", tz="UTC")), pa.int64())
    return pc.fill_null(pc.divide(micros, 1000), 0).to_pylist()


def _headers(col: pa.Array) -> list[list[tuple[str, bytes]] | None]:
    return [[(h["key"], h["value"]) for h in row] if row else None for row in col.to_pylist()]


def _full(producer: Producer, delivery: _Delivery) -> bool:
    """The producer's queue is full: serve delivery reports (they arrive only in poll/flush);
    True when one of them failed."""
    producer.poll(0.05)
    return delivery.error is not None


def _produce(
    producer: Producer, opts: SinkOptions, batch: pa.RecordBatch, delivery: _Delivery
) -> tuple[int, str | None]:
    """Hand every row of `batch` to the producer; returns (rows sent, first topic written).

    Columns are turned into Python lists once (Arrow computes the defaults: partition -1 and
    timestamp 0 are the producer's "any partition" and "now"); strings go to the producer as
    they are (it writes them UTF-8 encoded)."""
    n = batch.num_rows
    if not n:
        return 0, None
    key, part, stamp, head = (
        _column(batch, c) for c in ("key", "partition", "timestamp", "headers")
    )
    values = _column(batch, "value").to_pylist()  # type: ignore[union-attr]  # validated schema
    keys = itertools.repeat(None, n) if key is None else key.to_pylist()
    parts = itertools.repeat(-1, n) if part is None else pc.fill_null(part, -1).to_pylist()
    stamps = itertools.repeat(0, n) if stamp is None else _millis(stamp)
    headers = itertools.repeat(None, n) if head is None else _headers(head)
    if opts.topic:
        topics: Any = itertools.repeat(opts.topic, n)
        first = opts.topic
    else:
        col = _column(batch, "topic")
        if col is None or col.null_count:
            raise KafkaPySparkError(
                "null topic present in the data. Use the topic option for setting a default topic."
            )
        topics = col.to_pylist()
        first = topics[0]
    produce = producer.produce
    if stamp is None and head is None:  # the common case, without per-row keywords of no use
        for i, (topic, value, k, p) in enumerate(zip(topics, values, keys, parts, strict=True)):
            while True:
                try:
                    produce(topic, value, k, partition=p, on_delivery=delivery)
                    break
                except BufferError:
                    if _full(producer, delivery):
                        return i, first
        producer.poll(0)
        return n, first
    rows = zip(topics, values, keys, parts, stamps, headers, strict=True)
    for i, (topic, value, k, p, ts, h) in enumerate(rows):
        while True:
            try:
                produce(topic, value, k, partition=p, on_delivery=delivery, timestamp=ts, headers=h)
                break
            except BufferError:
                if _full(producer, delivery):
                    return i, first
    producer.poll(0)
    return n, first


def produce_all(
    producer: Producer, opts: SinkOptions, batches: Iterator[pa.RecordBatch]
) -> tuple[int, str | None]:
    """Produce every row and wait until all are acknowledged, or raise with the first delivery
    error. Returns (records written, first topic written)."""
    delivery = _Delivery()
    sent = 0
    first: str | None = None
    for batch in batches:
        n, topic = _produce(producer, opts, batch, delivery)
        sent += n
        first = first or topic
        if delivery.error is not None:
            break
    left = producer.flush()
    while left:
        left = producer.flush(1.0)
    if delivery.error is not None:
        raise KafkaPySparkError(f"Writing to {opts.bootstrap} failed: {delivery.error.str()}")
    if delivery.acked != sent:
        raise KafkaPySparkError(f"only {delivery.acked} of {sent} records were acknowledged")
    return sent, first


def write_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> WrittenRecords:
    """The task's write: at-least-once (idempotent producer: aiokafka's batch builder and client
    when the `kafka.*` settings allow, else confluent-kafka), or one transaction per task with
    `deliveryGuarantee=exactly-once` (services/spark/exactly_once.py)."""
    if opts.exactly_once:
        from services.spark.exactly_once import write_in_transaction

        return write_in_transaction(opts, batches)
    from services.spark.fast_sink import producer_settings, write_fast

    fast = producer_settings(opts)
    if fast is not None:  # Produce requests of whole record batches (services/spark/fast_sink.py)
        return WrittenRecords(write_fast(opts, *fast, batches))
    conf = librdkafka_config(
        opts.client,
        **{"enable.idempotence": True, "acks": "all", "linger.ms": 5},
    )
    sent, _ = produce_all(Producer(conf), opts, batches)
    return WrittenRecords(sent)


class KafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_sink(options)
        validate_schema(schema, self.opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        return write_batches(self.opts, iterator)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """commit() has nothing left to do: every task's records were acknowledged, or (exactly-once)
    its transaction committed together with its batch marker."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_sink(options)
        validate_schema(schema, self.opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Records are durable once written (acks=all)."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Acknowledged records of failed tasks stay (at-least-once); open transactions of failed
        tasks are aborted by the replay's fencing (exactly-once)."""
