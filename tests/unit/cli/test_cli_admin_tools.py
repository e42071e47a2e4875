"""Deserializers, murmur2 partitioning, the partition JSON files and the output of the small
admin tools (leader-election, delete-records, broker-api-versions), without a cluster."""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaError

from services.cli import broker_api_versions, leader_election
from services.cli.common import CliError, UsageError, java_error_text
from services.cli.deserializers import (
    DeserializationError,
    deserializer,
    java_double,
    java_float,
)
from services.cli.formatter import ConsumedRecord, make_formatter
from services.cli.main import build_parser
from services.cli.partition_json import delete_offsets, election_partitions, read_json

# Kafka's UtilsTest.testMurmur2: murmur2(bytes) as a signed 32-bit int.
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("partitions", [1, 3, 7, 100, 1000])
def test_console_producer_partitioner_is_kafkas_murmur2(partitions: int) -> None:
    """librdkafka's murmur2 (what the console producer's murmur2_random partitioner applies to
    keyed records) is toPositive(murmur2(key)) % partitions with Kafka's murmur2."""
    for key, h in KAFKA_MURMUR2.items():
        assert confluent_kafka.murmur2(key, partitions) == (h & 0x7FFFFFFF) % partitions


def test_kafka_deserializers() -> None:
    assert deserializer("long")(struct.pack(">q", -5)) == b"-5"
    assert (
        deserializer("org.apache.kafka.common.serialization.IntegerDeserializer")(
            struct.pack(">i", 2**31 - 1)
        )
        == b"2147483647"
    )
    assert deserializer("short")(b"\xff\xfe") == b"-2"
    assert deserializer("double")(struct.pack(">d", 1e10)) == b"1.0E10"
    assert deserializer("float")(struct.pack(">f", 0.1)) == b"0.1"
    u = uuid.uuid4()
    assert deserializer("uuid")(str(u).upper().encode()) == str(u).encode()
    assert deserializer("bytes")(b"a\\\x00~\x7f") == b"a\\x5C\\x00~\\x7F"
    assert deserializer("bytearray")(b"\x00\x01") == b"\x00\x01"
    assert deserializer("string")(b"caf\xc3\xa9") == "café".encode()
    assert deserializer("json")(b'{"a": [1, 2]}') == b'{"a":[1,2]}'
    assert deserializer("json-pretty")(b'{"a":1}') == b'{\n  "a": 1\n}'
    with pytest.raises(DeserializationError, match="LongDeserializer is not 8"):
        deserializer("long")(b"abc")
    with pytest.raises(UsageError, match="unknown deserializer"):
        deserializer("com.example.Avro")


@pytest.mark.parametrize(
    ("value", "text"),
    [(1.0, "1.0"), (1234567.0, "1234567.0"), (12345678.0, "1.2345678E7"), (0.001, "0.001"),
     (0.0001, "1.0E-4"), (-2.5e-7, "-2.5E-7"), (100.0, "100.0"), (float("nan"), "NaN"),
     (-0.0, "-0.0"), (float("-inf"), "-Infinity")],
)  # fmt: skip
def test_java_double_to_string(value: float, text: str) -> None:
    assert java_double(value) == text


def test_java_float_to_string() -> None:
    assert java_float(struct.unpack(">f", struct.pack(">f", 3.3))[0]) == "3.3"
    assert java_float(struct.unpack(">f", struct.pack(">f", 1e10))[0]) == "1.0E10"


def test_formatter_deserializes_key_value_and_headers_and_logs() -> None:
    logged: list[str] = []
    fmt = make_formatter(
        "org.apache.kafka.tools.consumer.LoggingMessageFormatter",
        {
            "print.key": "true",
            "print.headers": "true",
            "key.deserializer": "org.apache.kafka.common.serialization.StringDeserializer",
            "value.deserializer": "org.apache.kafka.common.serialization.LongDeserializer",
            "headers.deserializer": "integer",
        },
        logged.append,
    )
    rec = ConsumedRecord(0, 1, "CreateTime", 5, b"word", struct.pack(">q", 3), [("n", b"\0\0\0\1")])
    assert fmt.format(rec) == b"n:1\tword\t3\n"
    assert logged == ["CreateTime:5, key:word, value:\x00\x00\x00\x00\x00\x00\x00\x03"]
    tombstone = ConsumedRecord(0, 2, None, -1, None, None)
    assert fmt.format(tombstone) == b"NO_HEADERS\tnull\tnull\n"


