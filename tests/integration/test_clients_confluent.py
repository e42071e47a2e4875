"""confluent-kafka (librdkafka) round trips: idempotent Producer, Consumer with assign().

Per codec 2,000 records over 3 partitions (10,000 in total): keys, null and empty keys and values,
headers with duplicate keys and null values, explicit CreateTime timestamps, binary and 100 KiB
values. The consumer uses assign() with a group.id the binding insists on; the test checks from
librdkafka's own protocol log that no group-membership or offset API was needed.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_END, Consumer, KafkaError, Producer, TopicPartition
from kafka_support import (
    ApiUsage,
    ReadRecord,
    TopicFactory,
    assert_delivery_offsets,
    assert_partition_logs,
    consume_confluent,
    make_records,
    produce_confluent,
)

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 2_000
# Requests that belong to the consumer-group protocol or to committed offsets.
GROUP_MEMBERSHIP_APIS = {"JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup"}
OFFSET_APIS = {"OffsetFetch", "OffsetCommit"}


class _SentRequests(logging.Handler):
    """Collects the request names librdkafka logs as 'Sent <Name>Request (vN, ...)'."""

    pattern = re.compile(r"Sent (\w+)Request \(v(\d+)")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.sent: dict[str, set[int]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        for name, version in self.pattern.findall(record.getMessage()):
            self.sent.setdefault(name, set()).add(int(version))


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_round_trip(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage, codec: str
) -> None:
    name = topic()
    records = make_records(f"cf-{codec}", PER_CODEC)
    with api_usage.record("confluent-kafka"):
        delivered = produce_confluent(
            bootstrap,
            name,
            records,
            config={"compression.type": codec, "enable.idempotence": True},
        )
    assert_delivery_offsets(records, delivered)

    sent = _SentRequests()
    log = logging.getLogger(f"rdkafka.consumer.{codec}")
    log.setLevel(logging.DEBUG)
    log.addHandler(sent)
    log.propagate = False
    with api_usage.record("confluent-kafka"):
        got = consume_confluent(
            bootstrap,
            name,
            [0, 1, 2],
            len(records),
            extra_config={"debug": "protocol", "logger": log},
        )
    assert_partition_logs(records, got)

    assert "Fetch" in sent.sent, f"librdkafka protocol log not captured: {sent.sent}"
    used_group_apis = (GROUP_MEMBERSHIP_APIS | OFFSET_APIS) & set(sent.sent)
    assert not used_group_apis, (
        f"assign() + enable.auto.commit=false still sent group/offset APIs: {used_group_apis}"
    )


def test_confluent_idempotent_producer_fields(bootstrap: str, topic: TopicFactory) -> None:
    """enable.idempotence=true: librdkafka must obtain a producer id (InitProducerId) and the
    broker must accept its sequenced batches; a fatal error would surface as an exception."""
    name = topic()
    errors: list[str] = []
    collect: list[str] = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "error_cb": lambda e: errors.append(str(e)),
            "debug": "eos",
            "logger": _quiet_logger("rdkafka.eos", collect),
        }
    )
    for i in range(300):
        p.produce(name, value=f"v{i}".encode(), partition=i % 3)
    assert p.flush(30) == 0
    p.poll(0.2)
    assert not errors, errors
    text = "\n".join(collect)
    m = re.search(r"Acquired PID\{Id:(\d+),Epoch:(\d+)\}", text)
    assert m, "librdkafka never acquired a producer id (InitProducerId)"
    assert int(m.group(1)) >= 0 and int(m.group(2)) >= 0
    assert "Assigned" in text, "idempotent producer never reached state Assigned"
    got = consume_confluent(bootstrap, name, [0, 1, 2], 300)
    assert sum(len(v) for v in got.values()) == 300


def _quiet_logger(name: str, sink: list[str]) -> logging.Logger:
    class _H(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            sink.append(record.getMessage())

    log = logging.getLogger(name)
    log.setLevel(logging.DEBUG)
    log.addHandler(_H())
    log.propagate = False
    return log


def test_confluent_offsets_for_times_and_watermarks(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage
) -> None:
    """ListOffsets: earliest/latest watermarks, and by timestamp the first offset whose
    timestamp is >= the target (-1 past the last record)."""
    name = topic()
    records = make_records("cf-ts", 600, big_values=False)
    with api_usage.record("confluent-kafka"):
        produce_confluent(bootstrap, name, records)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ts-probe"})
        try:
            per_part = {p: [r for r in records if r.partition == p] for p in range(3)}
            for p, recs in per_part.items():
                tp = TopicPartition(name, p)
                assert c.get_watermark_offsets(tp, timeout=10) == (0, len(recs))
                queries = {
                    0: recs[0].timestamp - 10_000,  # before everything: the first offset
                    57: recs[57].timestamp,  # exact match
                    58: recs[58].timestamp - 1,  # between two records: the later one
                    len(recs) - 1: recs[-1].timestamp,
                }
                for want, ts in queries.items():
                    (res,) = c.offsets_for_times([TopicPartition(name, p, ts)], timeout=10)
                    assert res.error is None and res.offset == want, (p, ts, res, want)
                (past,) = c.offsets_for_times(
                    [TopicPartition(name, p, recs[-1].timestamp + 1)], timeout=10
                )
                assert past.offset == OFFSET_END, (p, past)
        finally:
            c.close()


def test_confluent_log_append_time(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage
) -> None:
    """message.timestamp.type=LogAppendTime: the broker stamps every record with its append time
    and the consumer sees timestamp type LogAppendTime, whatever CreateTime was sent."""
    name = topic(config={"message.timestamp.type": "LogAppendTime"})
    records = make_records("cf-lat", 300, big_values=False, base_ts=1_000_000_000_000)
    start = int(time.time() * 1000)
    with api_usage.record("confluent-kafka"):
        produce_confluent(bootstrap, name, records)
        end = int(time.time() * 1000)
        got = consume_confluent(bootstrap, name, [0, 1, 2], len(records))
    for p, rs in got.items():
        assert rs, f"partition {p} empty"
        for r in rs:
            assert r.timestamp_type == 1, f"p{p}@{r.offset}: timestamp type {r.timestamp_type}"
            assert start - 1000 <= r.rec.timestamp <= end + 1000, (p, r.offset, r.rec.timestamp)
    # everything but the timestamps is what was produced
    assert_partition_logs(
        records,
        {p: [ReadRecord(r.offset, 0, r.rec) for r in rs] for p, rs in got.items()},
        check_timestamps=False,
    )


def test_confluent_acks_0_1_all_interleaved_on_one_partition(
    bootstrap: str, topic: TopicFactory
) -> None:
    """Three producers (acks=0, acks=1, idempotent acks=all) send small batches to one RF 3
    partition at once, so a storage node gets appends of every acks mixed on its Exchange
    stream: each producer's records come back in its order, at the offsets its delivery reports
    gave. On an RF 1 topic with min.insync.replicas=2, acks=all is refused with
    NOT_ENOUGH_REPLICAS (nothing written), while acks=1 there is written."""
    name = topic(1, config={"min.insync.replicas": "2"})
    configs = {
        "a0": {"acks": 0},
        "a1": {"acks": 1},
        "aall": {"acks": "all", "enable.idempotence": True},
    }
    delivered: dict[str, list[int]] = {k: [] for k in configs}
    errors: list[str] = []

    def report(who: str) -> Any:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"{who}: {err}")
            else:
                delivered[who].append(msg.offset())

        return on_delivery

    producers = {
        k: Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **c})
        for k, c in configs.items()
    }
    count = 300
    for i in range(count):
        for k, p in producers.items():
            p.produce(name, value=f"{k}-{i}".encode(), partition=0, on_delivery=report(k))
        if i % 20 == 0:
            for p in producers.values():
                p.poll(0)
    for p in producers.values():
        assert p.flush(30) == 0
    assert not errors, errors
    got = consume_confluent(bootstrap, name, [0], 3 * count)[0]
    values = [(r.rec.value or b"").decode() for r in got]
    offsets = {v: r.offset for v, r in zip(values, got, strict=True)}
    for k in configs:
        mine = [v for v in values if v.startswith(f"{k}-")]
        assert mine == [f"{k}-{i}" for i in range(count)], k  # all there, in order
        if k != "a0":  # acks=0 has no offsets to report
            assert delivered[k] == [offsets[f"{k}-{i}"] for i in range(count)], k
    assert [r.offset for r in got] == list(range(3 * count))

    thin = topic(1, config={"min.insync.replicas": "2"}, replication_factor=1)
    failed: list[Any] = []
    strict = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 1500})
    strict.produce(thin, value=b"refused", partition=0, on_delivery=lambda e, m: failed.append(e))
    strict.flush(30)
    assert failed and failed[0] is not None
    assert failed[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT)
    loose = Producer({"bootstrap.servers": bootstrap, "acks": 1})
    ok: list[Any] = []
    loose.produce(thin, value=b"written", partition=0, on_delivery=lambda e, m: ok.append((e, m)))
    assert loose.flush(30) == 0
    assert ok[0][0] is None and ok[0][1].offset() == 0  # the refused record took no offset
    assert [r.rec.value for r in consume_confluent(bootstrap, thin, [0], 1)[0]] == [b"written"]
