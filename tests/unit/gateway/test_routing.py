"""Partition leaders are spread over the gateways of the client's zone."""

from __future__ import annotations

from collections import Counter

from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey
from services.common.zk.layout import Endpoint
from services.gateway.handlers import metadata
from services.gateway.routing import (
    broker_endpoints,
    candidates,
    client_zone,
    leader_for,
    preferred_read_replica,
    shares_addresses,
    topic_hash,
)

from .fakes import add_brokers, add_gateway, add_topic, context, services

GATEWAYS = {
    1: Endpoint(1, "h1", 9092, "az1"),
    2: Endpoint(2, "h2", 9092, "az1"),
    3: Endpoint(3, "h3", 9092, "az2"),
    4: Endpoint(4, "h4", 9092, "az2"),
    5: Endpoint(5, "h5", 9092, "az2"),
    6: Endpoint(6, "h6", 9092, None),
}


def test_client_zone_hint_in_client_id() -> None:
    assert client_zone("orders;zone=az2", "az1") == "az2"
    assert client_zone("orders,rack=eu-west-1a", None) == "eu-west-1a"
    assert client_zone("client.rack=az3 orders", "az1") == "az3"
    assert client_zone("zone=az2", None) == "az2"
    # a substring of a longer word is not a hint; no hint -> the connected gateway's zone
    assert client_zone("myzone=az2", "az1") == "az1"
    assert client_zone("orders", "az1") == "az1"
    assert client_zone(None, None) is None


def test_candidates_per_zone_and_fallback() -> None:
    assert candidates(GATEWAYS, "az1") == [1, 2]
    assert candidates(GATEWAYS, "az2") == [3, 4, 5]
    assert candidates(GATEWAYS, "az9") == [1, 2, 3, 4, 5, 6]  # nobody there: everyone
    assert candidates(GATEWAYS, None) == [1, 2, 3, 4, 5, 6]


def test_leaders_spread_evenly_and_stably() -> None:
    ids = candidates(GATEWAYS, "az2")
    h = topic_hash("orders")
    leaders = [leader_for(h, p, ids) for p in range(30)]
    assert Counter(leaders) == {3: 10, 4: 10, 5: 10}
    # consecutive partitions go to consecutive gateways, and the answer never changes
    assert leaders[:3] != [leaders[0]] * 3
    assert leaders == [leader_for(topic_hash("orders"), p, ids) for p in range(30)]


def _cache_with_gateways() -> MetadataCache:
    cache = MetadataCache()
    for node_id, ep in GATEWAYS.items():
        add_gateway(cache, node_id, ep.rack)
    add_brokers(cache, 101, 102, 103)
    add_topic(cache, "orders", {p: [101 + p % 3, 101 + (p + 1) % 3] for p in range(12)})
    return cache


async def test_metadata_leaders_in_client_zone_from_client_id() -> None:
    svc = services(_cache_with_gateways(), rack="az1")
    req = {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False}
    ctx = context(svc, ApiKey.METADATA, 12, client_id="app;zone=az2")
    ctx.software.name, ctx.software.version = "apache-kafka-java", "3.9.0"
    resp = await metadata.handle(ctx, req)
    leaders = [p["leader_id"] for p in resp["topics"][0]["partitions"]]
    assert set(leaders) == {3, 4, 5}
    assert Counter(leaders) == {3: 4, 4: 4, 5: 4}
    # every gateway is listed as a broker, and every storage node (replica lists name them)
    assert sorted(b["node_id"] for b in resp["brokers"]) == [1, 2, 3, 4, 5, 6, 101, 102, 103]
    # ... but librdkafka before 2.9 would take brokers sharing an address for one: gateways only
    ctx = context(svc, ApiKey.METADATA, 12, client_id="app;zone=az2")
    ctx.software.name, ctx.software.version = "librdkafka", "2.0.2"
    resp = await metadata.handle(ctx, req)
    assert sorted(b["node_id"] for b in resp["brokers"]) == [1, 2, 3, 4, 5, 6]


async def test_metadata_leaders_default_to_connected_gateway_zone() -> None:
    svc = services(_cache_with_gateways(), rack="az1")
    req = {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False}
    resp = await metadata.handle(context(svc, ApiKey.METADATA, 12, client_id="app"), req)
    assert {p["leader_id"] for p in resp["topics"][0]["partitions"]} == {1, 2}
    # a gateway in a zone of its own: all gateways take part
    svc = services(_cache_with_gateways(), rack="az7")
    resp = await metadata.handle(context(svc, ApiKey.METADATA, 12, client_id="app"), req)
    assert {p["leader_id"] for p in resp["topics"][0]["partitions"]} == {1, 2, 3, 4, 5, 6}


def test_storage_ids_are_brokers_at_a_gateway_of_their_zone() -> None:
    storage = {1: "az2", 101: "az1", 102: "az2", 103: "az9", 104: None}
    brokers = broker_endpoints(GATEWAYS, storage)
    # a gateway keeps its id (and address) even where a storage node has the same id
    assert brokers[1] == GATEWAYS[1]
    assert {i: brokers[i] for i in GATEWAYS} == GATEWAYS
    # others: a gateway of their zone (by id), its address and rack; anyone when none is there
    assert brokers[101] == Endpoint(101, "h2", 9092, "az1")  # [1, 2][101 % 2]
    assert brokers[102] == Endpoint(102, "h3", 9092, "az2")  # [3, 4, 5][102 % 3]
    assert brokers[103] == Endpoint(103, "h2", 9092, "az1")  # [1..6][103 % 6]
    assert brokers[104].host in {ep.host for ep in GATEWAYS.values()}
    assert broker_endpoints({}, storage) == {}


def test_preferred_read_replica_is_an_in_sync_replica_in_the_client_zone() -> None:
    brokers = broker_endpoints(GATEWAYS, {101: "az1", 102: "az2", 103: "az1"})
    # a consumer in az2 fetching from an az1 gateway: the first replica whose broker is in az2
    assert preferred_read_replica("az2", "az1", [101, 103, 102], brokers) == 102
    assert preferred_read_replica("az2", "az1", [3, 102], brokers) == 3
    # already in its zone, no rack, no replica in its zone, unknown ids: fetch here
    assert preferred_read_replica("az1", "az1", [101, 102], brokers) == -1
    assert preferred_read_replica(None, "az1", [102], brokers) == -1
    assert preferred_read_replica("az3", "az1", [101, 102], brokers) == -1
    assert preferred_read_replica("az2", "az1", [999], brokers) == -1


def test_which_clients_keep_brokers_sharing_an_address_apart() -> None:
    # librdkafka < 2.9 renames a connection whose address a new broker id shares (#4557)
    assert not shares_addresses("librdkafka", "2.0.2")
    assert not shares_addresses("confluent-kafka-python", "2.3.0-rdkafka-2.3.0")
    assert not shares_addresses("librdkafka", "")  # says rdkafka, no version: assumed old
    assert shares_addresses("librdkafka", "2.9.0")
    assert shares_addresses("confluent-kafka-python", "2.16.1-rdkafka-2.16.0")
    assert shares_addresses("confluent-kafka-go", "2.10.0-rdkafka-2.10.0")
    assert shares_addresses("apache-kafka-java", "3.9.0")
    assert shares_addresses("kafka-python", "3.0.12")
    # did not say (ApiVersions before v3: kafkajs, aiokafka): not known to cope
    assert not shares_addresses("", "")
