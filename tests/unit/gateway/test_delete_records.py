"""DeleteRecords in the gateway: routing to leaders, duplicates, and errors (storage faked)."""

from __future__ import annotations

import grpc

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.gateway.handlers import delete_records

from .fakes import add_topic, context, leaders_setup


def _request(*items: tuple[str, int, int], timeout: int = 5000) -> dict[str, object]:
    topics: dict[str, list[dict[str, int]]] = {}
    for name, partition, offset in items:
        topics.setdefault(name, []).append({"partition_index": partition, "offset": offset})
    return {
        "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()],
        "timeout": timeout,
    }


def _answers(resp: dict[str, object]) -> dict[tuple[str, int], tuple[int, int]]:
    return {
        (t["name"], p["partition_index"]): (p["error_code"], p["low_watermark"])
        for t in resp["topics"]  # type: ignore[attr-defined]
        for p in t["partitions"]
    }


async def test_one_call_per_leader_and_the_last_offset_of_a_partition_wins() -> None:
    svc, _ = leaders_setup()
    req = _request(("a", 0, 3), ("a", 1, 7), ("a", 2, -1), ("a", 0, 5), timeout=1234)
    resp = await delete_records.handle(context(svc, ApiKey.DELETE_RECORDS, 2), req)
    assert _answers(resp) == {("a", 0): (0, 5), ("a", 1): (0, 7), ("a", 2): (0, -1)}
    assert [len(t["partitions"]) for t in resp["topics"]] == [3]
    calls = {n: node.calls for n, node in svc.storage.nodes.items()}  # type: ignore[attr-defined]
    ((name, (request, timeout)),) = calls[11]
    assert name == "DeleteRecords" and request.timeout_ms == 1234 and timeout > 1.234
    assert [(q.partition, q.offset) for q in request.partitions] == [(0, 5), (2, -1)]
    ((_, (request, _)),) = calls[12]
    assert [(q.partition, q.offset) for q in request.partitions] == [(1, 7)]


async def test_unknown_and_leaderless_partitions() -> None:
    svc, _ = leaders_setup()
    req = _request(("a", 9, 1), ("missing", 0, 1), ("leaderless", 0, 1), ("a", 1, 2))
    resp = await delete_records.handle(context(svc, ApiKey.DELETE_RECORDS, 0), req)
    assert _answers(resp) == {
        ("a", 9): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("missing", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ("leaderless", 0): (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1),
        ("a", 1): (0, 2),
    }


async def test_a_failed_node_fails_only_its_partitions() -> None:
    svc, cache = leaders_setup()
    svc.storage.node(12).delete_records_error = grpc.aio.AioRpcError(  # type: ignore[attr-defined]
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone"
    )
    add_topic(cache, "b", {0: [13]})  # led by a node that is not registered
    req = _request(("a", 0, 1), ("a", 1, 1), ("b", 0, 1))
    resp = await delete_records.handle(context(svc, ApiKey.DELETE_RECORDS, 1), req)
    assert _answers(resp) == {
        ("a", 0): (0, 1),
        ("a", 1): (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1),
        ("b", 0): (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1),
    }
