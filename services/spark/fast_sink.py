"""The sink's fast path (at-least-once writes): rows encoded into Kafka record batches by
aiokafka's C-accelerated (Cython) batch builder and sent in Produce requests through aiokafka's
client, as an idempotent producer (a producer id from InitProducerId, per-partition sequence
numbers, acks=all): a retried request is deduplicated by the broker, as librdkafka's would be.

confluent-kafka costs ~1 µs of CPU per row (a `produce()` call, librdkafka's per-message
queueing, a delivery report); this path ~0.3 µs (docs/decisions.md, "Spark sink: Produce +
aiokafka's Cython batch builder"). It is taken when every `kafka.*` setting maps onto aiokafka's
client; sink.write_batches falls back to confluent-kafka otherwise, and for exactly-once.
Partitions as librdkafka's default partitioner (`consistent_random`) picks them: CRC-32 of a
non-empty key modulo the partition count, a random partition (one per Arrow batch) otherwise.
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
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import for_code
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.protocol.transaction import InitProducerIdRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import TopicPartition

from services.spark.fast_reader import aiokafka_settings
from services.spark.options import KafkaPySparkError, SinkOptions

BATCH_BYTES = 1 << 20  # Kafka's default max.request.size / message.max.bytes
DELIVERY_TIMEOUT_S = 120.0  # librdkafka's default delivery.timeout.ms is 300 s, Java's 120 s
REQUEST_TIMEOUT_MS = 30_000
_DUPLICATE_SEQUENCE = 46
_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_PRODUCER_KEYS = frozenset({"compression.type", "compression.codec", "linger.ms"})


def producer_settings(opts: SinkOptions) -> tuple[dict[str, Any], int] | None:
    """(aiokafka client keywords, compression codec id) for at-least-once writes, or None when a
    `kafka.*` setting has no equivalent here (the sink then uses confluent-kafka)."""
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


class _Partition:
    """One topic partition's idempotent sequence."""

    def __init__(self) -> None:
        self.sequence = 0


