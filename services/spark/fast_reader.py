"""Executor side, fast path: one offset range read with Fetch requests through aiokafka's client
and decoded by aiokafka's C-accelerated (Cython) record-batch reader straight into Arrow columns.

librdkafka + confluent-kafka cost ~1.2 µs of CPU per record before our conversion (a `Message`
object per record, librdkafka's own per-message queueing); this path costs ~0.4 µs per record
(docs/decisions.md, "Spark source: Fetch + aiokafka's Cython decoder"). It is taken when every
`kafka.*` setting maps onto aiokafka's client (`aiokafka_settings`); reader.read_range falls back
to confluent-kafka otherwise. Semantics follow Kafka's consumer (and aiokafka's fetcher):
control batches and, under read_committed, aborted transactions' batches are skipped (the
response's aborted-transaction list); records below the fetch offset (a batch fetched from its
start) and at or past `until` are left out; an empty batch left by compaction moves the position
to its next offset; OFFSET_OUT_OF_RANGE below the log start is data loss (`failOnDataLoss`).
"""

from __future__ import annotations

import asyncio
import gc
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import for_code
from aiokafka.helpers import create_ssl_context
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.control_record import ABORT_MARKER, ControlRecord
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition

from services.spark.options import KafkaPySparkError, SourceOptions
from services.spark.reader import arrow_batch, arrow_schema, data_loss_message

ROWS_PER_BATCH = 8192
PARTITION_FETCH_BYTES = 8 << 20  # as the confluent path's max.partition.fetch.bytes
FETCH_MAX_BYTES = 50 << 20
FETCH_WAIT_MS = 100
_OFFSET_OUT_OF_RANGE = 1
_EARLIEST = -2
_INT32 = struct.Struct(">i")

# librdkafka setting names (what `kafka.*` options are written in) -> aiokafka client keywords
_SIMPLE = {
    "bootstrap.servers": "bootstrap_servers",
    "client.id": "client_id",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
}
_SSL = {
    "ssl.ca.location": "cafile",
    "ssl.certificate.location": "certfile",
    "ssl.key.location": "keyfile",
    "ssl.key.password": "password",
}
# settings the source applies itself (RangeFetcher), or Java-only ones, or not about fetching
_IGNORED = frozenset(
    {
        "max.partition.fetch.bytes",
        "fetch.max.bytes",
        "isolation.level",
        "group.id",
        "default.api.timeout.ms",
        "key.deserializer",
        "value.deserializer",
        "max.poll.records",
    }
)


