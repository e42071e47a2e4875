"""Admin handlers: forwarded to the controller, answered once the change is visible."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as cpb
from services.common.topic_config import TOPIC_CONFIGS, ConfigSource
from services.common.zk import layout
from services.gateway.handlers import (
    alter_configs,
    create_partitions,
    create_topics,
    delete_topics,
    describe_configs,
    incremental_alter_configs,
)

from .fakes import FakeController, add_brokers, add_topic, context, services, topic_result


def _cache() -> MetadataCache:
    cache = MetadataCache()
    add_brokers(cache, 11, 12)
    add_topic(cache, "old", {0: [11, 12]}, config={"retention.ms": "1000"})
    return cache


def _create_req(
    *topics: dict[str, Any], timeout: int = 5000, validate_only: bool = False
) -> dict[str, Any]:
    base = {"num_partitions": 2, "replication_factor": 2, "assignments": [], "configs": []}
    return {
        "topics": [{**base, **t} for t in topics],
        "timeout": timeout,
        "validate_only": validate_only,
    }


async def test_create_topics_waits_until_visible() -> None:
    cache = _cache()

    async def controller(method: str, request: Any) -> Any:
        assert method == "CreateTopics"
        results = []
        for t in request.topics:
            if t.name == "old":
                results.append(
                    topic_result(
                        t.name,
                        ErrorCode.TOPIC_ALREADY_EXISTS,
                        message="Topic 'old' already exists.",
                    )
                )
                continue
            # the controller writes ZooKeeper; the cache sees it a little later
            loop = asyncio.get_running_loop()
            loop.call_later(0.05, add_topic, cache, t.name, {0: [11, 12], 1: [12, 11]})
            results.append(
                cpb.TopicResult(
                    name=t.name,
                    num_partitions=2,
                    replication_factor=2,
                    topic_id=uuid.UUID(int=7).bytes,
                )
            )
        return cpb.CreateTopicsResponse(topics=results)

    fake = FakeController(controller)
    svc = services(cache, controller=fake)
    req = _create_req(
        {"name": "new", "configs": [{"name": "cleanup.policy", "value": "compact"}]},
        {"name": "old"},
        {"name": "bad/name"},
        {"name": "dup"},
        {"name": "dup"},
        {"name": "nullcfg", "configs": [{"name": "retention.ms", "value": None}]},
    )
    resp = await create_topics.handle(context(svc, ApiKey.CREATE_TOPICS, 7), req)
    res = {t["name"]: t for t in resp["topics"]}
    assert list(res) == ["new", "old", "bad/name", "dup", "nullcfg"]
    assert cache.topic("new") is not None  # visible before the answer
    new = res["new"]
    assert new["error_code"] == 0 and new["num_partitions"] == 2 and new["replication_factor"] == 2
    configs = {c["name"]: c for c in new["configs"]}
    assert set(configs) == set(TOPIC_CONFIGS)
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["cleanup.policy"]["config_source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert configs["retention.ms"] == {
        "name": "retention.ms",
        "value": "604800000",
        "read_only": False,
        "is_sensitive": False,
        "config_source": ConfigSource.DEFAULT_CONFIG,
    }
    assert res["old"]["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
    assert res["old"]["error_message"] == "Topic 'old' already exists."
    assert res["bad/name"]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert res["dup"]["error_code"] == ErrorCode.INVALID_REQUEST
    assert res["nullcfg"]["error_code"] == ErrorCode.INVALID_CONFIG
    ((method, request),) = fake.requests
    sent = {t.name: t for t in request.topics}
    assert set(sent) == {"new", "old"}
    assert dict(sent["new"].configs) == {"cleanup.policy": "compact"}
    assert (sent["new"].num_partitions, sent["new"].replication_factor) == (2, 2)


async def test_create_topics_timeout_when_never_visible() -> None:
    async def controller(method: str, request: Any) -> Any:
        return cpb.CreateTopicsResponse(
            topics=[topic_result(t.name, partitions=1) for t in request.topics]
        )

    svc = services(_cache(), controller=FakeController(controller))
    resp = await create_topics.handle(
        context(svc, ApiKey.CREATE_TOPICS, 4), _create_req({"name": "ghost"}, timeout=100)
    )
    assert resp["topics"][0]["error_code"] == ErrorCode.REQUEST_TIMED_OUT
    # validate_only: no wait at all
    resp = await create_topics.handle(
        context(svc, ApiKey.CREATE_TOPICS, 7), _create_req({"name": "ghost"}, validate_only=True)
    )
    assert resp["topics"][0]["error_code"] == 0 and resp["topics"][0]["num_partitions"] == 1


async def test_create_topics_controller_unreachable() -> None:
    async def silent(method: str, request: Any) -> Any:
        await asyncio.sleep(10)

    svc = services(_cache(), controller=FakeController(silent))
    resp = await create_topics.handle(
        context(svc, ApiKey.CREATE_TOPICS, 7), _create_req({"name": "x"}, timeout=100)
    )
    assert resp["topics"][0]["error_code"] == ErrorCode.REQUEST_TIMED_OUT


async def test_delete_topics_by_name_and_id() -> None:
    cache = _cache()
    add_topic(cache, "gone", {0: [11]}, topic_id=None)
    old_id = cache.topic("old").topic_id  # type: ignore[union-attr]

    async def controller(method: str, request: Any) -> Any:
        assert method == "DeleteTopics"
        for name in request.names:
            asyncio.get_running_loop().call_later(
                0.05, cache.apply_topic_names, [n for n in cache.topics if n != name]
            )
        return cpb.DeleteTopicsResponse(topics=[cpb.TopicResult(name=n) for n in request.names])

    svc = services(cache, controller=FakeController(controller))
    req = {
        "topics": [
            {"name": None, "topic_id": old_id.bytes},  # type: ignore[union-attr]
            {"name": "nope", "topic_id": None},
            {"name": None, "topic_id": uuid.uuid4().bytes},
        ],
        "timeout": 2000,
    }
    resp = await delete_topics.handle(context(svc, ApiKey.DELETE_TOPICS, 6), req)
    codes = [(r["name"], r["error_code"]) for r in resp["responses"]]
    assert codes == [
        ("old", 0),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (None, ErrorCode.UNKNOWN_TOPIC_ID),
    ]
    assert cache.topic("old") is None
    resp = await delete_topics.handle(
        context(svc, ApiKey.DELETE_TOPICS, 1), {"topic_names": ["gone"], "timeout": 2000}
    )
    assert resp["responses"] == [
        {"name": "gone", "topic_id": None, "error_code": 0, "error_message": None}
    ]


async def test_create_partitions() -> None:
    cache = _cache()

    async def controller(method: str, request: Any) -> Any:
        out = []
        for t in request.topics:
            if t.count <= 1:
                out.append(
                    cpb.TopicResult(
                        name=t.name,
                        error_code=ErrorCode.INVALID_PARTITIONS,
                        error_message="Topic already has 1 partitions.",
                    )
                )
                continue
            asyncio.get_running_loop().call_later(
                0.05, add_topic, cache, t.name, {p: [11, 12] for p in range(t.count)}
            )
            out.append(cpb.TopicResult(name=t.name))
        return cpb.CreatePartitionsResponse(topics=out)

    fake = FakeController(controller)
    svc = services(cache, controller=fake)
    req = {
        "topics": [
            {
                "name": "old",
                "count": 3,
                "assignments": [{"broker_ids": [12, 11]}, {"broker_ids": [11, 12]}],
            },
            {"name": "nope", "count": 3, "assignments": None},
        ],
        "timeout": 2000,
        "validate_only": False,
    }
    resp = await create_partitions.handle(context(svc, ApiKey.CREATE_PARTITIONS, 3), req)
    assert [(r["name"], r["error_code"]) for r in resp["results"]] == [
        ("old", 0),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert len(cache.topic("old").partitions) == 3  # type: ignore[union-attr]
    ((method, request),) = fake.requests
    spec = request.topics[0]
    assert [(a.partition, list(a.broker_ids)) for a in spec.assignments] == [
        (1, [12, 11]),
        (2, [11, 12]),
    ]
    req = {
        "topics": [{"name": "old", "count": 1, "assignments": None}],
        "timeout": 2000,
        "validate_only": False,
    }
    resp = await create_partitions.handle(context(svc, ApiKey.CREATE_PARTITIONS, 3), req)
    assert resp["results"][0]["error_code"] == ErrorCode.INVALID_PARTITIONS


async def test_alter_configs_forwarded_and_validated() -> None:
    cache = _cache()

    async def controller(method: str, request: Any) -> Any:
        assert method == "AlterConfigs"
        for r in request.resources:
            if r.resource_type == 2:
                cfg = {op.key: op.value for op in r.ops}
                asyncio.get_running_loop().call_later(
                    0.02, cache.apply_topic_config, r.name, layout.topic_config_json(cfg)
                )
        return cpb.AlterConfigsResponse(
            resources=[
                cpb.ConfigResourceResult(resource_type=r.resource_type, name=r.name)
                for r in request.resources
            ]
        )

    fake = FakeController(controller)
    svc = services(cache, controller=fake)
    req = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "old",
                "configs": [{"name": "cleanup.policy", "value": "compact"}],
            },
            {"resource_type": 2, "resource_name": "nope", "configs": []},
            {"resource_type": 4, "resource_name": "x", "configs": []},
            {"resource_type": 8, "resource_name": "1", "configs": []},
            {
                "resource_type": 2,
                "resource_name": "old2",
                "configs": [{"name": "a", "value": None}],
            },
        ],
        "validate_only": False,
    }
    add_topic(cache, "old2", {0: [11]}, topic_id=None)
    resp = await alter_configs.handle(context(svc, ApiKey.ALTER_CONFIGS, 2), req)
    codes = [(r["resource_name"], r["error_code"]) for r in resp["responses"]]
    assert codes == [
        ("old", 0),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("x", ErrorCode.INVALID_REQUEST),
        ("1", ErrorCode.INVALID_REQUEST),
        ("old2", ErrorCode.INVALID_REQUEST),
    ]
    ((method, request),) = fake.requests
    (change,) = request.resources
    assert change.incremental is False
    assert [(o.key, o.value, o.op) for o in change.ops] == [("cleanup.policy", "compact", 0)]


async def test_incremental_alter_configs_ops() -> None:
    async def controller(method: str, request: Any) -> Any:
        return cpb.AlterConfigsResponse(
            resources=[
                cpb.ConfigResourceResult(
                    resource_type=r.resource_type,
                    name=r.name,
                    error_code=ErrorCode.INVALID_CONFIG,
                    error_message="bad",
                )
                for r in request.resources
            ]
        )

    fake = FakeController(controller)
    svc = services(_cache(), controller=fake)
    req = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "old",
                "configs": [
                    {"name": "retention.ms", "config_operation": 1, "value": None},
                    {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
                ],
            },
            {
                "resource_type": 4,
                "resource_name": "",
                "configs": [{"name": "x", "config_operation": 9, "value": "1"}],
            },
        ],
        "validate_only": True,
    }
    resp = await incremental_alter_configs.handle(
        context(svc, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1), req
    )
    assert [(r["error_code"], r["error_message"]) for r in resp["responses"]] == [
        (ErrorCode.INVALID_CONFIG, "bad"),
        (ErrorCode.INVALID_REQUEST, "Invalid config operation 9 for x"),
    ]
    ((method, request),) = fake.requests
    assert request.validate_only is True
    (change,) = request.resources
    assert change.incremental is True
    assert [(o.key, o.value, o.op) for o in change.ops] == [
        ("retention.ms", "", 1),
        ("cleanup.policy", "compact", 2),
    ]


async def test_describe_configs_topic_and_broker() -> None:
    svc = services(_cache(), message_max_bytes=2000000)
    req = {
        "resources": [
            {"resource_type": 2, "resource_name": "old", "configuration_keys": None},
            {
                "resource_type": 2,
                "resource_name": "old",
                "configuration_keys": ["retention.ms", "max.message.bytes"],
            },
            {"resource_type": 2, "resource_name": "nope", "configuration_keys": None},
            {
                "resource_type": 4,
                "resource_name": "1",
                "configuration_keys": ["broker.rack", "log.retention.ms"],
            },
            {"resource_type": 4, "resource_name": "", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "2", "configuration_keys": None},
            # storage node 11: Metadata lists it as a broker served by a gateway
            {"resource_type": 4, "resource_name": "11", "configuration_keys": ["broker.rack"]},
        ],
        "include_synonyms": True,
        "include_documentation": True,
    }
    resp = await describe_configs.handle(context(svc, ApiKey.DESCRIBE_CONFIGS, 4), req)
    full, some, unknown, broker, default, other, storage = resp["results"]
    assert storage["error_code"] == 0 and storage["configs"][0]["name"] == "broker.rack"
    assert len(full["configs"]) == len(TOPIC_CONFIGS)
    by_name = {c["name"]: c for c in some["configs"]}
    assert set(by_name) == {"retention.ms", "max.message.bytes"}
    rms = by_name["retention.ms"]
    assert rms["value"] == "1000" and rms["config_source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert rms["synonyms"] == [
        {"name": "retention.ms", "value": "1000", "source": ConfigSource.DYNAMIC_TOPIC_CONFIG},
        {"name": "log.retention.ms", "value": "604800000", "source": ConfigSource.DEFAULT_CONFIG},
    ]
    assert rms["config_type"] == 5 and rms["documentation"]
    mmb = by_name["max.message.bytes"]
    assert mmb["value"] == "2000000" and mmb["config_source"] == ConfigSource.STATIC_BROKER_CONFIG
    assert unknown["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert {c["name"]: c["value"] for c in broker["configs"]} == {
        "broker.rack": "z1",
        "log.retention.ms": "604800000",
    }
    assert default["error_code"] == 0 and default["configs"] == []
    assert other["error_code"] == ErrorCode.INVALID_REQUEST
    # v1: no types; without include_* nothing extra
    req["include_synonyms"] = False
    resp = await describe_configs.handle(context(svc, ApiKey.DESCRIBE_CONFIGS, 1), req)
    c = resp["results"][1]["configs"][0]
    assert c["synonyms"] == [] and c["config_type"] == 0 and c["documentation"] is None


async def test_alter_configs_answers_after_the_cache_follows_zookeeper(zk_connect: str) -> None:
    """Read-your-writes: once AlterConfigs answers, this gateway's cache holds the new config."""
    from services.common.metadata_cache import ZkMetadataSync
    from services.common.zk.client import AsyncZk

    writer, reader = AsyncZk(zk_connect), AsyncZk(zk_connect)
    await writer.start()
    await reader.start()
    await writer.ensure_layout()
    await writer.create(layout.topic_path("t"), layout.topic_assignment_json({0: [1]}))
    await writer.create(
        layout.partition_state_path("t", 0),
        layout.PartitionStateZk(1, 0, [1], 1).to_json(),
        makepath=True,
    )
    cache = MetadataCache()
    sync = ZkMetadataSync(reader, cache)

    async def controller(method: str, request: Any) -> Any:
        (r,) = request.resources
        await writer.create(
            layout.topic_config_path("t"),
            layout.topic_config_json({op.key: op.value for op in r.ops}),
            makepath=True,
        )
        return cpb.AlterConfigsResponse(
            resources=[cpb.ConfigResourceResult(resource_type=r.resource_type, name=r.name)]
        )

    try:
        await sync.start(load_timeout_s=5)
        svc = services(cache, controller=FakeController(controller))
        svc.zk = reader
        req = {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "t",
                    "configs": [{"name": "retention.ms", "value": "5000"}],
                }
            ],
            "validate_only": False,
        }
        resp = await alter_configs.handle(context(svc, ApiKey.ALTER_CONFIGS, 1), req)
        assert resp["responses"][0]["error_code"] == 0
        assert dict(cache.topic("t").config) == {"retention.ms": "5000"}  # type: ignore[union-attr]
    finally:
        sync.stop()
        await reader.stop()
        await writer.stop()