class BatchProducer:
    """Idempotent Produce requests of whole record batches, one in flight per task."""

    def __init__(self, client: AIOKafkaClient, opts: SinkOptions, codec: int) -> None:
        self.client = client
        self.opts = opts
        self.codec = codec
        self.pid = -1
        self.epoch = -1
        self.partitions: dict[tuple[str, int], _Partition] = {}

    def _fail(self, what: str) -> KafkaPySparkError:
        return KafkaPySparkError(f"Writing to {self.opts.bootstrap} failed: {what}")

    async def init(self) -> None:
        node = self.client.get_random_node()
        resp = await self.client.send(node, InitProducerIdRequest(None, 60_000))  # type: ignore[arg-type]
        if resp.error_code:
            raise self._fail(for_code(resp.error_code).__name__)
        self.pid, self.epoch = resp.producer_id, resp.producer_epoch

    async def partition_count(self, topic: str) -> int:
        deadline = time.monotonic() + DELIVERY_TIMEOUT_S / 4
        await self.client.add_topic(topic)
        while True:
            parts = self.client.cluster.partitions_for_topic(topic)
            if parts:
                return len(parts)
            if time.monotonic() > deadline:
                raise self._fail(f"Unknown topic or partition: {topic}")
            await asyncio.sleep(0.2)
            await self.client.force_metadata_update()

    def encode(self, topic: str, partition: int, rows: Rows) -> list[tuple[bytes, int]]:
        """Record batches (bytes, record count) of `rows` (keys, values, timestamps, headers)
        at the partition's next sequence numbers."""
        out = []
        state = self.partitions.setdefault((topic, partition), _Partition())
        seq = state.sequence
        keys, values, stamps, headers = rows
        i, n = 0, len(keys)
        while i < n:
            builder = DefaultRecordBatchBuilder(
                2, self.codec, 0, self.pid, self.epoch, seq, BATCH_BYTES
            )
            append = builder.append
            delta = 0
            for key, value, ts, hdrs in zip(
                keys[i:], values[i:], stamps[i:], headers[i:], strict=True
            ):
                if append(delta, ts, key, value, hdrs) is None:
                    break
                delta += 1
            out.append((bytes(builder.build()), delta))
            seq = (seq + delta) & 0x7FFFFFFF
            i += delta
        state.sequence = seq
        return out

    async def send(self, batches: dict[tuple[str, int], list[tuple[bytes, int]]]) -> None:
        """Every batch written (acks=all), in order per partition: one batch per partition per
        request (Kafka's rule for magic 2); a retried batch keeps its sequence, so a request
        that was written before its response was lost comes back as a duplicate, not twice."""
        pending = {tp: list(bs) for tp, bs in batches.items() if bs}
        deadline = time.monotonic() + DELIVERY_TIMEOUT_S
        error = ""
        while pending:
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in pending:
                await self.client.add_topic(tp[0])
                leader = self.client.cluster.leader_for_partition(TopicPartition(*tp))
                if leader is not None and leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            results = await asyncio.gather(
                *(self._send_one(node, tps, pending) for node, tps in by_leader.items()),
                return_exceptions=True,
            )
            retry = not by_leader
            for res in results:
                if isinstance(res, KafkaPySparkError):
                    raise res
                if isinstance(res, BaseException):
                    retry, error = True, repr(res)
                elif res:
                    retry, error = True, res
            if pending and (retry or not results):
                if time.monotonic() > deadline:
                    raise self._fail(f"not acknowledged within {DELIVERY_TIMEOUT_S:.0f} s {error}")
                await asyncio.sleep(0.1)
                await self.client.force_metadata_update()

    async def _send_one(
        self,
        node: int,
        tps: list[tuple[str, int]],
        pending: dict[tuple[str, int], list[tuple[bytes, int]]],
    ) -> str:
        """One Produce request to `node` with the next batch of each of `tps`; acknowledged
        batches leave `pending`. Returns the name of a retriable error, or ""."""
        topics: dict[str, list[tuple[int, bytes]]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append((partition, pending[(topic, partition)][0][0]))
        req = ProduceRequest(None, -1, REQUEST_TIMEOUT_MS, list(topics.items()))
        resp = await self.client.send(node, req)
        retriable = ""
        for topic, parts in resp.topics:
            for part in parts:
                tp, code = (topic, part[0]), part[1]
                if code in (0, _DUPLICATE_SEQUENCE):
                    pending[tp].pop(0)
                    if not pending[tp]:
                        del pending[tp]
                    continue
                err = for_code(code)
                if not err.retriable and not getattr(err, "invalid_metadata", False):
                    raise self._fail(f"{err.__name__} ({topic}-{part[0]})")
                retriable = err.__name__
        return retriable


def _pick(items: Sequence[Any], idx: list[int]) -> Sequence[Any]:
    """items[i] for i in idx (C-level gathering)."""
    if len(idx) == len(items) and idx == list(range(len(items))):
        return items
    return itemgetter(*idx, 0)(items)[:-1] if idx else ()


def _rows_by_partition(
    producer: BatchProducer,
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
    opts: SinkOptions, settings: dict[str, Any], codec: int, batches: Iterator[pa.RecordBatch]
) -> int:
    """Write every row of `batches` (at-least-once, idempotent); returns the rows written. A task
    without rows (a shuffle leaves many) connects to nothing."""
    rows_in = (b for b in batches if b.num_rows)
    first = next(rows_in, None)
    if first is None:
        return 0
    loop = asyncio.new_event_loop()
    client = AIOKafkaClient(loop=loop, request_timeout_ms=REQUEST_TIMEOUT_MS, **settings)
    try:
        try:
            loop.run_until_complete(client.bootstrap())
        except Exception as e:  # noqa: BLE001 - one readable line instead of a worker traceback
            raise KafkaPySparkError(f"Writing to {opts.bootstrap} failed: {e}") from None
        producer = BatchProducer(client, opts, codec)
        loop.run_until_complete(producer.init())
        sent = 0
        for batch in itertools.chain([first], rows_in):
            rows = _rows_by_partition(producer, loop, opts, batch)
            encoded = {tp: producer.encode(*tp, r) for tp, r in rows.items()}
            loop.run_until_complete(producer.send(encoded))
            sent += batch.num_rows
        return sent
    finally:
        loop.run_until_complete(client.close())
        loop.close()
