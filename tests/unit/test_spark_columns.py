"""The `kafkapy` source's and sink's column-wise conversions, between confluent-kafka messages
and Arrow batches (no broker, no JVM): what each row becomes, field for field."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, Message

from services.spark.options import parse_sink, parse_source
from services.spark.reader import OffsetRange, _Columns, _take, arrow_schema
from services.spark.sink import _Delivery, _produce

BS = {"kafka.bootstrap.servers": "127.0.0.1:1"}
HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def _msg(offset: int, **kw: Any) -> Message:
    return Message(topic="t", partition=3, offset=offset, **kw)


@pytest.fixture
def consumer() -> Any:
    c = Consumer({**{"bootstrap.servers": BS["kafka.bootstrap.servers"]}, "group.id": "g",
                  "log_level": 0})  # fmt: skip
    yield c
    c.close()


def test_reader_columns_slices_gaps_until_and_partition_eof(consumer: Any) -> None:
    opts = parse_source({**BS, "subscribe": "t", "includeHeaders": "true"}, streaming=False)
    cols = _Columns(include_headers=True)
    msgs = [
        _msg(4, key=b"k", value=b"v", timestamp=(1, 1500), headers=[("h", b"1"), ("h", None)]),
        _msg(5, key=None, value=None, timestamp=(2, 7)),  # LogAppendTime, null key and value
        _msg(8, key=b"gap", value=b"compacted", timestamp=(1, 9)),  # offsets 6, 7 compacted
        _msg(10, error=KafkaError(KafkaError._PARTITION_EOF)),
    ]
    # the EOF of an unassigned partition: nothing more to read up to `until`
    assert _take(consumer, opts, OffsetRange("t", 3, 4, 20), msgs, cols, 4) == 20
    assert len(cols) == 3
    got = cols.batch(arrow_schema(True), "t", 3).to_pylist()
    utc = dt.UTC
    assert got == [
        {"key": b"k", "value": b"v", "topic": "t", "partition": 3, "offset": 4,
         "timestamp": dt.datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=utc), "timestampType": 0,
         "headers": [{"key": "h", "value": b"1"}, {"key": "h", "value": None}]},
        {"key": None, "value": None, "topic": "t", "partition": 3, "offset": 5,
         "timestamp": dt.datetime(1970, 1, 1, 0, 0, 0, 7000, tzinfo=utc), "timestampType": 1,
         "headers": None},
        {"key": b"gap", "value": b"compacted", "topic": "t", "partition": 3, "offset": 8,
         "timestamp": dt.datetime(1970, 1, 1, 0, 0, 0, 9000, tzinfo=utc), "timestampType": 0,
         "headers": None},
    ]  # fmt: skip
    assert len(cols) == 0
    # records at or past `until` are left out and end the range
    assert _take(consumer, opts, OffsetRange("t", 3, 4, 6), msgs, cols, 4) == 6
    assert cols.offsets == [4, 5]


class _Producer:
    """confluent-kafka's Producer.produce as called, the queue full once."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.full = 1

    def produce(self, topic: str, value: Any, key: Any, **kw: Any) -> None:
        if self.full:
            self.full -= 1
            raise BufferError
        self.calls.append((topic, value, key, kw.get("partition"), kw.get("timestamp"),
                           kw.get("headers")))  # fmt: skip

    def poll(self, _timeout: float) -> int:
        return 0


def test_sink_rows_become_produce_calls_with_the_producers_defaults() -> None:
    headers = pa.array([[{"key": "h", "value": b"1"}], [], None], pa.list_(HEADER))
    stamps = pa.array([1_500_999, None, 0], pa.timestamp("us", tz="UTC"))
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["a", None, "c"]), pa.array([b"k", None, b"m"]),
         pa.array([1, None, 0], pa.int32()), headers, stamps, pa.array(["x", "y", "z"])],
        names=["Value", "key", "partition", "headers", "timestamp", "topic"],
    )  # fmt: skip
    p = _Producer()
    opts = parse_sink({**BS})
    assert _produce(p, opts, batch, _Delivery()) == (3, "x")  # type: ignore[arg-type]
    assert p.calls == [
        ("x", "a", b"k", 1, 1500, [("h", b"1")]),
        ("y", None, None, -1, 0, None),  # -1: the partitioner, 0: now, no headers
        ("z", "c", b"m", 0, 0, None),
    ]
    # the topic option wins over the column; without timestamp/headers no such keywords
    p = _Producer()
    plain = batch.select(["Value", "key", "topic"])
    assert _produce(p, parse_sink({**BS, "topic": "o"}), plain, _Delivery()) == (3, "o")  # type: ignore[arg-type]
    assert [c[:5] for c in p.calls] == [("o", "a", b"k", -1, None), ("o", None, None, -1, None),
                                        ("o", "c", b"m", -1, None)]  # fmt: skip