def aiokafka_settings(client: dict[str, str]) -> dict[str, Any] | None:
    """aiokafka client keywords for the `kafka.*` settings, or None when one of them has no
    aiokafka equivalent here (the reader then uses confluent-kafka, which takes them all)."""
    out: dict[str, Any] = {}
    ssl: dict[str, str] = {}
    check_hostname = True
    for key, value in client.items():
        if key in _SIMPLE:
            out[_SIMPLE[key]] = value.upper() if key == "security.protocol" else value
        elif key in _SSL:
            ssl[_SSL[key]] = value
        elif key == "ssl.endpoint.identification.algorithm":
            check_hostname = value.strip().lower() == "https"
        elif key not in _IGNORED:
            return None
    if out.get("security_protocol", "PLAINTEXT") in ("SSL", "SASL_SSL"):
        ctx = create_ssl_context(**ssl)  # type: ignore[arg-type]
        ctx.check_hostname = check_hostname
        out["ssl_context"] = ctx
    elif ssl:
        return None
    return out


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for a while. Decoding and encoding allocate a tracked
    object or two per record and make no reference cycles, but each collection the allocations
    trigger walks the growing column lists: with it on, decoding 200,000 records into Arrow cost
    1.4-2.7 µs per record, without it 0.4-0.9 (docs/benchmarks-spark.md)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class RecordColumns:
    """Column lists of one Arrow batch, filled one decoded record batch at a time."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.millis: list[int] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, Any]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, records: list[Any]) -> None:
        """aiokafka records (offset order) of one batch."""
        self.keys += [r.key for r in records]
        self.values += [r.value for r in records]
        self.offsets += [r.offset for r in records]
        self.millis += [r.timestamp for r in records]
        self.types += [r.timestamp_type for r in records]  # Kafka's ids, as Spark's
        if self.include_headers:
            # Spark's Kafka source gives null, not an empty array, for a record without headers
            self.headers += [
                [{"key": k, "value": v} for k, v in h] if (h := r.headers) else None
                for r in records
            ]

    def batch(self, schema: pa.Schema, topic: str, partition: int) -> pa.RecordBatch:
        out = arrow_batch(
            schema,
            topic,
            partition,
            keys=self.keys,
            values=self.values,
            offsets=self.offsets,
            millis=pa.array(self.millis, pa.int64()),
            types=pa.array(self.types, pa.int32()),
            headers=self.headers if self.include_headers else None,
        )
        self.clear()
        return out


class _Aborted:
    """read_committed: which producers' transactional batches are aborted at a batch, from a
    Fetch response's aborted-transaction list (Kafka's consumer, KIP-98)."""

    def __init__(self, aborted: list[tuple[int, int]] | None) -> None:
        self.pending = sorted(aborted or [], key=lambda a: a[1])
        self.producers: set[int] = set()

    def skip(self, batch: Any) -> bool:
        """True for a batch whose records are not returned (control or aborted)."""
        pid = batch.producer_id
        if pid is not None and pid >= 0:
            while self.pending and self.pending[0][1] <= batch.base_offset:
                self.producers.add(self.pending.pop(0)[0])
            if batch.is_control_batch:
                marker = next(iter(batch), None)
                if marker is not None and ControlRecord.parse(marker.key) == ABORT_MARKER:
                    self.producers.discard(pid)
                return True
            if batch.is_transactional and pid in self.producers:
                return True
        return bool(batch.is_control_batch)


class RangeFetcher:
    """Fetches one partition's offset range from its leader, response by response."""

    def __init__(self, client: AIOKafkaClient, opts: SourceOptions, topic: str, partition: int):
        self.client = client
        self.opts = opts
        self.tp = TopicPartition(topic, partition)
        self.isolation = 1 if opts.isolation_level == "read_committed" else 0
        part_bytes = int(opts.client.get("max.partition.fetch.bytes", PARTITION_FETCH_BYTES))
        self.part_bytes = part_bytes
        self.max_bytes = max(part_bytes, int(opts.client.get("fetch.max.bytes", FETCH_MAX_BYTES)))

    async def leader(self) -> int:
        """The partition's leader, refreshing metadata until one is known."""
        deadline = time.monotonic() + self.opts.api_timeout_ms / 1000
        await self.client.add_topic(self.tp.topic)
        while True:
            node = self.client.cluster.leader_for_partition(self.tp)
            if node is not None and node >= 0:
                return node
            if time.monotonic() > deadline:
                raise KafkaPySparkError(
                    f"Cannot read {self.tp.topic}-{self.tp.partition} at {self.opts.bootstrap}: "
                    "no leader (unknown topic or partition)"
                )
            await asyncio.sleep(0.1)
            await self.client.force_metadata_update()

    async def fetch(self, position: int) -> tuple[int, list[tuple[int, int]] | None, bytes]:
        """(error code, aborted transactions, records) of one Fetch at `position`."""
        req = FetchRequest(
            FETCH_WAIT_MS,
            1,
            self.max_bytes,
            self.isolation,
            [(self.tp.topic, [(self.tp.partition, position, self.part_bytes)])],
        )
        resp = await self.client.send(await self.leader(), req)
        for _topic, parts in resp.topics:
            for part in parts:
                if part[0] == self.tp.partition:
                    # after (partition, error, high watermark): v4-v10 [lso, (log start,)
                    # aborted, records]; v11+ [lso, log start, aborted, preferred replica, records]
                    version = resp.API_VERSION
                    aborted = part[5] if version >= 11 else part[-2] if version >= 4 else None
                    return part[1], aborted, part[-1] or b""
        return 0, None, b""

    async def log_start(self) -> int:
        """The partition's log start offset (ListOffsets earliest)."""
        req = OffsetRequest(-1, self.isolation, [(self.tp.topic, [(self.tp.partition, _EARLIEST)])])
        resp = await self.client.send(await self.leader(), req)
        for _topic, parts in resp.topics:
            for part in parts:
                if part[0] == self.tp.partition:
                    if part[1]:
                        raise KafkaPySparkError(
                            f"Cannot read {self.tp.topic}-{self.tp.partition} at "
                            f"{self.opts.bootstrap}: {for_code(part[1]).__name__}"
                        )
                    return int(part[3] if resp.API_VERSION >= 1 else part[2][0])
        raise KafkaPySparkError(f"No log start offset for {self.tp.topic}-{self.tp.partition}")


