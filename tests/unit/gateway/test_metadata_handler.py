"""Metadata handler: topics, partition states, errors and auto-creation."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache, parse_topic_id
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as cpb
from services.common.zk import layout
from services.gateway.context import RequestContext
from services.gateway.handlers import metadata

from .fakes import (
    TOPIC_ID,
    FakeController,
    add_brokers,
    add_gateway,
    add_topic,
    context,
    services,
    topic_result,
)


def _cache() -> MetadataCache:
    cache = MetadataCache()
    cache.apply_cluster_id(layout.cluster_id_json("clu-1"))
    add_gateway(cache, 1, "z1")
    add_brokers(cache, 11, 12)  # 13 is not registered (offline)
    add_topic(cache, "a", {0: [11, 12], 1: [12, 13], 2: [13, 11]}, leaders={2: 13})
    add_topic(cache, "__consumer_offsets", {0: [11]}, topic_id=None)
    add_topic(cache, "b", {0: [11]}, leaders={0: -1}, topic_id=None)
    return cache


def _java(ctx: RequestContext) -> RequestContext:
    """A client that said who it is (ApiVersions v3) and keys brokers by id."""
    ctx.software.name, ctx.software.version = "apache-kafka-java", "3.9.0"
    return ctx


async def test_all_topics_with_states() -> None:
    svc = services(_cache())
    resp = await metadata.handle(_java(context(svc, ApiKey.METADATA, 12)), {"topics": None})
    assert resp["cluster_id"] == "clu-1"
    assert resp["controller_id"] == 1
    # the gateway, and the live storage nodes under their own ids at a gateway's address (none
    # is in their zones z11, z12: the only gateway); 13 is offline, so not a broker
    gw = {"host": "127.0.0.1", "port": 9001, "rack": "z1"}
    assert resp["brokers"] == [{"node_id": n, **gw} for n in (1, 11, 12)]
    topics = {t["name"]: t for t in resp["topics"]}
    assert list(topics) == ["__consumer_offsets", "a", "b"]
    assert topics["__consumer_offsets"]["is_internal"] is True
    a = topics["a"]
    assert a["error_code"] == 0 and a["is_internal"] is False
    assert a["topic_id"] == parse_topic_id(TOPIC_ID)
    p0, p1, p2 = a["partitions"]
    assert p0 == {
        "error_code": 0,
        "partition_index": 0,
        "leader_id": 1,
        "leader_epoch": 3,
        "replica_nodes": [11, 12],
        "isr_nodes": [11, 12],
        "offline_replicas": [],
    }
    assert p1["offline_replicas"] == [13] and p1["error_code"] == 0
    # storage leader 13 is not registered: no leader
    assert p2["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE and p2["leader_id"] == -1
    # leader -1 in ZooKeeper
    (b0,) = topics["b"]["partitions"]
    assert b0["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE and b0["leader_id"] == -1


async def test_requested_topics_errors_without_auto_create() -> None:
    controller = FakeController()
    svc = services(_cache(), controller=controller)
    req = {
        "topics": [{"name": "a"}, {"name": "nope"}, {"name": "bad name!"}, {"name": "a"}],
        "allow_auto_topic_creation": False,
    }
    resp = await metadata.handle(context(svc, ApiKey.METADATA, 12), req)
    codes = [(t["name"], t["error_code"]) for t in resp["topics"]]
    assert codes == [
        ("a", 0),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ]
    assert controller.requests == []
    # an empty list (v1+) means no topics
    resp = await metadata.handle(context(svc, ApiKey.METADATA, 12), {"topics": []})
    assert resp["topics"] == []


async def test_auto_create_setting_off() -> None:
    controller = FakeController()
    svc = services(_cache(), controller=controller, auto_create_topics_enable=False)
    req = {"topics": [{"name": "new"}], "allow_auto_topic_creation": True}
    resp = await metadata.handle(context(svc, ApiKey.METADATA, 12), req)
    assert resp["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert controller.requests == []


async def test_auto_create_through_controller() -> None:
    async def create(method: str, request: Any) -> Any:
        assert method == "CreateTopics"
        await asyncio.sleep(0.05)
        return cpb.CreateTopicsResponse(
            topics=[
                topic_result(t.name, ErrorCode.INVALID_REPLICATION_FACTOR if t.name == "big" else 0)
                for t in request.topics
            ]
        )

    controller = FakeController(create)
    svc = services(_cache(), controller=controller)
    req = {"topics": [{"name": "new1"}, {"name": "big"}], "allow_auto_topic_creation": True}
    # two requests at once share one controller call per topic
    r1, r2 = await asyncio.gather(
        metadata.handle(context(svc, ApiKey.METADATA, 12), req),
        metadata.handle(context(svc, ApiKey.METADATA, 12), {"topics": [{"name": "new1"}]}),
    )
    assert [(t["name"], t["error_code"]) for t in r1["topics"]] == [
        ("new1", ErrorCode.LEADER_NOT_AVAILABLE),
        ("big", ErrorCode.INVALID_REPLICATION_FACTOR),
    ]
    assert r2["topics"][0]["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE
    ((method, request),) = controller.requests
    specs = {t.name: (t.num_partitions, t.replication_factor) for t in request.topics}
    assert specs == {"new1": (-1, -1), "big": (-1, -1)}


async def test_auto_create_controller_silent_answers_leader_not_available() -> None:
    async def hang(method: str, request: Any) -> Any:
        await asyncio.sleep(10)

    svc = services(_cache(), controller=FakeController(hang), **{"auto_create_wait_ms": 50})
    resp = await metadata.handle(context(svc, ApiKey.METADATA, 4), {"topics": [{"name": "x"}]})
    assert resp["topics"][0]["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE
    for task in list(svc.creating.values()):
        task.cancel()


async def test_topic_by_id_and_self_listed_when_unregistered() -> None:
    cache = _cache()
    cache.apply_gateway(1, None)  # our own znode not visible yet
    svc = services(cache)
    tid = parse_topic_id(TOPIC_ID)
    assert tid is not None
    req = {
        "topics": [
            {"name": None, "topic_id": tid.bytes},
            {"name": None, "topic_id": uuid.uuid4().bytes},
        ]
    }
    resp = await metadata.handle(context(svc, ApiKey.METADATA, 12), req)
    assert [t["name"] for t in resp["topics"]] == ["a", None]
    assert resp["topics"][1]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
    assert [b["node_id"] for b in resp["brokers"]] == [1]  # a client that did not say who it is
    resp = await metadata.handle(_java(context(svc, ApiKey.METADATA, 12)), req)
    assert [b["node_id"] for b in resp["brokers"]] == [1, 11, 12]
    assert resp["brokers"][0]["port"] == 9092  # this gateway's advertised endpoint


async def test_authorized_operations_when_asked() -> None:
    svc = services(_cache())
    req = {"topics": [{"name": "a"}], "include_topic_authorized_operations": True}
    resp = await metadata.handle(context(svc, ApiKey.METADATA, 10), req)
    assert resp["topics"][0]["topic_authorized_operations"] == 3576  # READ..ALTER_CONFIGS
    resp = await metadata.handle(context(svc, ApiKey.METADATA, 10), {"topics": [{"name": "a"}]})
    assert "topic_authorized_operations" not in resp["topics"][0]  # codec default: not asked
    assert resp["cluster_authorized_operations"] == -2147483648
