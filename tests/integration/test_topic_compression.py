"""Topic and broker ``compression.type``: stored batches carry the configured codec and every
client reads the records back intact (Kafka's LogValidator recompression)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_support import (
    ApiUsage,
    Rec,
    TopicFactory,
    assert_delivery_offsets,
    assert_partition_logs,
    consume_confluent,
    make_text_records,
    now_ms,
    produce_confluent,
    running_cluster,
    wait_for_topic,
)
from test_clients_aiokafka import _consume as consume_aiokafka
from test_clients_kafka_python import _consume as consume_kafka_python
from test_clients_kcat import _consume_json as consume_kcat

from services.cli.local_cluster import LocalCluster
from services.common.records.batch import BatchHeader, iter_headers
from services.common.records.compression import Codec

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 400
CODEC_IDS = {"uncompressed": Codec.NONE, "gzip": Codec.GZIP, "zstd": Codec.ZSTD}
HEADERS = (("src", b"cfk"), ("dup", b"a"), ("dup", b"b"), ("empty", b""))


def text_records(tag: str) -> list[Rec]:
    """Text keys/values (kcat -J prints them as strings), null keys and values, headers and
    explicit CreateTime timestamps."""
    ts0 = now_ms() - 60_000
    out: list[Rec] = []
    for p in range(PARTITIONS):
        for r in make_text_records(tag, PER_PARTITION, p, first_index=p * PER_PARTITION):
            out.append(Rec(p, r.key, r.value, HEADERS, ts0 + len(out)))
    return out


def stored_headers(data_dirs: list[Path], topic: str) -> dict[Path, list[BatchHeader]]:
    """Batch headers of every replica's segments of ``topic``, read from the files."""
    out: dict[Path, list[BatchHeader]] = {}
    for d in data_dirs:
        for part in sorted(d.glob(f"{topic}-*")):
            out[part] = [
                h for seg in sorted(part.glob("*.log")) for h in iter_headers(seg.read_bytes())
            ]
    return out


def assert_stored_codec(data_dirs: list[Path], topic: str, codec: int, replicas: int) -> None:
    replicas_seen = stored_headers(data_dirs, topic)
    assert len(replicas_seen) == PARTITIONS * replicas, sorted(replicas_seen)
    for part, headers in replicas_seen.items():
        assert sum(h.record_count for h in headers) == PER_PARTITION, part
        assert {h.compression for h in headers} == {codec}, part
        for h in headers:  # one idempotent producer session: sequence == offset
            assert h.producer_id >= 0 and h.producer_epoch >= 0, (part, h)
            assert h.base_sequence == h.base_offset, (part, h)


def read_with_every_client(bootstrap: str, topic: str, records: list[Rec]) -> None:
    parts = list(range(PARTITIONS))
    assert_partition_logs(records, consume_confluent(bootstrap, topic, parts, len(records)))
    assert_partition_logs(records, consume_kafka_python(bootstrap, topic, parts, len(records)))
    assert_partition_logs(
        records, asyncio.run(consume_aiokafka(bootstrap, topic, parts, len(records)))
    )
    assert_partition_logs(records, consume_kcat(bootstrap, topic))


@pytest.mark.parametrize(
    ("topic_codec", "producer_codec"),
    [("gzip", "none"), ("zstd", "snappy"), ("uncompressed", "lz4")],
)
def test_topic_compression_type_rewrites_batches(
    bootstrap: str,
    cluster: LocalCluster,
    topic: TopicFactory,
    api_usage: ApiUsage,
    topic_codec: str,
    producer_codec: str,
) -> None:
    name = topic(PARTITIONS, config={"compression.type": topic_codec})
    records = text_records(f"tc{topic_codec}")
    with api_usage.record("confluent-kafka"):
        delivered = produce_confluent(
            bootstrap, name, records, config={"compression.codec": producer_codec}
        )
    assert_delivery_offsets(records, delivered)
    dirs = [cluster.storage_dir(i) for i in range(3)]
    assert_stored_codec(dirs, name, CODEC_IDS[topic_codec], replicas=3)
    read_with_every_client(bootstrap, name, records)


def test_producer_compression_type_keeps_the_producers_codec(
    bootstrap: str, cluster: LocalCluster, topic: TopicFactory
) -> None:
    name = topic(PARTITIONS, config={"compression.type": "producer"})
    records = text_records("tcproducer")
    produce_confluent(bootstrap, name, records, config={"compression.codec": "lz4"})
    assert_stored_codec([cluster.storage_dir(i) for i in range(3)], name, Codec.LZ4, replicas=3)


@pytest.fixture(scope="module")
def zstd_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One storage node whose broker-level compression.type is zstd."""
    with running_cluster(
        tmp_path_factory.mktemp("zstd-broker"),
        gateways=1,
        storage_nodes=1,
        controllers=1,
        group_coordinators=1,
        zones=("zone-a",),
        extra={"storage": ["--compression.type", "zstd"]},
    ) as c:
        yield c


def test_broker_compression_type_is_the_topic_default(zstd_broker: LocalCluster) -> None:
    bootstrap = zstd_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = "broker-default-zstd"
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=60)
    wait_for_topic(admin, name, PARTITIONS)
    records = text_records("bdzstd")
    assert_delivery_offsets(records, produce_confluent(bootstrap, name, records))
    assert_stored_codec([zstd_broker.storage_dir(0)], name, Codec.ZSTD, replicas=1)
    read_with_every_client(bootstrap, name, records)
