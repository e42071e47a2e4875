"""What librdkafka's broker-conformance tests (and the issue-12 review) found, with real clients:
per-record errors (KIP-467), deprecated message.format.version (transactional producers:
test_transactions.py)."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from kafka import KafkaAdminClient, KafkaProducer
from kafka import errors as kp_errors
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka_support import TopicFactory, consume_confluent, now_ms, read_frame, split_bootstrap

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey, decode_response, encode_request
from services.common.records.record import Record, build_batch

pytestmark = pytest.mark.integration

KEYLESS = range(0, 100, 10)  # librdkafka's test 0011: every tenth record has no key


def _produce_100(bootstrap: str, topic: str, extra: dict[str, object]) -> dict[int, KafkaError]:
    """Records 0..99 to partition 0, every tenth without a key; the delivery error per index
    (the successful ones are left out)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, **extra})
    failed: dict[int, KafkaError] = {}
    delivered: list[int] = []

    def report(i: int):  # noqa: ANN202 - closure factory
        def cb(err: KafkaError | None, _msg: object) -> None:
            if err is None:
                delivered.append(i)
            else:
                failed[i] = err

        return cb

    for i in range(100):
        key = None if i in KEYLESS else f"k{i}".encode()
        producer.produce(topic, value=f"v{i}".encode(), key=key, partition=0, on_delivery=report(i))
    assert producer.flush(30) == 0
    assert len(delivered) + len(failed) == 100
    return failed


def test_keyless_records_are_refused_by_index_and_the_others_can_be_resent(
    bootstrap: str, topic: TopicFactory
) -> None:
    """One batch of 100 to a compacted topic, 10 without a key: Kafka answers INVALID_RECORD
    with the 10 indexes in record_errors. librdkafka then fails exactly those 10 with
    INVALID_RECORD and their own message, and the 90 others with _INVALID_DIFFERENT_RECORD
    (nothing of the batch is appended); sent again, the 90 are appended."""
    name = topic(1, config={"cleanup.policy": "compact"})
    failed = _produce_100(bootstrap, name, {})
    assert sorted(i for i, e in failed.items() if e.code() == KafkaError.INVALID_RECORD) == list(
        KEYLESS
    )
    assert sorted(
        i for i, e in failed.items() if e.code() == KafkaError._INVALID_DIFFERENT_RECORD
    ) == [i for i in range(100) if i not in KEYLESS]
    # (the binding shows the code's text, not the per-record message: kafka-python's test does)
    # the application re-sends the innocent ones
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in sorted(i for i in failed if i not in KEYLESS):
        producer.produce(name, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    read = consume_confluent(bootstrap, name, [0], 90)[0]
    assert [r.rec.key for r in read] == [f"k{i}".encode() for i in range(100) if i % 10]
    assert [r.offset for r in read] == list(range(90))


def test_produce_response_carries_record_errors_and_error_message(
    bootstrap: str, topic: TopicFactory
) -> None:
    """The wire answer itself (Produce v9, as Kafka 2.5+ answers it): INVALID_RECORD, the 10
    indexes with their messages in record_errors, Kafka's summary in error_message."""
    name = topic(1, config={"cleanup.policy": "compact"})
    records = [
        Record(timestamp=now_ms(), key=None if i in KEYLESS else b"k%d" % i, value=b"v")
        for i in range(100)
    ]
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 10000,
        "topic_data": [
            {"name": name, "partition_data": [{"index": 0, "records": build_batch(records)}]}
        ],
    }
    with socket.create_connection(split_bootstrap(bootstrap), timeout=10) as sock:
        sock.sendall(encode_request(int(ApiKey.PRODUCE), 9, 5, "raw", body))
        frame = read_frame(sock)
    assert frame is not None
    corr, resp = decode_response(int(ApiKey.PRODUCE), 9, frame)
    (part,) = resp["responses"][0]["partition_responses"]
    assert (corr, part["error_code"], part["base_offset"]) == (5, ErrorCode.INVALID_RECORD, -1)
    why = f"Compacted topic cannot accept message without key in topic partition {name}-0"
    assert part["record_errors"] == [
        {"batch_index": i, "batch_index_error_message": why} for i in KEYLESS
    ]
    assert part["error_message"].startswith(
        "One or more records have been rejected due to 10 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=0, message='{why}'), "
    )


def test_one_record_per_batch_only_the_keyless_ones_fail(
    bootstrap: str, topic: TopicFactory
) -> None:
    """librdkafka's second variation (batch.size=1): each record is its own batch, so the 90
    keyed ones are appended and the 10 keyless ones fail."""
    name = topic(1, config={"cleanup.policy": "compact"})
    failed = _produce_100(bootstrap, name, {"batch.size": 1})
    assert sorted(failed) == list(KEYLESS)
    assert {e.code() for e in failed.values()} == {KafkaError.INVALID_RECORD}
    assert len(consume_confluent(bootstrap, name, [0], 90)[0]) == 90


