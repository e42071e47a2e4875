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


def _bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    return str(v).encode()


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


def _millis(batch: pa.RecordBatch) -> list[int | None] | None:
    """The `timestamp` column (an extension of Spark's Kafka sink: the record's CreateTime) as
    epoch milliseconds, or None without that column."""
    names = [n.lower() for n in batch.schema.names]
    if "timestamp" not in names:
        return None
    col = batch.column(names.index("timestamp"))
    micros = pc.cast(col.cast(pa.timestamp("us", tz="UTC")), pa.int64())
    return [None if us is None else us // 1000 for us in micros.to_pylist()]


def _produce(
    producer: Producer, opts: SinkOptions, batch: pa.RecordBatch, delivery: _Delivery
) -> tuple[int, str | None]:
    """Hand every row of `batch` to the producer; returns (rows sent, first topic written)."""
    cols = {name.lower(): batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
    n = batch.num_rows
    values = cols["value"]
    keys = cols.get("key") or [None] * n
    topics = [opts.topic] * n if opts.topic else cols["topic"]
    parts = cols.get("partition") or [None] * n
    headers = cols.get("headers") or [None] * n
    stamps = _millis(batch) or [None] * n
    sent = 0
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise KafkaPySparkError(
                "null topic present in the data. Use the topic option for setting a default topic."
            )
        kwargs: dict[str, Any] = {"key": _bytes(keys[i]), "on_delivery": delivery}
        if parts[i] is not None:
            kwargs["partition"] = parts[i]
        if headers[i]:
            kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
        if stamps[i] is not None:
            kwargs["timestamp"] = stamps[i]
        while True:
            try:
                producer.produce(topic, _bytes(values[i]), **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        sent += 1
        if delivery.error is not None:
            break
    producer.poll(0)
    return sent, (topics[0] if n else None)


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
    """The task's write: at-least-once (idempotent producer), or one transaction per task with
    `deliveryGuarantee=exactly-once` (services/spark/exactly_once.py)."""
    if opts.exactly_once:
        from services.spark.exactly_once import write_in_transaction

        return write_in_transaction(opts, batches)
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
