"""Exactly-once writes of the `kafkapy` sink (`deliveryGuarantee=exactly-once`), docs/decisions.md.

Each partition-task of a micro-batch writes its rows in one Kafka transaction whose
`transactional.id` is `<transactionalIdPrefix><query id>-<partition id>`: stable across batches
and restarts of the query (Spark's query id is kept in the checkpoint), so a retried or replayed
task's `init_transactions` fences the earlier attempt and aborts its open transaction. The same
transaction commits a marker, the group `<transactional id>`'s offset `batch id + 1`
(TxnOffsetCommit), so a batch replayed after its transaction committed (crash between the Kafka
commit and Spark's commit log) is recognised and skipped instead of written twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from services.spark.options import KafkaPySparkError, SinkOptions, librdkafka_config
from services.spark.sink import WrittenRecords, produce_all

QUERY_ID = "sql.streaming.queryId"  # Spark's local properties of a micro-batch's tasks
BATCH_ID = "streaming.sql.batchId"
TIMEOUT_S = 60.0


def task_identity(prefix: str) -> tuple[str, int]:
    """(transactional id, batch id) of the running task, from Spark's task context."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    query = ctx.getLocalProperty(QUERY_ID) if ctx else None
    batch = ctx.getLocalProperty(BATCH_ID) if ctx else None
    if ctx is None or query is None or batch is None:
        raise KafkaPySparkError(
            "deliveryGuarantee=exactly-once needs a streaming query (a micro-batch or its "
            "foreachBatch): a batch write has no checkpoint to replay from"
        )
    return f"{prefix}{query}-{ctx.partitionId()}", int(batch)


def last_committed_batch(conf: dict[str, Any], group: str) -> int | None:
    """The batch id of the last transaction this task id committed (its marker), or None.

    Asked with require_stable, after init_transactions ended any open transaction of the id."""
    admin = AdminClient({k: v for k, v in conf.items() if k != "transactional.id"})
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        fut = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], require_stable=True, request_timeout=TIMEOUT_S
        )[group]
        try:
            res = fut.result()
        except KafkaException as exc:
            if time.monotonic() < deadline and exc.args[0].retriable():
                time.sleep(0.2)
                continue
            raise KafkaPySparkError(f"Reading the commit marker of {group} failed: {exc}") from None
        parts = res.topic_partitions or []
        unstable = [tp for tp in parts if tp.error is not None]
        if unstable and time.monotonic() < deadline:
            time.sleep(0.2)
            continue
        if unstable:
            raise KafkaPySparkError(f"Commit marker of {group}: {unstable[0].error}")
        offsets = [tp.offset for tp in parts if tp.offset >= 0]
        return max(offsets) - 1 if offsets else None


def _first_batch(batches: Iterator[pa.RecordBatch]) -> pa.RecordBatch | None:
    for batch in batches:
        if batch.num_rows:
            return batch
    return None


def write_in_transaction(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> WrittenRecords:
    """The task's rows in one transaction with its commit marker; a batch already committed by
    this task id is consumed without writing."""
    first = _first_batch(batches)
    if first is None:
        return WrittenRecords(0)  # nothing to write, now or on a replay (same offsets, same rows)
    txn_id, batch_id = task_identity(opts.transactional_id_prefix)
    conf = librdkafka_config(opts.client, **{"linger.ms": 5, "transactional.id": txn_id})
    producer = Producer(conf)
    try:
        producer.init_transactions(TIMEOUT_S)  # fences older attempts, aborts their transaction
        done = last_committed_batch(conf, txn_id)
        if done is not None and done >= batch_id:
            for _ in batches:  # replay of a committed batch: already in Kafka
                pass
            return WrittenRecords(0)
        producer.begin_transaction()

        def rows() -> Iterator[pa.RecordBatch]:
            yield first
            yield from batches

        sent, topic = produce_all(producer, opts, rows())
        marker = Consumer(librdkafka_config(opts.client, **{"group.id": txn_id}))
        try:
            producer.send_offsets_to_transaction(
                [KafkaTopicPartition(topic or "", 0, batch_id + 1)],
                marker.consumer_group_metadata(),
                TIMEOUT_S,
            )
        finally:
            marker.close()
        producer.commit_transaction(TIMEOUT_S)
    except KafkaException as exc:
        raise KafkaPySparkError(f"Transaction {txn_id} failed: {exc.args[0].str()}") from None
    return WrittenRecords(sent)