def test_kafka_python_fails_exactly_the_records_named(bootstrap: str, topic: TopicFactory) -> None:
    """kafka-python maps record_errors as the Java client does: the named records get the
    broker's per-record message, the others a generic KafkaError."""
    name = topic(1, config={"cleanup.policy": "compact"})
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=200, retries=0)
    try:
        futures = [
            producer.send(name, value=b"v", key=None if i in KEYLESS else b"k%d" % i, partition=0)
            for i in range(100)
        ]
        producer.flush(30)
    finally:
        producer.close(10)
    errors = {i: f.exception for i, f in enumerate(futures)}
    assert all(e is not None for e in errors.values())  # the whole batch was refused
    named = sorted(i for i, e in errors.items() if isinstance(e, kp_errors.InvalidRecordError))
    assert named == list(KEYLESS)
    assert "Compacted topic cannot accept message without key" in str(errors[0])
    assert "part of a batch which had one more more invalid records" in str(errors[1])


def test_out_of_range_timestamps_are_refused_by_index(bootstrap: str, topic: TopicFactory) -> None:
    """message.timestamp.difference.max.ms is checked per record (not only on the batch's
    first and largest timestamp): the records out of range are named, INVALID_TIMESTAMP."""
    name = topic(1, config={"message.timestamp.difference.max.ms": "3600000"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100})
    now = now_ms()
    stamps = [now, now - 2 * 3_600_000, now, now + 2 * 3_600_000, now]  # 1 and 3 are off
    failed: dict[int, KafkaError] = {}
    for i, ts in enumerate(stamps):
        producer.produce(
            name,
            value=b"v",
            partition=0,
            timestamp=ts,
            on_delivery=lambda err, _m, i=i: failed.__setitem__(i, err) if err else None,
        )
    assert producer.flush(30) == 0
    assert sorted(i for i, e in failed.items() if e.code() == KafkaError.INVALID_RECORD) == [1, 3]
    assert sorted(
        i for i, e in failed.items() if e.code() == KafkaError._INVALID_DIFFERENT_RECORD
    ) == [0, 2, 4]


# ---- broker ids ----------------------------------------------------------------------------


def test_every_broker_id_metadata_names_can_be_addressed(
    bootstrap: str, admin: AdminClient, topic: TopicFactory
) -> None:
    """Replica and ISR lists name storage node ids; each is a broker of the Metadata answer,
    and a request sent to it (DescribeConfigs for that broker goes to that broker) answers."""
    name = topic(3)
    md = admin.list_topics(name, timeout=10)
    named = {
        r for p in md.topics[name].partitions.values() for r in (p.leader, *p.replicas, *p.isrs)
    }
    assert named <= set(md.brokers), f"ids {named - set(md.brokers)} are no brokers"
    assert len(named) > 1  # RF 3 over 3 storage nodes, one gateway: not only the gateway's id
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        for broker_id in sorted(md.brokers):
            res = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
            configs = admin.describe_configs([res], request_timeout=15)[res].result(20)
            assert configs["log.retention.ms"].value == "604800000", broker_id
            # kafka-python also sends a BROKER resource to that very broker
            got = kadmin.describe_configs(
                [KpConfigResource(KpConfigResourceType.BROKER, str(broker_id))],
                config_filter="all",
            )
            assert got["broker"][str(broker_id)]["log.retention.ms"]["value"] == "604800000"
    finally:
        kadmin.close()


# ---- message.format.version ---------------------------------------------------------------


def test_message_format_version_is_accepted_and_described(
    bootstrap: str, admin: AdminClient, topic: TopicFactory
) -> None:
    """Kafka 3.x accepts the deprecated topic config (and ignores it: batches are magic 2)."""
    name = topic(1, config={"message.format.version": "2.8"})
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    entry = admin.describe_configs([res])[res].result(30)["message.format.version"]
    assert (entry.value, entry.source) == ("2.8", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    change = ConfigEntry(
        "message.format.version", "0.10.0-IV1", incremental_operation=AlterConfigOpType.SET
    )
    admin.incremental_alter_configs(
        [ConfigResource(res.restype, name, incremental_configs=[change])]
    )[res].result(30)
    entry = admin.describe_configs([res])[res].result(30)["message.format.version"]
    assert entry.value == "0.10.0-IV1"
    bad = ConfigEntry(
        "message.format.version", "latest", incremental_operation=AlterConfigOpType.SET
    )
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs(
            [ConfigResource(res.restype, name, incremental_configs=[bad])]
        )[res].result(30)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    # produce and read back: the setting changes nothing on the wire
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(name, value=b"x", partition=0)
    assert producer.flush(30) == 0
    assert len(consume_confluent(bootstrap, name, [0], 1)[0]) == 1
