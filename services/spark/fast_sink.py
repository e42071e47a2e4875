"""The sink's fast path (at-least-once writes): rows encoded into Kafka record batches by
aiokafka's C-accelerated (Cython) batch builder and sent with aiokafka's own idempotent producer
(`AIOKafkaProducer(enable_idempotence=True, acks="all")`, `create_batch`/`send_batch`): the
library owns the protocol (InitProducerId, per-partition sequence numbers, retries keeping their
sequence, per-partition order), so a retried request is deduplicated by the broker, as
librdkafka's would be.

confluent-kafka costs ~1 µs of CPU per row (a `produce()` call, librdkafka's per-message
queueing, a delivery report); the whole write 1.6-1.9 µs with it, ~0.65 µs here, outside Spark (docs/decisions.md
D75, "Spark source and sink fast paths"). It is taken when every `kafka.*` setting maps onto
aiokafka's client; sink.write_batches falls back to confluent-kafka otherwise, and for
exactly-once. Partitions as librdkafka's default partitioner (`consistent_random`) picks them:
CRC-32 of a non-empty key modulo the partition count, a random partition (one per Arrow batch)
otherwise.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import zlib
from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, UnknownTopicOrPartitionError
from aiokafka.producer.message_accumulator import BatchBuilder

from services.spark.fast_reader import aiokafka_settings
from services.spark.options import KafkaPySparkError, SinkOptions

BATCH_BYTES = 1 << 20  # Kafka's default max.request.size / message.max.bytes
DELIVERY_TIMEOUT_S = 120.0  # librdkafka's default delivery.timeout.ms is 300 s, Java's 120 s
REQUEST_TIMEOUT_MS = 30_000
STOP_TIMEOUT_S = 5.0
_CODECS = {"none": None, "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}
_PRODUCER_KEYS = frozenset({"compression.type", "compression.codec", "linger.ms"})


def producer_settings(opts: SinkOptions) -> tuple[dict[str, Any], str | None] | None:
    """(aiokafka client keywords, aiokafka compression type) for at-least-once writes, or None
    when a `kafka.*` setting has no equivalent here (the sink then uses confluent-kafka)."""
    if opts.exactly_once:
        return None
    client = {k: v for k, v in opts.client.items() if k not in _PRODUCER_KEYS}
    settings = aiokafka_settings(client)
    codec = opts.client.get("compression.type", opts.client.get("compression.codec", "none"))
    if settings is None or codec.lower() not in _CODECS:
        return None
    return settings, _CODECS[codec.lower()]


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    names = [n.lower() for n in batch.schema.names]
    return batch.column(names.index(name)) if name in names else None


def _binary(col: pa.Array | None, n: int) -> list[bytes | None]:
    if col is None:
        return [None] * n
    if pa.types.is_string(col.type):
        col = col.cast(pa.binary())  # UTF-8 bytes as they are
    return col.to_pylist()


def _partitions(keys: list[bytes | None], part: pa.Array | None, count: int) -> np.ndarray:
    """Each row's partition: the `partition` column, else librdkafka's consistent_random."""
    sticky = random.randrange(count)
    crc = zlib.crc32
    if part is None or part.null_count == len(part):
        return np.array([crc(k) % count if k else sticky for k in keys], np.int64)
    chosen = pc.fill_null(part, -1).to_numpy().astype(np.int64)
    todo = np.flatnonzero(chosen < 0).tolist()
    if todo:
        chosen[todo] = [crc(k) % count if k else sticky for k in itemgetter(*todo, -1)(keys)[:-1]]
    return chosen


Rows = tuple[Sequence[bytes | None], Sequence[bytes | None], Sequence[int], Sequence[list[Any]]]


class BatchWriter:
    """Rows into record batches handed to aiokafka's idempotent producer, which numbers, sends,
    retries and acknowledges them (acks=all)."""

    def __init__(self, producer: AIOKafkaProducer, opts: SinkOptions) -> None:
        self.producer = producer
        self.opts = opts

    def _fail(self, what: str) -> KafkaPySparkError:
        return KafkaPySparkError(f"Writing to {self.opts.bootstrap} failed: {what}")

    async def partition_count(self, topic: str) -> int:
        try:
            return len(await self.producer.partitions_for(topic))
        except UnknownTopicOrPartitionError:
            raise self._fail(f"Unknown topic or partition: {topic}") from None
        except KafkaError as e:
            raise self._fail(type(e).__name__) from None

    async def send(self, rows: dict[tuple[str, int], Rows]) -> None:
        """Every row of `rows` (keys, values, timestamps, headers by partition) in record batches
        of up to BATCH_BYTES, each acknowledged (acks=all) within DELIVERY_TIMEOUT_S."""
        acks = []
        for (topic, partition), part_rows in rows.items():
            done, n = 0, len(part_rows[0])
            while done < n:
                batch = self.producer.create_batch()
                done = _fill(batch, part_rows, done)
                acks.append((topic, partition, await self._send_batch(batch, topic, partition)))
        try:
            async with asyncio.timeout(DELIVERY_TIMEOUT_S):
                for topic, partition, ack in acks:
                    try:
                        await ack
                    except KafkaError as e:
                        raise self._fail(f"{type(e).__name__} ({topic}-{partition})") from None
        except TimeoutError:
            raise self._fail(f"not acknowledged within {DELIVERY_TIMEOUT_S:.0f} s") from None

    async def _send_batch(
        self, batch: BatchBuilder, topic: str, partition: int
    ) -> asyncio.Future[Any]:
        try:
            fut: asyncio.Future[Any] = await self.producer.send_batch(
                batch, topic, partition=partition
            )
        except KafkaError as e:
            raise self._fail(f"{type(e).__name__} ({topic}-{partition})") from None
        return fut


def _fill(batch: BatchBuilder, rows: Rows, start: int) -> int:
    """Append rows[start:] to an empty `batch` until it is full; returns the next row's index.
    The records go straight into the batch's Cython builder, as BatchBuilder.append does one by
    one but without its keyword call and per-record metadata object (0.62-0.67 against 0.73-0.84
    µs of CPU per row written, docs/decisions.md D75); the BatchBuilder's record count is kept in
    step, so the producer numbers and sends the batch as its own."""
    append = batch._builder.append
    keys, values, stamps, headers = rows
    offset = 0
    for key, value, ts, hdrs in zip(
        keys[start:], values[start:], stamps[start:], headers[start:], strict=True
    ):
        if append(offset, ts, key, value, hdrs) is None:  # full (an empty batch takes any record)
            break
        offset += 1
    batch._relative_offset = offset
    batch.close()
    return start + offset


def _pick(items: Sequence[Any], idx: list[int]) -> Sequence[Any]:
    """items[i] for i in idx (C-level gathering)."""
    if len(idx) == len(items) and idx == list(range(len(items))):
        return items
    return itemgetter(*idx, 0)(items)[:-1] if idx else ()


def _rows_by_partition(
    producer: BatchWriter,
    loop: asyncio.AbstractEventLoop,
    opts: SinkOptions,
    batch: pa.RecordBatch,
) -> dict[tuple[str, int], Rows]:
    """The rows of an Arrow batch as (keys, values, timestamps ms, headers), by topic partition,
    in row order within each partition."""
    n = batch.num_rows
    keys = _binary(_column(batch, "key"), n)
    values = _binary(_column(batch, "value"), n)
    stamp, head = _column(batch, "timestamp"), _column(batch, "headers")
    now = int(time.time() * 1000)
    if stamp is None:
        stamps: Sequence[int] = [now] * n
    else:  # null: the producer's "now"
        micros = pc.cast(stamp.cast(pa.timestamp("us", tz="UTC")), pa.int64())
        stamps = pc.fill_null(pc.divide(micros, 1000), now).to_pylist()
    no_headers: list[Any] = []
    if head is None:
        headers: Sequence[list[Any]] = [no_headers] * n
    else:
        headers = [[(h["key"], h["value"]) for h in row] if row else [] for row in head.to_pylist()]
    if opts.topic:
        by_topic = {opts.topic: list(range(n))}
    else:
        col = _column(batch, "topic")
        if col is None or col.null_count:
            raise KafkaPySparkError(
                "null topic present in the data. Use the topic option for setting a default topic."
            )
        by_topic = {}
        for i, name in enumerate(col.to_pylist()):
            by_topic.setdefault(name, []).append(i)
    part = _column(batch, "partition")
    out: dict[tuple[str, int], Rows] = {}
    for topic, idx in by_topic.items():
        count = loop.run_until_complete(producer.partition_count(topic))
        sub_part = part if part is None or len(idx) == n else part.take(pa.array(idx))
        chosen = _partitions(list(_pick(keys, idx)), sub_part, count)
        order = np.argsort(chosen, kind="stable")
        ordered = chosen[order]
        if len(ordered) and (ordered[0] < 0 or ordered[-1] >= count):
            bad = int(ordered[-1] if ordered[-1] >= count else ordered[0])
            raise KafkaPySparkError(
                f"Writing to {opts.bootstrap} failed: Unknown partition {topic}-{bad}"
            )
        rows = np.asarray(idx)[order].tolist()
        bounds = [0, *(np.flatnonzero(np.diff(ordered)) + 1).tolist(), len(rows)]
        for lo, hi in itertools.pairwise(bounds):
            sel = rows[lo:hi]
            out[(topic, int(ordered[lo]))] = (
                _pick(keys, sel),
                _pick(values, sel),
                _pick(stamps, sel),
                _pick(headers, sel),
            )
    return out


def write_fast(
    opts: SinkOptions,
    settings: dict[str, Any],
    codec: str | None,
    batches: Iterator[pa.RecordBatch],
) -> int:
    """Write every row of `batches` (at-least-once, idempotent); returns the rows written, all
    acknowledged. A task without rows (a shuffle leaves many) connects to nothing."""
    rows_in = (b for b in batches if b.num_rows)
    first = next(rows_in, None)
    if first is None:
        return 0
    loop = asyncio.new_event_loop()

    async def start() -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            enable_idempotence=True,
            acks="all",
            compression_type=codec,
            max_batch_size=BATCH_BYTES,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            **settings,
        )
        try:
            await producer.start()
        except Exception as e:  # noqa: BLE001 - one readable line instead of a worker traceback
            await producer.stop()
            raise KafkaPySparkError(f"Writing to {opts.bootstrap} failed: {e}") from None
        return producer

    producer = loop.run_until_complete(start())
    try:
        writer = BatchWriter(producer, opts)
        sent = 0
        for batch in itertools.chain([first], rows_in):
            rows = _rows_by_partition(writer, loop, opts, batch)
            loop.run_until_complete(writer.send(rows))
            sent += batch.num_rows
        return sent
    finally:
        _stop(loop, producer)


def _stop(loop: asyncio.AbstractEventLoop, producer: AIOKafkaProducer) -> None:
    """Close the producer and the loop. After a failure, batches still retrying (an idempotent
    producer retries until acknowledged) are not waited for beyond STOP_TIMEOUT_S."""

    async def stop() -> None:
        try:
            await asyncio.wait_for(producer.stop(), STOP_TIMEOUT_S)
        except TimeoutError:
            pass
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        loop.run_until_complete(stop())
    finally:
        loop.close()
