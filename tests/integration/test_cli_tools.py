"""kafka-py's Kafka-compatible tools against the session's local cluster, results checked with
real clients: topics describe (storage leaders, report options), console-producer's murmur2
partitioning and Kafka option names, console-consumer's groups, formatters and deserializers,
leader-election, delete-records and broker-api-versions.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from kafka_support import (
    TopicFactory,
    api_versions,
    cli_ok,
    consume_confluent,
    kafka_py,
    one_line,
    split_bootstrap,
    zk_partition_state,
)

from services.cli.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

PARTITION_LINE = re.compile(
    r"\tTopic: (\S+)\tPartition: (\d+)\tLeader: (\d+|none)\tReplicas: ([\d,]+)\tIsr: ([\d,]*)"
)


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes, int]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value, partition in records:
        producer.produce(topic, key=key, value=value, partition=partition)
    assert producer.flush(30) == 0


def _partition_lines(out: str) -> list[re.Match[str]]:
    lines = [line for line in out.splitlines() if line.startswith("\tTopic: ")]
    matches = [PARTITION_LINE.fullmatch(line) for line in lines]
    assert all(matches), out
    return [m for m in matches if m is not None]


# ---- topics describe ----------------------------------------------------------------------
def test_describe_shows_storage_leaders_and_kafka_reports(
    cluster: LocalCluster, bootstrap: str, topic: TopicFactory
) -> None:
    strict = topic(3, config={"min.insync.replicas": "3"})
    plain = topic(2, replication_factor=2)
    bs = ["--bootstrap-server", bootstrap]

    out = cli_ok("topics", *bs, "describe", "--topic", strict)
    head = out.splitlines()[0]
    assert head.startswith(f"Topic: {strict}\tTopicId: ")
    assert head.endswith(
        "\tPartitionCount: 3\tReplicationFactor: 3\tConfigs: min.insync.replicas=3"
    )
    lines = _partition_lines(out)
    assert [int(m.group(2)) for m in lines] == [0, 1, 2]
    for m in lines:
        state = zk_partition_state(cluster.zk_connect, strict, int(m.group(2)))
        replicas = [int(i) for i in m.group(4).split(",")]
        # the storage node the controller made leader: one of the replicas, in the ISR
        assert int(m.group(3)) == state["leader"] and state["leader"] in replicas
        assert [int(i) for i in m.group(5).split(",")] == state["isr"]
        assert sorted(replicas) == [0, 1, 2]
    # the same view with ZooKeeper named explicitly
    zk = ["--zookeeper", cluster.zk_connect]
    assert cli_ok("topics", *bs, "describe", "--topic", strict, *zk) == out

    # ISR 3 == min.insync.replicas 3: "at min ISR"; nothing is under-replicated or unavailable
    both = [strict, plain]
    at_min = [
        m.group(1, 2)
        for m in _partition_lines(cli_ok("topics", *bs, "describe", "--at-min-isr-partitions"))
    ]
    assert [p for p in at_min if p[0] in both] == [(strict, "0"), (strict, "1"), (strict, "2")]
    for report in (
        "--under-replicated-partitions",
        "--unavailable-partitions",
        "--under-min-isr-partitions",
    ):
        listed = cli_ok("topics", *bs, "describe", report)
        assert not any(name in listed for name in both), (report, listed)
    overrides = cli_ok("topics", *bs, "describe", "--topics-with-overrides")
    assert f"Topic: {strict}\t" in overrides and plain not in overrides
    assert "\tPartition: " not in overrides  # topic lines only

    clash = kafka_py(
        "topics", *bs, "describe", "--unavailable-partitions", "--topics-with-overrides"
    )
    assert clash.returncode == 2 and "not allowed with" in one_line(clash.stderr)
    nozk = kafka_py(
        "topics",
        *bs,
        "describe",
        "--topic",
        strict,
        "--zookeeper",
        "127.0.0.1:9",
        "--request-timeout-ms",
        "1500",
    )
    assert nozk.returncode == 1 and "cannot connect to ZooKeeper" in one_line(nozk.stderr)


# ---- console-producer ---------------------------------------------------------------------
def test_console_producer_puts_keys_where_kafkas_partitioner_does(
    bootstrap: str, topic: TopicFactory
) -> None:
    partitions = 7
    name = topic(partitions, replication_factor=1)
    keys = [f"user-{i}".encode() for i in range(60)] + [b"", "clé".encode(), b"21"]
    lines = b"".join(k + b"\t" + b"v-" + k + b"\n" for k in keys)
    cli_ok(
        "console-producer", "--bootstrap-server", bootstrap, "--topic", name,
        "--property", "parse.key=true", "--request-required-acks", "-1",
        "--compression-codec", "--producer-property", "enable.idempotence=true",
        stdin=lines,
    )  # fmt: skip
    read = consume_confluent(bootstrap, name, range(partitions), len(keys))
    where = {r.rec.key: p for p, recs in read.items() for r in recs}
    assert sorted(where) == sorted(keys)
    for key in keys:
        # Kafka's DefaultPartitioner: toPositive(murmur2(key)) % partitions; kafka-python's
        # murmur2 is an independent implementation of Kafka's hash
        assert where[key] == (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions, key
    # Kafka's UtilsTest: murmur2("21") == -973932308
    assert where[b"21"] == (-973932308 & 0x7FFFFFFF) % partitions


def test_console_producer_sync_and_producer_config(
    bootstrap: str, topic: TopicFactory, tmp_path: Path
) -> None:
    name = topic(1)
    config = tmp_path / "producer.properties"
    config.write_text(
        "acks=all\nlinger.ms=1000\nkey.serializer=org.apache.kafka.common.serialization.ByteArraySerializer\n"
    )
    cli_ok(
        "console-producer", "--bootstrap-server", bootstrap, "--topic", name,
        "--producer.config", str(config), "--sync", "--message-send-max-retries", "5",
        stdin=b"one\ntwo\nthree\n",
    )  # fmt: skip
    read = consume_confluent(bootstrap, name, [0], 3)
    assert [(r.offset, r.rec.value) for r in read[0]] == [(0, b"one"), (1, b"two"), (2, b"three")]
    bad = kafka_py(
        "console-producer", "--bootstrap-server", bootstrap, "--topic", name,
        "--producer-property", "no.such.property=1", stdin=b"x\n",
    )  # fmt: skip
    assert bad.returncode == 1 and "no.such.property" in one_line(bad.stderr)


# ---- console-consumer ---------------------------------------------------------------------
def _committed(bootstrap: str, group: str, name: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(name, p) for p in range(partitions)]
    )
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def test_console_consumer_group_commits_and_continues(bootstrap: str, topic: TopicFactory) -> None:
    name = topic(2)
    _produce(bootstrap, name, [(None, f"v{i}".encode(), i % 2) for i in range(10)])
    group = f"cli-group-{name}"
    args = [
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", name,
        "--group", group, "--from-beginning",
    ]  # fmt: skip
    show = ["--property", "print.partition=true", "--property", "print.offset=true"]
    first = cli_ok(*args, *show, "--timeout-ms", "15000", "--max-messages", "4").splitlines()
    assert len(first) == 4
    # what was printed is committed to the group (read back with another client)
    printed = {}
    for line in first:
        part, off, _ = line.split("\t")
        p, o = int(part.removeprefix("Partition:")), int(off.removeprefix("Offset:"))
        printed[p] = max(printed.get(p, -1), o)
    committed = _committed(bootstrap, group, name, 2)
    assert {p: committed[p] for p in printed} == {p: o + 1 for p, o in printed.items()}

    second = cli_ok(*args, *show, "--timeout-ms", "15000", "--max-messages", "6").splitlines()
    # the second run continued where the first stopped: every record once
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(
        f"Partition:{i % 2}\tOffset:{i // 2}\tv{i}" for i in range(10)
    )
    assert _committed(bootstrap, group, name, 2) == {0: 5, 1: 5}
    # the commits, read from __consumer_offsets with Kafka's offsets formatter
    commits = cli_ok(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", "__consumer_offsets",
        "--from-beginning", "--timeout-ms", "3000",
        "--formatter", "kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter",
    )  # fmt: skip
    any_commit = re.compile(r"\[.+\]::(NULL|OffsetAndMetadata\(offset=\d+, .*\))")
    ours = re.compile(
        rf"\[{re.escape(group)},{re.escape(name)},(\d+)\]::OffsetAndMetadata\(offset=(\d+), "
        r"leaderEpoch=Optional\[\d+\], metadata=, commitTimestamp=\d+, expireTimestamp=None\)"
    )
    last = {}
    for line in commits.splitlines():
        assert any_commit.fullmatch(line), line
        if m := ours.fullmatch(line):
            last[int(m.group(1))] = int(m.group(2))
    assert last == {0: 5, 1: 5}
    res = kafka_py(*args, "--timeout-ms", "2000")
    assert res.returncode == 0 and res.stdout == ""
    assert "Processed a total of 0 messages" in res.stderr


def test_console_consumer_reads_wordcount_output_with_long_deserializer(
    bootstrap: str, topic: TopicFactory
) -> None:
    name = topic(1)
    counts = [(b"all", 1), (b"streams", 2), (b"lead", 2**40), (b"kafka", -3)]
    _produce(bootstrap, name, [(w, struct.pack(">q", n), 0) for w, n in counts])
    # Kafka's quickstart (Streams WordCount) command line, unchanged
    out = cli_ok(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", name,
        "--from-beginning", "--max-messages", "4", "--timeout-ms", "20000",
        "--formatter", "kafka.tools.DefaultMessageFormatter",
        "--property", "print.key=true", "--property", "print.value=true",
        "--property", "key.deserializer=org.apache.kafka.common.serialization.StringDeserializer",
        "--property", "value.deserializer=org.apache.kafka.common.serialization.LongDeserializer",
    )  # fmt: skip
    assert out.splitlines() == [f"{w.decode()}\t{n}" for w, n in counts]
    # the same with the option names and a record that is not a long
    _produce(bootstrap, name, [(b"oops", b"abc", 0)])
    res = kafka_py(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", name,
        "--from-beginning", "--timeout-ms", "20000",
        "--value-deserializer", "org.apache.kafka.common.serialization.LongDeserializer",
    )  # fmt: skip
    assert res.returncode == 1
    assert res.stdout.splitlines() == [str(n) for _, n in counts]
    err = res.stderr.splitlines()
    assert err[0] == "Processed a total of 4 messages"
    assert "Size of data received by LongDeserializer is not 8" in err[1] and len(err) == 2


# ---- leader-election, delete-records, broker-api-versions --------------------------------
def test_leader_election_when_leaders_are_preferred(
    cluster: LocalCluster, bootstrap: str, topic: TopicFactory, tmp_path: Path
) -> None:
    name = topic(2)
    bs = ["--bootstrap-server", bootstrap]
    # the topic was just created: its leaders are the preferred replicas
    before = zk_partition_state(cluster.zk_connect, name, 1)
    out = cli_ok(
        "leader-election", *bs, "--election-type", "PREFERRED", "--topic", name, "--partition", "0"
    )
    assert out == f"Valid replica already elected for partitions {name}-0\n"
    doc = tmp_path / "election.json"
    doc.write_text(
        json.dumps(
            {"partitions": [{"topic": name, "partition": 0}, {"topic": name, "partition": 1}]}
        )
    )
    out = cli_ok(
        "leader-election", *bs, "--election-type", "unclean", "--path-to-json-file", str(doc)
    )
    assert out == f"Valid replica already elected for partitions {name}-0, {name}-1\n"
    assert zk_partition_state(cluster.zk_connect, name, 1)["leader_epoch"] == before["leader_epoch"]

    res = kafka_py(
        "leader-election",
        *bs,
        "--election-type",
        "PREFERRED",
        "--topic",
        "no-such-topic",
        "--partition",
        "0",
    )
    assert res.returncode == 1
    assert res.stdout == (
        "Error completing leader election (PREFERRED) for partition: no-such-topic-0: "
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
        + res.stdout.split("UnknownTopicOrPartitionException: ", 1)[1]
    )
    assert one_line(res.stderr) == "error: 1 replica(s) could not be elected"
    res = kafka_py("leader-election", *bs, "--election-type", "PREFERRED", "--topic", name)
    assert res.returncode == 2 and "--topic needs --partition" in one_line(res.stderr)


def test_delete_records_moves_the_log_start(
    bootstrap: str, topic: TopicFactory, tmp_path: Path
) -> None:
    name = topic(3)
    _produce(bootstrap, name, [(None, f"r{i}".encode(), i % 3) for i in range(30)])
    doc = tmp_path / "offsets.json"
    doc.write_text(json.dumps({
        "partitions": [
            {"topic": name, "partition": 0, "offset": 4},
            {"topic": name, "partition": 1, "offset": -1},
            {"topic": name, "partition": 2, "offset": 11},
            {"topic": "no-such-topic", "partition": 0, "offset": 1},
        ],
        "version": 1,
    }))  # fmt: skip
    res = kafka_py(
        "delete-records", "--bootstrap-server", bootstrap, "--offset-json-file", str(doc)
    )
    assert res.returncode == 1, res.stderr
    assert res.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: no-such-topic-0\terror: org.apache.kafka.common.errors."
        "UnknownTopicOrPartitionException: This server does not host this topic-partition.",
        f"partition: {name}-0\tlow_watermark: 4",
        f"partition: {name}-1\tlow_watermark: 10",
        f"partition: {name}-2\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: "
        + res.stdout.split("OffsetOutOfRangeException: ", 1)[1].splitlines()[0],
    ]
    assert one_line(res.stderr) == "error: records of 2 partition(s) could not be deleted"
    # a real consumer now starts at the new log start offsets
    read = consume_confluent(bootstrap, name, [0, 1, 2], 16)
    assert [r.offset for r in read[0]] == list(range(4, 10))
    assert read[1] == [] and [r.offset for r in read[2]] == list(range(10))

    doc.write_text('{"partitions": [{"topic": "t", "partition": 0}]}')
    res = kafka_py(
        "delete-records", "--bootstrap-server", bootstrap, "--offset-json-file", str(doc)
    )
    assert res.returncode == 1 and "has no 'offset' field" in one_line(res.stderr)


def test_broker_api_versions_matches_what_the_gateway_answers(
    cluster: LocalCluster, bootstrap: str
) -> None:
    out = cli_ok("broker-api-versions", "--bootstrap-server", bootstrap)
    host, port = split_bootstrap(bootstrap)
    # one block per broker Metadata names (the gateway first; storage ids served by it follow
    # for clients that can address them, decision D19)
    lines = out.splitlines()
    lines = lines[: lines.index(")") + 1]
    assert lines[0] == f"{host}:{port} (id: 0 rack: zone-a) -> ("
    listed: dict[int, tuple[int, int]] = {}
    for line in lines[1:-1]:
        m = re.fullmatch(
            r"\t(\w+)\((\d+)\): (?:(\d+)(?: to (\d+))? \[usable: (\d+)\]|UNSUPPORTED),?", line
        )
        assert m, line
        if m.group(3) is not None:
            low = int(m.group(3))
            high = int(m.group(4) or low)
            assert int(m.group(5)) == high  # the tool's codec knows every advertised version
            listed[int(m.group(2))] = (low, high)
    # the raw ApiVersions v0 probe (hand-encoded, independent of the product's codec)
    assert listed == api_versions(host, port)
    assert "\tProduce(0): 3 to 9 [usable: 9]," in lines
