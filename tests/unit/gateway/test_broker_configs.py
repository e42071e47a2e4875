"""DescribeConfigs / AlterConfigs on BROKER resources at the gateway: which ids are answered,
the layers of dynamic broker configs and their sources."""

from __future__ import annotations

from typing import Any

from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as cpb
from services.common.topic_config import ConfigSource
from services.common.zk import layout
from services.gateway.handlers import describe_configs, incremental_alter_configs

from .fakes import FakeController, add_brokers, add_topic, context, services

DYN_BROKER = ConfigSource.DYNAMIC_BROKER_CONFIG
DYN_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
STATIC = ConfigSource.STATIC_BROKER_CONFIG
DEFAULT = ConfigSource.DEFAULT_CONFIG


def _svc(controller: FakeController | None = None) -> Any:
    cache = MetadataCache()
    add_brokers(cache, 11)
    add_topic(cache, "t", {0: [11]}, config={"retention.ms": "1000"})
    svc = services(cache, controller=controller, max_connections=100)  # gateway node.id 1
    svc.broker_configs.apply("<default>", layout.topic_config_json({"log.retention.ms": "5"}))
    svc.broker_configs.apply("1", layout.topic_config_json({"max.connections": "7"}))
    return svc


async def _describe(svc: Any, *names: str) -> list[dict[str, Any]]:
    req = {
        "resources": [
            {"resource_type": 4 if n != "t" else 2, "resource_name": n, "configuration_keys": None}
            for n in names
        ],
        "include_synonyms": True,
    }
    resp = await describe_configs.handle(context(svc, ApiKey.DESCRIBE_CONFIGS, 4), req)
    return resp["results"]


def _by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in result["configs"]}


async def test_layers_sources_and_synonyms() -> None:
    own, storage, default, unknown, topic = await _describe(_svc(), "1", "11", "", "99", "t")
    mc = _by_name(own)["max.connections"]
    assert (mc["value"], mc["config_source"], mc["read_only"]) == ("7", DYN_BROKER, False)
    assert [(s["value"], s["source"]) for s in mc["synonyms"]] == [
        ("7", DYN_BROKER),
        ("100", STATIC),
        ("2147483647", DEFAULT),
    ]
    assert _by_name(own)["log.retention.ms"]["config_source"] == DYN_DEFAULT
    assert _by_name(own)["broker.id"]["read_only"] is True
    # a storage node's id: dynamic configs only, the gateway's own static flags do not apply
    s11 = _by_name(storage)
    assert "broker.id" not in s11
    assert (s11["max.connections"]["value"], s11["max.connections"]["config_source"]) == (
        "2147483647",
        DEFAULT,
    )
    assert (s11["log.retention.ms"]["value"], s11["log.retention.ms"]["config_source"]) == (
        "5",
        DYN_DEFAULT,
    )
    assert [(c["name"], c["value"], c["config_source"]) for c in default["configs"]] == [
        ("log.retention.ms", "5", DYN_DEFAULT)
    ]
    assert unknown["error_code"] == ErrorCode.INVALID_REQUEST
    rms = _by_name(topic)["retention.ms"]
    assert [(s["name"], s["value"], s["source"]) for s in rms["synonyms"]] == [
        ("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "5", DYN_DEFAULT),
        ("log.retention.ms", "604800000", DEFAULT),
    ]


async def test_alter_refuses_unknown_broker_ids_without_asking_the_controller() -> None:
    async def answer(method: str, request: Any) -> Any:
        return cpb.AlterConfigsResponse(
            resources=[
                cpb.ConfigResourceResult(resource_type=r.resource_type, name=r.name)
                for r in request.resources
            ]
        )

    fake = FakeController(answer)
    svc = _svc(fake)
    req = {
        "resources": [
            {
                "resource_type": 4,
                "resource_name": name,
                "configs": [{"name": "max.connections", "config_operation": 0, "value": "9"}],
            }
            for name in ("99", "11", "", "x")
        ],
        "validate_only": True,
    }
    resp = await incremental_alter_configs.handle(
        context(svc, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1), req
    )
    codes = {r["resource_name"]: r["error_code"] for r in resp["responses"]}
    assert codes == {
        "99": ErrorCode.INVALID_REQUEST,
        "11": 0,
        "": 0,
        "x": ErrorCode.INVALID_REQUEST,
    }
    ((_, request),) = fake.requests
    assert sorted(r.name for r in request.resources) == ["", "11"]


async def test_storage_static_configs_come_from_its_registration() -> None:
    svc = _svc()
    reg = layout.BrokerRegistration(
        12, "127.0.0.1", 7012, "z2", static_configs=(("log.segment.bytes", "1000"),)
    )
    svc.cache.apply_broker(12, reg.to_json())
    (result,) = await _describe(svc, "12")
    seg = _by_name(result)["log.segment.bytes"]
    assert (seg["value"], seg["config_source"]) == ("1000", STATIC)
    assert _by_name(result)["log.retention.ms"]["config_source"] == DYN_DEFAULT
