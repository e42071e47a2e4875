"""OffsetForLeaderEpoch in the gateway: routing to leaders, duplicates, errors (storage faked)."""

from __future__ import annotations

import grpc

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.gateway.handlers import offset_for_leader_epoch

from .fakes import add_topic, context, leaders_setup


def _request(*items: tuple[str, int, int, int], replica_id: int = -1) -> dict[str, object]:
    topics: dict[str, list[dict[str, int]]] = {}
    for name, partition, current, epoch in items:
        topics.setdefault(name, []).append(
            {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}
        )
    return {
        "replica_id": replica_id,
        "topics": [{"topic": n, "partitions": ps} for n, ps in topics.items()],
    }


def _answers(resp: dict[str, object]) -> dict[tuple[str, int], tuple[int, int, int]]:
    return {
        (t["topic"], p["partition"]): (p["error_code"], p["leader_epoch"], p["end_offset"])
        for t in resp["topics"]  # type: ignore[attr-defined]
        for p in t["partitions"]
    }


async def test_each_leader_answers_its_partitions_once() -> None:
    svc, _ = leaders_setup()
    req = _request(("a", 0, 2, 1), ("a", 1, 2, 0), ("a", 2, 9, 2), ("a", 0, 2, 1))
    resp = await offset_for_leader_epoch.handle(
        context(svc, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4), req
    )
    assert _answers(resp) == {
        ("a", 0): (0, 1, 200),
        ("a", 1): (0, 0, 100),
        ("a", 2): (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),  # the node's check, passed through
    }
    calls = {n: node.calls for n, node in svc.storage.nodes.items()}  # type: ignore[attr-defined]
    ((name, request),) = calls[11]
    assert name == "OffsetForLeaderEpoch" and request.replica_id == -1
    assert [(q.partition, q.current_leader_epoch, q.leader_epoch) for q in request.partitions] == [
        (0, 2, 1),
        (2, 9, 2),
    ]


async def test_unknown_leaderless_and_unreachable_partitions() -> None:
    svc, cache = leaders_setup()
    svc.storage.node(12).epoch_error = grpc.aio.AioRpcError(  # type: ignore[attr-defined]
        grpc.StatusCode.UNKNOWN, grpc.aio.Metadata(), grpc.aio.Metadata(), "Stream removed"
    )
    add_topic(cache, "b", {0: [13]})  # led by a node that is not registered
    req = _request(
        ("a", 9, -1, 0), ("missing", 0, -1, 0), ("leaderless", 0, -1, 0), ("a", 1, -1, 0),
        ("b", 0, -1, 0), ("a", 0, -1, 3),
    )  # fmt: skip
    resp = await offset_for_leader_epoch.handle(
        context(svc, ApiKey.OFFSET_FOR_LEADER_EPOCH, 2), req
    )
    assert _answers(resp) == {
        ("a", 9): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        ("missing", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        ("leaderless", 0): (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1),
        ("a", 1): (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1),  # the node died mid-call
        ("b", 0): (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1),
        ("a", 0): (0, 3, 400),
    }
