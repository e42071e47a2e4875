"""ElectLeaders in the gateway: what it asks the controller and how it answers clients."""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import controller_pb2 as cpb
from services.gateway.handlers import elect_leaders

from .fakes import FakeController, context, services


def _answered(*results: tuple[str, int, ErrorCode], top: ErrorCode = ErrorCode.NONE) -> Any:
    async def fn(method: str, request: Any) -> Any:
        assert method == "ElectLeaders"
        return cpb.ElectLeadersResponse(
            error_code=int(top),
            partitions=[
                cpb.PartitionElection(topic=t, partition=p, error_code=int(c), error_message="m")
                for t, p, c in results
            ],
        )

    return FakeController(fn)


async def _handle(controller: FakeController, req: dict[str, Any], version: int = 2) -> Any:
    svc = services(MetadataCache(), controller=controller)
    return await elect_leaders.handle(context(svc, ApiKey.ELECT_LEADERS, version), req)


async def test_named_partitions_go_to_the_controller_once_each_and_come_back_by_topic() -> None:
    controller = _answered(
        ("a", 0, ErrorCode.NONE),
        ("a", 1, ErrorCode.ELECTION_NOT_NEEDED),
        ("b", 0, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE),
    )
    req = {
        "election_type": 0,
        "topic_partitions": [
            {"topic": "a", "partitions": [0, 1, 0]},
            {"topic": "b", "partitions": [0]},
        ],
        "timeout": 5000,
    }
    resp = await _handle(controller, req)
    ((_, sent),) = controller.requests
    assert [(r.topic, r.partition) for r in sent.partitions] == [("a", 0), ("a", 1), ("b", 0)]
    assert (sent.election_type, sent.all_partitions, sent.timeout_ms) == (0, False, 5000)
    assert resp["error_code"] == 0
    assert [
        (t["topic"], [(p["partition_id"], p["error_code"]) for p in t["partition_result"]])
        for t in resp["replica_election_results"]
    ] == [("a", [(0, 0), (1, 84)]), ("b", [(0, 80)])]


async def test_no_partitions_means_all_and_unclean_is_passed_on() -> None:
    controller = _answered(("a", 2, ErrorCode.NONE))
    resp = await _handle(controller, {"election_type": 1, "topic_partitions": None, "timeout": 0})
    ((_, sent),) = controller.requests
    assert (sent.election_type, sent.all_partitions, list(sent.partitions)) == (1, True, [])
    assert resp["replica_election_results"] == [
        {
            "topic": "a",
            "partition_result": [{"partition_id": 2, "error_code": 0, "error_message": "m"}],
        }
    ]


async def test_v0_is_a_preferred_election() -> None:
    controller = _answered()
    await _handle(controller, {"topic_partitions": [], "timeout": 100}, version=0)
    ((_, sent),) = controller.requests
    assert sent.election_type == 0


async def test_a_controller_refusal_fails_every_named_partition() -> None:
    controller = _answered(top=ErrorCode.INVALID_REQUEST)
    req = {
        "election_type": 7,
        "topic_partitions": [{"topic": "a", "partitions": [0]}],
        "timeout": 100,
    }
    resp = await _handle(controller, req)
    assert resp["error_code"] == ErrorCode.INVALID_REQUEST
    (topic,) = resp["replica_election_results"]
    assert topic["partition_result"][0]["error_code"] == ErrorCode.INVALID_REQUEST


async def test_an_unanswering_controller_times_out() -> None:
    async def never(method: str, request: Any) -> Any:
        await asyncio.Event().wait()

    svc = services(MetadataCache(), controller=FakeController(never), request_timeout_ms=50)
    req = {
        "election_type": 0,
        "topic_partitions": [{"topic": "a", "partitions": [0]}],
        "timeout": 50,
    }
    resp = await elect_leaders.handle(context(svc, ApiKey.ELECT_LEADERS, 2), req)
    assert resp["error_code"] == ErrorCode.REQUEST_TIMED_OUT
    (topic,) = resp["replica_election_results"]
    assert topic["partition_result"][0]["error_code"] == ErrorCode.REQUEST_TIMED_OUT