def _write(tmp_path: Path, doc: Any) -> str:
    path = tmp_path / "in.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def test_partition_json_files(tmp_path: Path) -> None:
    doc = {"partitions": [{"topic": "a", "partition": 0, "offset": 5}], "version": 1}
    assert delete_offsets(read_json(_write(tmp_path, doc), "x")) == [(("a", 0), 5)]
    assert election_partitions({"partitions": [{"topic": "a", "partition": 1}]}) == [("a", 1)]
    with pytest.raises(CliError, match="duplicate partitions: a-1"):
        election_partitions({"partitions": [{"topic": "a", "partition": 1}] * 2})
    with pytest.raises(CliError, match="duplicate topic partitions: a-0"):
        delete_offsets({"partitions": [{"topic": "a", "partition": 0, "offset": 1}] * 2})
    with pytest.raises(CliError, match="Not supported version field value 2"):
        delete_offsets({"partitions": [], "version": 2})
    with pytest.raises(CliError, match='missing "partitions" field'):
        delete_offsets({"version": 1})
    with pytest.raises(CliError, match="'offset' must be an integer"):
        delete_offsets({"partitions": [{"topic": "a", "partition": 0, "offset": "x"}]})
    with pytest.raises(CliError, match="not a valid JSON"):
        read_json(_write(tmp_path, "{nope"), "x")
    with pytest.raises(CliError, match="cannot read"):
        read_json(str(tmp_path / "missing.json"), "x")


def _election_args(*argv: str) -> Any:
    return build_parser().parse_args(["leader-election", *argv])


def test_leader_election_option_rules(tmp_path: Path) -> None:
    pick = leader_election.requested_partitions
    assert pick(_election_args("--election-type", "preferred", "--all-topic-partitions")) is None
    args = _election_args("--election-type", "UNCLEAN", "--topic", "t", "--partition", "2")
    assert args.election_type == "UNCLEAN" and pick(args) == [("t", 2)]
    path = _write(tmp_path, {"partitions": [{"topic": "t", "partition": 0}]})
    assert pick(_election_args("--election-type", "PREFERRED", "--path-to-json-file", path)) == [
        ("t", 0)
    ]
    for argv, message in (
        (["--topic", "t"], "--topic needs --partition"),
        (["--topic", "t", "--partition", "0", "--all-topic-partitions"], "one and only one"),
        ([], "one and only one"),
    ):
        with pytest.raises(UsageError, match=message):
            pick(_election_args("--election-type", "PREFERRED", *argv))
    with pytest.raises(UsageError, match="expected PREFERRED or UNCLEAN"):
        _election_args("--election-type", "random", "--all-topic-partitions")


def test_java_error_text() -> None:
    assert java_error_text(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "gone")) == (
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: gone"
    )
    assert java_error_text(KafkaError(KafkaError.ELIGIBLE_LEADERS_NOT_AVAILABLE, "none")) == (
        "org.apache.kafka.common.errors.EligibleLeadersNotAvailableException: none"
    )


def test_broker_api_versions_format() -> None:
    node = broker_api_versions.node_text("h", 9092, 3, None)
    text = broker_api_versions.format_versions(node, {0: (3, 9), 18: (0, 3), 1000: (0, 0)})
    lines = text.splitlines()
    assert lines[0] == "h:9092 (id: 3 rack: null) -> ("
    assert lines[1] == "\tProduce(0): 3 to 9 [usable: 9],"
    assert "\tFetch(1): UNSUPPORTED," in lines
    assert "\tApiVersions(18): 0 to 3 [usable: 3]," in lines
    assert lines[-2] == "\tUNKNOWN(1000): 0" and lines[-1] == ")"
    assert not any(line.startswith("\tVote(") for line in lines)  # KRaft controllers only


def test_offsets_message_formatter_reads_kafkas_records() -> None:
    from services.common.internal_topics.consumer_offsets import (
        OffsetAndMetadata,
        group_metadata_key,
        offset_commit_key,
        offset_commit_value,
    )

    fmt = make_formatter(
        "kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter", {}, print
    )

    def rec(key: bytes | None, value: bytes | None) -> ConsumedRecord:
        return ConsumedRecord(0, 0, "CreateTime", 0, key, value)

    key = offset_commit_key("g", "t", 3)
    value = offset_commit_value(OffsetAndMetadata(42, 7, "meta", 1700000000000))
    assert fmt.format(rec(key, value)) == (
        b"[g,t,3]::OffsetAndMetadata(offset=42, leaderEpoch=Optional[7], metadata=meta, "
        b"commitTimestamp=1700000000000, expireTimestamp=None)\n"
    )
    assert fmt.format(rec(key, None)) == b"[g,t,3]::NULL\n"
    assert fmt.format(rec(group_metadata_key("g"), b"")) == b""  # not an offset commit
    with pytest.raises(DeserializationError):
        fmt.format(rec(b"\x00\x09junk", b""))
