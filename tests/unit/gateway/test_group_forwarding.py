"""Group requests forwarded to in-process GroupCoordinator gRPC servers: bodies intact, multi-group
requests split per coordinator and merged in order, ListGroups fan-out, failures in each API's
and version's shape, JoinGroup's deadline, and a long JoinGroup on the Kafka listener."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from services.common.coordinator.clients import CoordinatorClients
from services.common.errors import ErrorCode
from services.common.group_errors import error_response
from services.common.metadata_cache import MetadataCache
from services.common.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    decode_request,
    decode_response,
    decode_response_body,
    encode_request,
    encode_request_body,
    encode_response_body,
    message_spec,
    parse_request_header,
)
from services.common.protocol.schema import EntitySpec
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2 as pb
from services.common.zk import layout
from services.gateway.context import GatewayServices
from services.gateway.handlers import HANDLERS
from services.gateway.handlers.group_requests import client_host, forward_timeout_s
from services.gateway.server import KafkaServer

from .fake_group_coordinator import FakeGroupCoordinator, group_in, place, register
from .fakes import add_brokers, add_gateway, add_topic, context, services
from .test_wire_versions import REQUESTS

PARTITIONS = 4
ONE, TWO = 1, 2  # coordinator ids: shards 0-1 on ONE, 2-3 on TWO
GROUP_APIS = [
    ApiKey.JOIN_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.DESCRIBE_GROUPS,
    ApiKey.LIST_GROUPS,
    ApiKey.DELETE_GROUPS,
    ApiKey.OFFSET_DELETE,
]
CASES = [
    (int(k), v)
    for k in GROUP_APIS
    for v in range(SUPPORTED_VERSIONS[k][0], SUPPORTED_VERSIONS[k][1] + 1)
]
IDS = [f"{ApiKey(k).name}-v{v}" for k, v in CASES]
ON_ONE = group_in([0, 1], PARTITIONS, "one")
ON_ONE_B = group_in([0, 1], PARTITIONS, "oneb")
ON_TWO = group_in([2, 3], PARTITIONS, "two")
ON_TWO_B = group_in([2, 3], PARTITIONS, "twob")


@dataclass
class Cluster:
    svc: GatewayServices
    cache: MetadataCache
    one: FakeGroupCoordinator
    two: FakeGroupCoordinator


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    cache = MetadataCache()
    add_gateway(cache, 1, "z1")
    add_brokers(cache, 11)
    add_topic(cache, "a", {0: [11], 1: [11]})
    add_topic(cache, layout.CONSUMER_OFFSETS_TOPIC, {p: [11] for p in range(PARTITIONS)})
    one = await FakeGroupCoordinator(ONE).start()
    two = await FakeGroupCoordinator(TWO).start()
    register(cache, one, two)
    place(cache, {0: ONE, 1: ONE, 2: TWO, 3: TWO}, PARTITIONS)
    svc = services(cache)
    svc.coordinators = CoordinatorClients(cache)
    yield Cluster(svc, cache, one, two)
    await svc.coordinators.close()
    await one.stop()
    await two.stop()


def _request(api_key: int, version: int, group: str) -> dict[str, Any]:
    """REQUESTS[api_key] for ``group``, as the listener decodes it at ``version``."""
    body = dict(REQUESTS[api_key])
    if "group_id" in body:
        body["group_id"] = group
    body.update({"groups_names": [group]} if api_key == ApiKey.DELETE_GROUPS else {})
    if api_key == ApiKey.DESCRIBE_GROUPS:
        body["groups"] = [group]
    if api_key == ApiKey.OFFSET_FETCH:
        body["groups"] = [{"group_id": group, "topics": [{"name": "a", "partition_indexes": [0]}]}]
    frame = encode_request(api_key, version, 1, "c", body)[4:]
    _, offset = parse_request_header(frame)
    return decode_request(api_key, version, frame, offset)


async def _handle(
    c: Cluster, api_key: int, version: int, req: dict[str, Any], client_id: str = "test"
) -> dict[str, Any]:
    resp = await HANDLERS[api_key].handle(context(c.svc, api_key, version, client_id), req)
    assert resp is not None
    return resp


def _codes(body: Any) -> list[int]:
    if isinstance(body, dict):
        return [c for k, v in body.items() for c in ([v] if k == "error_code" else _codes(v))]
    if isinstance(body, list):
        return [c for item in body for c in _codes(item)]
    return []


def _assert_shape(spec: EntitySpec, body: dict[str, Any]) -> None:
    """``body`` has exactly the fields of ``spec``, recursively."""
    assert set(body) == set(spec.field_names), (spec.name, sorted(body))
    for f in (*spec.fields, *spec.tagged):
        value = body[f.name]
        if f.entity is None or value is None:
            continue
        for item in value if f.array else [value]:
            _assert_shape(f.entity, item)


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
async def test_forwarded_intact_and_answered(cluster: Cluster, api_key: int, version: int) -> None:
    req = _request(api_key, version, ON_TWO)
    resp = await _handle(cluster, api_key, version, req, client_id="app-1")
    fake = cluster.two
    assert len(fake.calls) == 1
    call = fake.calls[0]
    assert (call.api_key, call.api_version) == (api_key, version)
    assert call.request == encode_request_body(api_key, version, req)
    assert (call.client_id, call.client_host) == ("app-1", "/127.0.0.1")
    expected = fake.answer(api_key, version, req)
    assert isinstance(expected, dict)
    expected = decode_response_body(
        api_key, version, encode_response_body(api_key, version, expected)
    )[0]
    if api_key == ApiKey.LIST_GROUPS:  # asked everywhere, merged
        assert len(cluster.one.calls) == 1
        assert [g["group_id"] for g in resp["groups"]] == ["listed@1", "listed@2"]
        assert resp["error_code"] == 0
    else:
        assert not cluster.one.calls
        assert resp == expected
    _assert_shape(message_spec(api_key, version, "response"), resp)


@pytest.mark.parametrize(
    "api_key", [ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_FETCH]
)
async def test_multi_group_requests_split_and_merged_in_order(
    cluster: Cluster, api_key: int
) -> None:
    version = SUPPORTED_VERSIONS[ApiKey(api_key)][1]
    unplaced = "unplaced-group"
    place(cluster.cache, {0: ONE, 1: ONE, 2: TWO, 3: TWO}, PARTITIONS)
    groups = [ON_ONE, ON_TWO, ON_ONE_B, ON_TWO_B]
    shard = layout.group_partition(unplaced, PARTITIONS)
    place(
        cluster.cache,
        {p: o for p, o in {0: ONE, 1: ONE, 2: TWO, 3: TWO}.items() if p != shard},
        PARTITIONS,
    )
    groups.insert(2, unplaced)
    if api_key == ApiKey.DESCRIBE_GROUPS:
        req = {"groups": groups, "include_authorized_operations": False}
        entries, field = "groups", lambda r: r["groups"]
    elif api_key == ApiKey.DELETE_GROUPS:
        req = {"groups_names": groups}
        entries, field = "results", lambda r: r["groups_names"]
    else:
        req = {"groups": [{"group_id": g, "topics": None} for g in groups], "require_stable": True}
        entries, field = "groups", lambda r: [g["group_id"] for g in r["groups"]]
    resp = await _handle(cluster, api_key, version, req)
    assert [field(b) for b in cluster.one.bodies()] == [[ON_ONE, ON_ONE_B]]
    assert [field(b) for b in cluster.two.bodies()] == [[ON_TWO, ON_TWO_B]]
    assert [e["group_id"] for e in resp[entries]] == groups
    codes = [e["error_code"] for e in resp[entries]]
    # OffsetFetch answers "loading, retry" instead: librdkafka's admin client crashes on the
    # coordinator errors (see group_requests._retriable_offset_fetch_error)
    unplaced_code = (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if api_key == ApiKey.OFFSET_FETCH
        else ErrorCode.COORDINATOR_NOT_AVAILABLE
    )
    assert codes == [0, 0, unplaced_code, 0, 0]
    if api_key == ApiKey.DESCRIBE_GROUPS:
        assert [e["group_state"] for e in resp["groups"]] == [
            "Stable@1",
            "Stable@2",
            "",
            "Stable@1",
            "Stable@2",
        ]
    if api_key == ApiKey.OFFSET_FETCH:
        assert all(b["require_stable"] for b in cluster.one.bodies() + cluster.two.bodies())
    _assert_shape(message_spec(api_key, version, "response"), resp)


async def test_group_missing_from_an_answer_is_an_error_not_a_gap(cluster: Cluster) -> None:
    def forgetful(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return error_response(api_key, version, {"groups": body["groups"][:1]}, ErrorCode.NONE)

    cluster.one.answer = forgetful
    resp = await _handle(
        cluster,
        ApiKey.DESCRIBE_GROUPS,
        5,
        {"groups": [ON_ONE, ON_ONE_B], "include_authorized_operations": False},
    )
    assert [(g["group_id"], g["error_code"]) for g in resp["groups"]] == [
        (ON_ONE, 0),
        (ON_ONE_B, ErrorCode.UNKNOWN_SERVER_ERROR),
    ]


@pytest.mark.parametrize("version", range(5))
async def test_list_groups_with_one_coordinator_down(cluster: Cluster, version: int) -> None:
    await cluster.two.stop()
    resp = await _handle(cluster, ApiKey.LIST_GROUPS, version, {"states_filter": []})
    assert resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert [g["group_id"] for g in resp["groups"]] == ["listed@1"]
    _assert_shape(message_spec(ApiKey.LIST_GROUPS, version, "response"), resp)


async def test_list_groups_reports_a_coordinators_own_error(cluster: Cluster) -> None:
    def loading(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        resp = error_response(api_key, version, body, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        resp["groups"] = [{"group_id": "partial", "protocol_type": "", "group_state": "Empty"}]
        return resp

    cluster.one.answer = loading
    resp = await _handle(cluster, ApiKey.LIST_GROUPS, 4, {"states_filter": ["Empty"]})
    assert resp["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert [g["group_id"] for g in resp["groups"]] == ["partial", "listed@2"]
    assert cluster.two.bodies()[0]["states_filter"] == ["Empty"]


async def test_list_groups_while_a_shard_has_no_owner(cluster: Cluster) -> None:
    place(cluster.cache, {0: ONE, 1: ONE, 2: TWO}, PARTITIONS)
    resp = await _handle(cluster, ApiKey.LIST_GROUPS, 4, {"states_filter": []})
    assert resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert len(resp["groups"]) == 2


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
async def test_coordinator_down_answers_not_coordinator(
    cluster: Cluster, api_key: int, version: int
) -> None:
    await cluster.one.stop()
    await cluster.two.stop()
    req = _request(api_key, version, ON_ONE)
    resp = await _handle(cluster, api_key, version, req)
    # ListGroups has no coordinator to rediscover: it reports the coordinators unavailable;
    # OffsetFetch v2+ answers "loading, retry" (librdkafka's admin client crashes on the others)
    want = (
        ErrorCode.COORDINATOR_NOT_AVAILABLE
        if api_key == ApiKey.LIST_GROUPS
        else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if api_key == ApiKey.OFFSET_FETCH and version >= 2
        else ErrorCode.NOT_COORDINATOR
    )
    codes = _codes(resp)
    assert codes and set(codes) == {want}, resp
    _assert_shape(message_spec(api_key, version, "response"), resp)
    if api_key == ApiKey.OFFSET_COMMIT or (api_key == ApiKey.OFFSET_FETCH and version < 2):
        parts = [(t["name"], p["partition_index"]) for t in resp["topics"] for p in t["partitions"]]
        assert parts == [("a", 0)]  # every requested partition answered


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=IDS)
async def test_unplaced_shard_answers_coordinator_not_available(
    cluster: Cluster, api_key: int, version: int
) -> None:
    place(cluster.cache, {}, PARTITIONS)
    resp = await _handle(cluster, api_key, version, _request(api_key, version, ON_TWO))
    loading = api_key == ApiKey.OFFSET_FETCH and version >= 2  # see the test above
    want = (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.COORDINATOR_NOT_AVAILABLE
    )
    assert set(_codes(resp)) == {want}
    if api_key != ApiKey.LIST_GROUPS:  # ListGroups still asks the registered coordinators
        assert not cluster.one.calls and not cluster.two.calls
    _assert_shape(message_spec(api_key, version, "response"), resp)


async def test_owner_not_registered_is_not_available_owner_gone_is_not_coordinator(
    cluster: Cluster,
) -> None:
    req = _request(ApiKey.HEARTBEAT, 4, ON_TWO)
    cluster.cache.apply_group_coordinator(TWO, None)
    resp = await _handle(cluster, ApiKey.HEARTBEAT, 4, req)
    assert resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    # registered at an address where nothing listens any more
    register(cluster.cache, cluster.two)
    await cluster.two.stop()
    resp = await _handle(cluster, ApiKey.HEARTBEAT, 4, req)
    assert resp["error_code"] == ErrorCode.NOT_COORDINATOR


async def test_forward_response_error_code_is_the_answer(cluster: Cluster) -> None:
    def refuse(api_key: int, version: int, body: dict[str, Any]) -> pb.ForwardResponse:
        return pb.ForwardResponse(error_code=int(ErrorCode.UNSUPPORTED_VERSION), error_message="no")

    cluster.two.answer = refuse
    resp = await _handle(cluster, ApiKey.SYNC_GROUP, 5, _request(ApiKey.SYNC_GROUP, 5, ON_TWO))
    assert resp["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    resp = await _handle(cluster, ApiKey.DELETE_GROUPS, 2, {"groups_names": [ON_TWO, ON_ONE]})
    assert [(r["group_id"], r["error_code"]) for r in resp["results"]] == [
        (ON_TWO, ErrorCode.UNSUPPORTED_VERSION),
        (ON_ONE, 0),
    ]


async def test_channel_follows_a_coordinator_that_moved(cluster: Cluster) -> None:
    req = _request(ApiKey.HEARTBEAT, 4, ON_TWO)
    await _handle(cluster, ApiKey.HEARTBEAT, 4, req)
    await cluster.two.stop()
    moved = await FakeGroupCoordinator(TWO).start()
    try:
        register(cluster.cache, moved)  # same id, new port
        assert (await _handle(cluster, ApiKey.HEARTBEAT, 4, req))["error_code"] == 0
        assert len(moved.calls) == 1
    finally:
        await moved.stop()


async def test_offset_commit_answers_unknown_partitions_itself(cluster: Cluster) -> None:
    req: dict[str, Any] = {
        "group_id": ON_ONE,
        "generation_id_or_member_epoch": 3,
        "member_id": "m",
        "group_instance_id": None,
        "topics": [
            {
                "name": "a",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 5,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "x",
                    },
                    {
                        "partition_index": 9,
                        "committed_offset": 5,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "x",
                    },
                ],
            },
            {
                "name": "nope",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 1,
                        "committed_leader_epoch": -1,
                        "committed_metadata": None,
                    }
                ],
            },
        ],
    }
    resp = await _handle(cluster, ApiKey.OFFSET_COMMIT, 8, req)
    sent = cluster.one.bodies()[0]["topics"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in sent] == [
        ("a", [0])
    ]
    got = {
        (t["name"], p["partition_index"]): p["error_code"]
        for t in resp["topics"]
        for p in t["partitions"]
    }
    assert got == {
        ("a", 0): 0,
        ("a", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert [t["name"] for t in resp["topics"]] == ["a", "nope"]  # merged per topic
    # nothing known: answered without the coordinator
    only_unknown = {**req, "topics": req["topics"][1:]}
    resp = await _handle(cluster, ApiKey.OFFSET_COMMIT, 8, only_unknown)
    assert len(cluster.one.calls) == 1
    assert _codes(resp) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


async def test_offset_delete_group_error_answers_no_partitions(cluster: Cluster) -> None:
    req = {
        "group_id": ON_ONE,
        "topics": [
            {"name": "a", "partitions": [{"partition_index": 0}]},
            {"name": "nope", "partitions": [{"partition_index": 0}]},
        ],
    }
    resp = await _handle(cluster, ApiKey.OFFSET_DELETE, 0, req)
    assert resp["error_code"] == 0
    assert {t["name"] for t in resp["topics"]} == {"a", "nope"}
    assert [t["name"] for t in cluster.one.bodies()[0]["topics"]] == ["a"]

    def not_found(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return error_response(api_key, version, body, ErrorCode.GROUP_ID_NOT_FOUND)

    cluster.one.answer = not_found
    resp = await _handle(cluster, ApiKey.OFFSET_DELETE, 0, req)
    assert resp["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND and resp["topics"] == []


def test_forward_deadlines() -> None:
    svc = services(request_timeout_ms=2000)
    join = {"session_timeout": 10000, "rebalance_timeout": 60000}
    assert forward_timeout_s(context(svc, ApiKey.JOIN_GROUP, 5), join) == pytest.approx(62.0)
    assert forward_timeout_s(context(svc, ApiKey.JOIN_GROUP, 0), join) == pytest.approx(12.0)
    assert forward_timeout_s(context(svc, ApiKey.HEARTBEAT, 4), join) == pytest.approx(2.0)
    assert forward_timeout_s(context(svc, ApiKey.SYNC_GROUP, 5), join) == pytest.approx(2.0)


async def test_join_group_may_outlast_the_request_timeout(cluster: Cluster) -> None:
    cluster.svc.settings = cluster.svc.settings.model_copy(update={"request_timeout_ms": 100})

    async def slow(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.3)
        return error_response(api_key, version, body, ErrorCode.NONE)

    cluster.two.answer = slow
    join = {**_request(ApiKey.JOIN_GROUP, 5, ON_TWO), "rebalance_timeout": 1000}
    assert (await _handle(cluster, ApiKey.JOIN_GROUP, 5, join))["error_code"] == 0
    join0 = {**_request(ApiKey.JOIN_GROUP, 0, ON_TWO), "session_timeout": 1000}
    assert (await _handle(cluster, ApiKey.JOIN_GROUP, 0, join0))["error_code"] == 0
    short = {**join, "rebalance_timeout": 50}
    assert (await _handle(cluster, ApiKey.JOIN_GROUP, 5, short))["error_code"] == (
        ErrorCode.NOT_COORDINATOR
    )
    heartbeat = _request(ApiKey.HEARTBEAT, 4, ON_TWO)
    assert (await _handle(cluster, ApiKey.HEARTBEAT, 4, heartbeat))["error_code"] == (
        ErrorCode.NOT_COORDINATOR
    )


# ---- on the Kafka listener ---------------------------------------------------------------------
async def _read(
    reader: asyncio.StreamReader, api_key: int, version: int, within_s: float = 2.0
) -> tuple[int, dict[str, Any]]:
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), within_s))[0]
    frame = await asyncio.wait_for(reader.readexactly(size), within_s)
    return decode_response(api_key, version, frame)


async def test_long_join_group_blocks_neither_reading_nor_other_connections(
    cluster: Cluster,
) -> None:
    release = asyncio.Event()
    joined = asyncio.Event()

    async def answer(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if api_key == ApiKey.JOIN_GROUP:
            joined.set()
            await release.wait()
        return error_response(api_key, version, body, ErrorCode.NONE)

    cluster.two.answer = answer
    server = KafkaServer(
        cluster.svc,
        HANDLERS,
        {int(k): v for k, v in SUPPORTED_VERSIONS.items()},
        max_request_bytes=1 << 20,
    )
    port = await server.start("127.0.0.1", 0)
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    try:
        (ra, wa), (rb, wb) = conns
        join = {**REQUESTS[ApiKey.JOIN_GROUP], "group_id": ON_TWO}
        beat = {**REQUESTS[ApiKey.HEARTBEAT], "group_id": ON_TWO}
        wa.write(
            encode_request(ApiKey.JOIN_GROUP, 9, 1, "a", join)
            + encode_request(ApiKey.HEARTBEAT, 4, 2, "a", beat)
        )
        await asyncio.wait_for(joined.wait(), 2)
        wb.write(encode_request(ApiKey.HEARTBEAT, 4, 7, "b", beat))
        corr, body = await _read(rb, ApiKey.HEARTBEAT, 4)  # B is not held up by A's join
        assert (corr, body["error_code"]) == (7, 0)
        # A's heartbeat was read and forwarded while its join is still waiting...
        for _ in range(100):
            if len(cluster.two.bodies(ApiKey.HEARTBEAT)) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(cluster.two.bodies(ApiKey.HEARTBEAT)) == 2
        with pytest.raises(TimeoutError):  # ...but its answer waits for the join's
            await _read(ra, ApiKey.JOIN_GROUP, 9, within_s=0.2)
        release.set()
        assert (await _read(ra, ApiKey.JOIN_GROUP, 9))[0] == 1
        assert (await _read(ra, ApiKey.HEARTBEAT, 4))[0] == 2
    finally:
        release.set()
        for _, w in conns:
            w.close()
        await server.close()


@pytest.mark.parametrize(
    ("peer", "expected"),
    [
        ("127.0.0.1:50123", "/127.0.0.1"),
        ("::1:50123", "/0:0:0:0:0:0:0:1"),
        ("2001:db8::abcd:9092", "/2001:db8:0:0:0:0:0:abcd"),
        ("fe80::1%eth0:9092", "/fe80:0:0:0:0:0:0:1%eth0"),
        ("::ffff:10.0.0.1:9092", "/10.0.0.1"),
        ("?", "/?"),
    ],
)
def test_client_host_is_javas_inet_address_form(peer: str, expected: str) -> None:
    """DescribeGroups shows member hosts as Kafka does (InetAddress.toString)."""
    assert client_host(peer) == expected


async def test_offset_commit_of_known_partitions_is_forwarded_whole(cluster: Cluster) -> None:
    """Every partition known: the coordinator gets each of them, in order; a topic naming no
    partition leaves nothing to commit (answered without the coordinator, as before)."""

    def part(index: int) -> dict[str, Any]:
        return {
            "partition_index": index,
            "committed_offset": 7,
            "committed_leader_epoch": -1,
            "committed_metadata": "",
        }

    req: dict[str, Any] = {
        "group_id": ON_ONE,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": "a", "partitions": [part(1), part(0)]}],
    }
    await _handle(cluster, ApiKey.OFFSET_COMMIT, 8, req)
    sent = cluster.one.bodies()[0]["topics"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in sent] == [
        ("a", [1, 0])
    ]
    empty = {**req, "topics": [{"name": "a", "partitions": []}]}
    resp = await _handle(cluster, ApiKey.OFFSET_COMMIT, 8, empty)
    assert len(cluster.one.calls) == 1
    assert resp["topics"] == []
