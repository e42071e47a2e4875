"""Console formatter and line reader: Kafka's DefaultMessageFormatter / LineMessageReader rules."""

from __future__ import annotations

import pytest

from services.cli.common import UsageError
from services.cli.formatter import (
    ConsumedRecord,
    LineFormatError,
    LineReader,
    MessageFormatter,
    ProducedRecord,
)

REC = ConsumedRecord(
    partition=0,
    offset=5,
    timestamp_type="CreateTime",
    timestamp=1700000000000,
    key=b"key",
    value=b"value",
    headers=[("k1", b"v1"), ("k2", b"v2")],
)


def test_value_only_by_default() -> None:
    assert MessageFormatter.from_properties({}).format(REC) == b"value\n"


def test_every_column_in_kafka_order() -> None:
    fmt = MessageFormatter.from_properties(
        {
            "print.timestamp": "true",
            "print.partition": "true",
            "print.offset": "true",
            "print.headers": "true",
            "print.key": "true",
        }
    )
    assert fmt.format(REC) == (
        b"CreateTime:1700000000000\tPartition:0\tOffset:5\tk1:v1,k2:v2\tkey\tvalue\n"
    )


def test_nulls_missing_headers_and_timestamps() -> None:
    rec = ConsumedRecord(3, 9, None, -1, None, None, [("h", None)])
    fmt = MessageFormatter.from_properties(
        {"print.key": "true", "print.timestamp": "true", "print.headers": "true"}
    )
    assert fmt.format(rec) == b"NO_TIMESTAMP\th:null\tnull\tnull\n"
    bare = ConsumedRecord(3, 9, "LogAppendTime", 42, b"k", b"v")
    assert fmt.format(bare) == b"LogAppendTime:42\tNO_HEADERS\tk\tv\n"


def test_custom_separators_and_value_off() -> None:
    fmt = MessageFormatter.from_properties(
        {
            "print.key": "true",
            "print.value": "false",
            "key.separator": " | ",
            "line.separator": "\\n--\\n",
            "null.literal": "<nil>",
        }
    )
    assert fmt.format(REC) == b"key\n--\n"
    both = MessageFormatter.from_properties({"print.key": "TRUE", "key.separator": "\\t|"})
    assert both.format(REC) == b"key\t|value\n"
    assert MessageFormatter.from_properties({"print.value": "false"}).format(REC) == b""


def test_unknown_formatter_property_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="print.keys"):
        MessageFormatter.from_properties({"print.keys": "true"})


def test_line_reader_plain_and_keyed() -> None:
    assert LineReader().parse(b"hello", 1) == ProducedRecord(None, b"hello", [])
    assert LineReader().parse(b"", 1) == ProducedRecord(None, b"", [])
    keyed = LineReader.from_properties({"parse.key": "true", "key.separator": ":"})
    assert keyed.parse(b"k1:v:with:colons", 1) == ProducedRecord(b"k1", b"v:with:colons", [])
    with pytest.raises(LineFormatError, match="no key separator found on line number 7"):
        keyed.parse(b"novalue", 7)
    lenient = LineReader.from_properties({"parse.key": "true", "ignore.error": "true"})
    assert lenient.parse(b"novalue", 1) == ProducedRecord(None, b"novalue", [])


def test_line_reader_headers_and_null_marker() -> None:
    reader = LineReader.from_properties(
        {"parse.headers": "true", "parse.key": "true", "null.marker": "<null>"}
    )
    rec = reader.parse(b"h1:a,h2:<null>\t<null>\tpayload", 1)
    assert rec == ProducedRecord(None, b"payload", [("h1", b"a"), ("h2", None)])
    with pytest.raises(LineFormatError, match="header"):
        reader.parse(b"broken\tk\tv", 2)
    with pytest.raises(UsageError):
        LineReader.from_properties({"parse.keys": "true"})