def _decode(
    records: bytes, aborted: _Aborted, position: int, until: int, cols: RecordColumns
) -> int:
    """Add the visible records of a Fetch response in [position, until) to `cols`; returns the
    next position (past skipped, empty and compacted batches too)."""
    batches = MemoryRecords(records)
    at = 0  # where the batch starts in `records`
    while position < until:
        batch = batches.next_batch()
        if batch is None:
            break
        here, at = at, at + 12 + _INT32.unpack_from(records, at + 8)[0]
        nxt = batch.next_offset
        if nxt <= position:
            continue
        # a batch emptied by compaction may hold an empty compressed payload that is not
        # decodable (e.g. a bare xerial snappy header): its record count says there is nothing
        empty = batch.magic >= 2 and _INT32.unpack_from(records, here + 57)[0] == 0
        if not empty and not aborted.skip(batch):
            recs = list(batch)
            if recs and (recs[0].offset < position or recs[-1].offset >= until):
                recs = [r for r in recs if position <= r.offset < until]
            if recs:
                cols.add(recs)
        position = min(nxt, until)
    return position


def read_range_fast(
    opts: SourceOptions,
    settings: dict[str, Any],
    topic: str,
    partition: int,
    start: int,
    until: int,
) -> Iterator[pa.RecordBatch]:
    """Every visible record of [start, until) in offset order, as Arrow record batches."""
    schema = arrow_schema(opts.include_headers)
    loop = asyncio.new_event_loop()
    client = AIOKafkaClient(
        loop=loop, request_timeout_ms=max(opts.api_timeout_ms, 30_000), **settings
    )
    name = f"{topic}-{partition}"
    try:
        try:
            loop.run_until_complete(client.bootstrap())
        except Exception as e:  # noqa: BLE001 - one readable line instead of a worker traceback
            raise KafkaPySparkError(f"Cannot read {name} at {opts.bootstrap}: {e}") from None
        fetcher = RangeFetcher(client, opts, topic, partition)
        cols = RecordColumns(opts.include_headers)
        position = start
        deadline = time.monotonic() + opts.poll_timeout_ms / 1000
        while position < until:
            error = ""
            try:
                code, aborted, records = loop.run_until_complete(fetcher.fetch(position))
            except KafkaPySparkError:
                raise
            except Exception as e:  # noqa: BLE001 - connection lost, timeouts: retried below
                code, aborted, records = -1, None, b""
                error = repr(e)
            if code == _OFFSET_OUT_OF_RANGE:
                low = loop.run_until_complete(fetcher.log_start())
                what = f"Cannot fetch offset {position} of {name}: the log starts at {low}"
                if low <= position:
                    what = f"Cannot fetch offset {position} of {name}: it is out of range"
                if opts.fail_on_data_loss:
                    raise KafkaPySparkError(data_loss_message(what))
                if low <= position:
                    break
                position = low
                continue
            if code > 0:
                err = for_code(code)
                if not err.retriable and not getattr(err, "invalid_metadata", False):
                    raise KafkaPySparkError(
                        f"Cannot read {name} at {opts.bootstrap}: {err.__name__}"
                    )
                error = err.__name__
                loop.run_until_complete(client.force_metadata_update())
            before = position
            if code == 0:
                with paused_gc():
                    position = _decode(records, _Aborted(aborted), position, until, cols)
            if position > before:
                deadline = time.monotonic() + opts.poll_timeout_ms / 1000
            elif time.monotonic() > deadline:
                raise KafkaPySparkError(
                    f"Cannot fetch records of {name} in [{position}, {until}) within "
                    f"kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms}"
                    + (f" ({error})" if code else "")
                )
            elif code:
                time.sleep(0.1)
            if len(cols) >= ROWS_PER_BATCH:
                with paused_gc():
                    out = cols.batch(schema, topic, partition)
                yield out
        if len(cols):
            with paused_gc():
                out = cols.batch(schema, topic, partition)
            yield out
    finally:
        loop.run_until_complete(client.close())
        loop.close()
