"""ApiVersions, DescribeCluster and settings."""

from __future__ import annotations

import pytest

from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey
from services.common.settings import ConfigError
from services.common.zk import layout
from services.gateway.handlers import HANDLERS, advertised_versions, api_versions, describe_cluster
from services.gateway.settings import GatewaySettings, parse_listener

from .fakes import add_gateway, context, services


def test_advertised_versions_are_the_handled_apis() -> None:
    versions = advertised_versions()
    assert set(versions) == set(HANDLERS)
    assert versions[ApiKey.FETCH] == (4, 12) and versions[ApiKey.PRODUCE][0] == 3


async def test_api_versions() -> None:
    svc = services()
    ctx = context(svc, ApiKey.API_VERSIONS, 3)
    resp = await api_versions.handle(
        ctx, {"client_software_name": "librdkafka", "client_software_version": "2.3.0"}
    )
    assert resp["error_code"] == 0
    assert {k["api_key"] for k in resp["api_keys"]} == set(ctx.versions)
    resp = await api_versions.handle(
        ctx, {"client_software_name": "bad name", "client_software_version": "1"}
    )
    assert resp["error_code"] == ErrorCode.INVALID_REQUEST
    assert api_versions.fallback_body({18: (0, 3)}) == {
        "error_code": 35,
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}],
    }


async def test_describe_cluster() -> None:
    cache = MetadataCache()
    cache.apply_cluster_id(layout.cluster_id_json("cid"))
    add_gateway(cache, 1, "z1")
    add_gateway(cache, 2, "z2")
    svc = services(cache)
    resp = await describe_cluster.handle(
        context(svc, ApiKey.DESCRIBE_CLUSTER, 1),
        {"include_cluster_authorized_operations": False, "endpoint_type": 1},
    )
    assert resp["cluster_id"] == "cid" and resp["controller_id"] == 1
    assert [(b["broker_id"], b["rack"]) for b in resp["brokers"]] == [(1, "z1"), (2, "z2")]
    resp = await describe_cluster.handle(
        context(svc, ApiKey.DESCRIBE_CLUSTER, 1), {"endpoint_type": 2}
    )
    assert resp["error_code"] == ErrorCode.MISMATCHED_ENDPOINT_TYPE


def test_settings_flags_and_listeners() -> None:
    st = GatewaySettings.load(
        [
            "--node.id",
            "3",
            "--listeners",
            "PLAINTEXT://0.0.0.0:9093",
            "--advertised.listeners",
            "gw-3.example:19093",
            "--auto.create.topics.enable",
            "false",
            "--kafkapy.producer.id.block.size",
            "50",
        ],
        env={},
    )
    assert st.node_id == 3 and st.listener.port == 9093 and st.listener.host == "0.0.0.0"
    assert st.advertised(9093).host == "gw-3.example" and st.advertised(9093).port == 19093
    assert st.auto_create_topics_enable is False and st.producer_id_block_size == 50
    assert (
        GatewaySettings.load(["--node.id", "1", "--listeners", "127.0.0.1:0"], env={})
        .advertised(4321)
        .port
        == 4321
    )
    assert parse_listener("[::1]:9092").host == "::1"
    with pytest.raises(ConfigError):
        GatewaySettings.load(["--listeners", "127.0.0.1:9092"], env={})  # node.id required
    with pytest.raises(ConfigError):
        GatewaySettings.load(["--node.id", "1", "--listeners", "FOO://h:1"], env={})
    with pytest.raises(ConfigError):
        GatewaySettings.load(["--node.id", "1", "--socket.request.max.bytes", "0"], env={})
