"""DescribeLogDirs at the gateway: which storage nodes a gateway answers for, and the answer."""

from __future__ import annotations

from services.common.log_dir_names import parse_dir_name
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey
from services.common.zk.layout import Endpoint
from services.gateway.handlers.describe_log_dirs import HANDLER
from services.gateway.routing import broker_endpoints, storage_served_by

from .fakes import FakeStorage, add_brokers, add_gateway, context, services


def _ep(node_id: int, rack: str | None) -> Endpoint:
    return Endpoint(node_id, "127.0.0.1", 9000 + node_id, rack)


def test_every_storage_node_is_served_by_exactly_the_gateway_metadata_places_it_at() -> None:
    gateways = {1: _ep(1, "z1"), 2: _ep(2, "z2"), 3: _ep(3, "z1")}
    racks: dict[int, str | None] = {1: "z1", 2: "z2", 4: "z1", 5: "z1", 6: "z2", 7: "z9", 8: None}
    served = {g: storage_served_by(gateways, racks, g) for g in gateways}
    # a storage id that is a gateway's stays with that gateway
    assert 1 in served[1] and 2 in served[2]
    seen = sorted(n for nodes in served.values() for n in nodes)
    assert seen == sorted(racks)  # each storage node exactly once
    listed = broker_endpoints(gateways, racks)
    for g, nodes in served.items():
        for n in nodes:
            assert (listed[n].host, listed[n].port) == (gateways[g].host, gateways[g].port)
            if n not in gateways:
                assert listed[n].rack == gateways[g].rack


async def test_answer_names_each_dir_with_its_storage_node() -> None:
    cache = MetadataCache()
    add_gateway(cache, 1, "z1", port=9092)
    add_gateway(cache, 2, "z2")
    add_brokers(cache, 1, 2, 3)  # racks z1, z2, z3: 3's zone has no gateway -> 3 % 2 = gateway 2
    svc = services(cache, rack="z1")
    req = {"topics": [{"topic": "a", "partitions": [0]}]}
    resp = await HANDLER.handle(context(svc, ApiKey.DESCRIBE_LOG_DIRS, 4), req)
    assert resp is not None
    assert resp["error_code"] == 0
    assert [parse_dir_name(r["log_dir"]) for r in resp["results"]] == [(1, "/data/1")]
    (result,) = resp["results"]
    assert (result["total_bytes"], result["usable_bytes"]) == (100, 40)
    assert result["topics"] == [
        {
            "name": "a",
            "partitions": [
                {
                    "partition_index": 0,
                    "partition_size": 10,
                    "offset_lag": 0,
                    "is_future_key": False,
                }
            ],
        }
    ]
    storage: FakeStorage = svc.storage  # type: ignore[assignment]
    ((method, sent),) = storage.nodes[1].calls
    assert method == "DescribeLogDirs" and not sent.all_topics
    assert 2 not in storage.nodes and 3 not in storage.nodes  # gateway 2 serves them

    # null topics = every replica
    resp = await HANDLER.handle(context(svc, ApiKey.DESCRIBE_LOG_DIRS, 1), {"topics": None})
    assert resp is not None
    assert storage.nodes[1].calls[-1][1].all_topics


def test_dir_names_round_trip() -> None:
    assert parse_dir_name("storage-12:/var/lib/x:y") == (12, "/var/lib/x:y")
    assert parse_dir_name("/var/lib/x") is None
