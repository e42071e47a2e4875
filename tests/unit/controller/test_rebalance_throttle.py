"""The rebalancer's throttles: what kafka-reassign-partitions.sh --throttle sets, and clears."""

from __future__ import annotations

from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.common.zk.elastic import AutoscalerState
from services.controller.planner import Move
from services.controller.rebalance_throttle import (
    RebalanceThrottle,
    clear_request,
    throttle_request,
)


def as_dict(req: pb.AlterConfigsRequest) -> dict[tuple[int, str], list[tuple[str, str, int]]]:
    return {
        (r.resource_type, r.name): [(o.key, o.value, o.op) for o in r.ops] for r in req.resources
    }


def test_throttle_lists_sources_and_adding_replicas_and_rates_on_every_broker() -> None:
    moves = [Move(("t", 0), (0, 1, 2), (3, 1, 2), 100), Move(("u", 5), (1, 2), (2, 1), 0)]
    got = as_dict(throttle_request(moves, 5_000_000))
    assert got[(2, "t")] == [
        ("leader.replication.throttled.replicas", "0:0,0:1,0:2", 2),
        ("follower.replication.throttled.replicas", "0:3", 2),
    ]
    assert got[(2, "u")] == [("leader.replication.throttled.replicas", "5:1,5:2", 2)]
    for b in ("0", "1", "2", "3"):
        assert got[(4, b)] == [
            ("leader.replication.throttled.rate", "5000000", 0),
            ("follower.replication.throttled.rate", "5000000", 0),
        ]
    assert len(got) == 6


def test_clear_deletes_what_was_set() -> None:
    got = as_dict(clear_request(["t"], [3]))
    assert got == {
        (2, "t"): [
            ("leader.replication.throttled.replicas", "", 1),
            ("follower.replication.throttled.replicas", "", 1),
        ],
        (4, "3"): [
            ("leader.replication.throttled.rate", "", 1),
            ("follower.replication.throttled.rate", "", 1),
        ],
    }


async def test_apply_records_and_clear_forgets_deleted_topics() -> None:
    calls: list[pb.AlterConfigsRequest] = []

    async def alter(req: pb.AlterConfigsRequest) -> pb.AlterConfigsResponse:
        calls.append(req)
        return pb.AlterConfigsResponse()

    state = AutoscalerState()
    off = RebalanceThrottle(0)
    off.alter = alter
    await off.apply([Move(("t", 0), (0,), (1,), 1)], state)
    assert calls == [] and state.throttled_topics == []
    on = RebalanceThrottle(1000)
    on.alter = alter
    await on.apply([Move(("t", 0), (0,), (1,), 1), Move(("gone", 0), (0,), (1,), 1)], state)
    assert (state.throttled_topics, state.throttled_brokers) == (["gone", "t"], [0, 1])
    assert await on.clear(state, live_topics={"t"})
    assert [r.name for r in calls[-1].resources] == ["t", "0", "1"]
    assert (state.throttled_topics, state.throttled_brokers) == ([], [])
    assert not await on.clear(state, live_topics={"t"})
