"""The `kafkapy` data source: Spark's Kafka source (batch and micro-batch) and sink.

Driver side: offsets are resolved with ListOffsets (ClusterView) and planned into offset ranges;
executor side: each range is read into Arrow record batches (reader.read_range). Streaming
offsets are Spark's Kafka-source JSON; the checkpoint, not `commit()`, is the source of truth.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from services.spark.metadata import TP, ClusterView, Offsets, offsets_from_json, offsets_to_json
from services.spark.options import KafkaPySparkError, SourceOptions, parse_source
from services.spark.planning import rate_limit, split_ranges
from services.spark.reader import OffsetRange, data_loss_message, read_range

HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka-source schema (`headers` with includeHeaders)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS))
    return StructType(fields)


class RangePartition(InputPartition):
    """One Spark task: one offset range of one topic partition."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.rng = rng


def _report_loss(opts: SourceOptions, what: str) -> None:
    """Spark's reportDataLoss: fail with `failOnDataLoss`, else carry on (the range is skipped)."""
    if opts.fail_on_data_loss:
        raise KafkaPySparkError(data_loss_message(what))


def _ranges(opts: SourceOptions, start: Offsets, end: Offsets) -> list[RangePartition]:
    ranges = [OffsetRange(t, p, start[(t, p)], until) for (t, p), until in sorted(end.items())]
    split = split_ranges(
        ranges, min_partitions=opts.min_partitions, max_records=opts.max_records_per_partition
    )
    return [RangePartition(r) for r in split]


class KafkaBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.view = ClusterView(opts)

    def partitions(self) -> Sequence[InputPartition]:
        try:
            return self._plan()
        finally:
            self.view.close()

    def _plan(self) -> list[RangePartition]:
        tps = self.view.partitions(require_topics=True)
        start = self.view.resolve(self.opts.starting, tps, starting=True)
        end = self.view.resolve(self.opts.ending, tps, starting=False)
        for tp, s in start.items():
            if end[tp] < s:
                raise KafkaPySparkError(
                    f"The ending offset {end[tp]} of {tp[0]}-{tp[1]} is before its starting "
                    f"offset {s}"
                )
        return _ranges(self.opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # with no range to read, Spark still runs one task with a partition of its own
        if isinstance(partition, RangePartition):
            yield from read_range(self.opts, partition.rng)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads: admission control (maxOffsetsPerTrigger, minOffsetsPerTrigger with
    maxTriggerDelay), availableNow, partitions and topics appearing between micro-batches."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.view = ClusterView(opts)
        self._available_now: Offsets | None = None
        self._last_batch_ms = time.monotonic() * 1000
        self._latest: Offsets = {}

    def initialOffset(self) -> dict:
        tps = self.view.partitions(require_topics=False)
        return offsets_to_json(self.view.resolve(self.opts.starting, tps, starting=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self.view.latest(self.view.partitions(require_topics=False))

    def _starts(self, start: Offsets, tps: Sequence[TP]) -> Offsets:
        """Start offsets over `tps`: new partitions start at their earliest offset."""
        new = [tp for tp in tps if tp not in start]
        out = {tp: start[tp] for tp in tps if tp in start}
        out.update(self.view.earliest(new, gone_ok=True))
        return out

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        if self._available_now is not None:
            latest = dict(self._available_now)
        else:
            latest = self.view.latest(self.view.partitions(require_topics=False), gone_ok=True)
        self._latest = latest
        # a partition gone (topic deleted) drops out of the end offsets: partitions() reports it
        if isinstance(limit, ReadAllAvailable):
            return offsets_to_json(latest)
        starts = self._starts(begin, list(latest))
        # a new partition deleted between the two ListOffsets calls is gone too
        latest = {tp: o for tp, o in latest.items() if tp in starts}
        available = sum(max(0, latest[tp] - starts[tp]) for tp in latest)
        now_ms = time.monotonic() * 1000
        min_rows = self.opts.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        if (
            min_rows
            and available < min_rows
            and now_ms - self._last_batch_ms < self.opts.max_trigger_delay_ms
        ):
            return start
        end = (
            rate_limit(limit.max_rows, starts, latest) if isinstance(limit, ReadMaxRows) else latest
        )
        if end != begin:
            self._last_batch_ms = now_ms
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        current = set(self.view.partitions(require_topics=False))
        gone = sorted(
            {tp for tp in begin if tp not in until} | {tp for tp in until if tp not in current}
        )
        if gone:
            _report_loss(self.opts, f"{gone} are gone")
        new = [tp for tp in until if tp not in begin and tp in current]
        earliest = self.view.earliest(new, gone_ok=True)
        if vanished := sorted(set(new) - set(earliest)):  # deleted since `current` was read
            _report_loss(self.opts, f"{vanished} are gone")
        for tp, first in earliest.items():
            if first != 0:
                _report_loss(
                    self.opts, f"Added partition {tp[0]}-{tp[1]} starts from {first} instead of 0"
                )
        starts = {**begin, **earliest}
        plan: Offsets = {}
        for tp, u in until.items():
            if tp not in current or tp not in starts:
                continue
            s = starts[tp]
            if u < s:
                _report_loss(
                    self.opts,
                    f"Partition {tp[0]}-{tp[1]}'s offset was changed from {s} to {u}, some data "
                    "may have been missed",
                )
                continue
            plan[tp] = u
        return _ranges(self.opts, starts, plan)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # with no range to read, Spark still runs one task with a partition of its own
        if isinstance(partition, RangePartition):
            yield from read_range(self.opts, partition.rng)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint holds the offsets (no consumer group is used)."""

    def stop(self) -> None:
        self.view.close()


class KafkaPyDataSource(DataSource):
    """`spark.read.format("kafkapy")` / `df.write.format("kafkapy")` and their streaming forms."""

    @classmethod
    def name(cls) -> str:
        return "kafkapy"

    def schema(self) -> StructType:
        raw = {k.lower(): v for k, v in self.options.items()}.get("includeheaders", "false")
        return source_schema(str(raw).strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(parse_source(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(parse_source(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from services.spark.sink import KafkaBatchWriter

        return KafkaBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from services.spark.sink import KafkaStreamWriter

        return KafkaStreamWriter(self.options, schema)
