"""The reassignment engine step by step (real ZooKeeper, the controller app in-process, storage
nodes that record orders, ISR changes written as a leader writes them): the topic znode during
and after a move, the orders each node gets, leadership leaving a removed leader, cancel,
the legacy znode and a topic deleted while it moves. The same behaviour under load with real
storage nodes and clients is tests/e2e/test_partition_reassignment.py."""
# ruff: noqa: F811  (the in-process controller fixtures are imported, then used as arguments)

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from services.common.errors import ErrorCode
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.controller.active import ActiveController
from services.controller.replica_assignment import ReplicaAssignment

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness, whatever the import mode
from test_controller_harness import FakeStorage, wait_for  # noqa: E402  # isort: skip
from test_controller_inprocess import (  # noqa: E402,F401  # isort: skip  (fixtures)
    AppFactory,
    _isr_changed,
    _no_children,
    assigned,
    create,
    make_app,
    nodes,
    start_node,
    state,
    zk,
)

pytestmark = pytest.mark.integration


async def _topic(zk: AsyncZk, name: str) -> dict[str, Any]:
    return layout.loads((await zk.get(layout.topic_path(name)))[0])  # type: ignore[no-any-return]


def _stopped(node: FakeStorage, name: str, p: int) -> bool:
    return any(
        r.delete_partitions and any(x.topic == name and x.partition == p for x in r.partitions)
        for r in node.stops
    )


async def _setup(
    zk_connect: str, make_app: AppFactory, nodes: list[FakeStorage], count: int
) -> ActiveController:
    app = await make_app()
    for i in range(1, count + 1):
        await start_node(zk_connect, nodes, i)
    assert app.active is not None
    return app.active  # type: ignore[no-any-return]


async def test_move_whose_leader_is_removed(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    active = await _setup(zk_connect, make_app, nodes, 4)
    assert (await create(zk, assigned("mv", [1, 2, 3]))).error_code == 0
    assert await active.reassigner.submit({("mv", 0): [2, 3, 4]}) == {("mv", 0): None}

    body = await _topic(zk, "mv")
    assert body["partitions"]["0"] == [2, 3, 4, 1]
    assert body["adding_replicas"] == {"0": [4]} and body["removing_replicas"] == {"0": [1]}
    assert await active.reassigner.list_ongoing() == {
        ("mv", 0): ReplicaAssignment((2, 3, 4, 1), (4,), (1,))
    }
    # a new leader epoch, same leader and ISR, ordered to every replica of the full set
    assert await state(zk, "mv", 0) == {
        "controller_epoch": active.epoch,
        "leader": 1,
        "version": 1,
        "leader_epoch": 1,
        "isr": [1, 2, 3],
    }
    await wait_for(lambda: nodes[3].latest("mv", 0) is not None, what="node 4 ordered")
    order = nodes[3].latest("mv", 0)
    assert order is not None and order.leader == 1 and list(order.replicas) == [2, 3, 4, 1]
    done = active.reassigner.wait_done([("mv", 0)])
    assert not done.done()

    # the leader takes node 4 into the ISR: the move completes
    await _isr_changed(zk, "mv", 0, [1, 2, 3, 4])
    assert await wait_for(lambda: done.done() and done.result(), what="the move completed")
    final = await state(zk, "mv", 0)
    assert (final["leader"], final["isr"], final["leader_epoch"]) == (2, [2, 3, 4], 2)
    body = await _topic(zk, "mv")
    assert body["partitions"]["0"] == [2, 3, 4]
    assert body["adding_replicas"] == {} and body["removing_replicas"] == {}
    await wait_for(lambda: _stopped(nodes[0], "mv", 0), what="node 1 deletes its replica")
    order = nodes[1].latest("mv", 0)
    assert order is not None and order.leader == 2 and list(order.replicas) == [2, 3, 4]
    assert await active.reassigner.list_ongoing() == {}


async def test_cancel_errors_legacy_znode_and_deletion(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    active = await _setup(zk_connect, make_app, nodes, 4)
    assert (await create(zk, assigned("cx", [1, 2], [2, 3]))).error_code == 0
    r = active.reassigner

    errors = await r.submit(
        {
            ("cx", 0): None,
            ("cx", 7): [1, 2],
            ("nope", 0): [1],
            ("cx", 1): [],
            ("cx", 2): [1],
        }
    )
    assert {tp: e.code if e else None for tp, e in errors.items()} == {
        ("cx", 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
        ("cx", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("cx", 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ("cx", 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    refused = await r.submit({("cx", 0): [1, 9]})
    assert refused[("cx", 0)] is not None
    assert refused[("cx", 0)].code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    rf = await r.submit({("cx", 0): [1, 2, 4]}, allow_replication_factor_change=False)
    assert rf[("cx", 0)] is not None and rf[("cx", 0)].code == ErrorCode.INVALID_REPLICATION_FACTOR

    # RF 2 -> 3, then cancelled before node 4 caught up: back to [1, 2], node 4's copy deleted
    assert await r.submit({("cx", 0): [1, 2, 4]}) == {("cx", 0): None}
    assert (await _topic(zk, "cx"))["adding_replicas"] == {"0": [4]}
    assert await r.submit({("cx", 0): None}) == {("cx", 0): None}
    body = await _topic(zk, "cx")
    assert body["partitions"]["0"] == [1, 2] and body["adding_replicas"] == {}
    await wait_for(lambda: _stopped(nodes[3], "cx", 0), what="node 4 deletes its replica")
    assert await r.list_ongoing() == {}

    # the legacy znode: started, then removed once done
    legacy = layout.reassign_partitions_json({("cx", 1): [3, 4]})
    await zk.create(layout.REASSIGN_PARTITIONS, legacy)
    await wait_for(
        lambda: _has(zk, "cx", "adding_replicas", {"1": [4]}), what="the legacy move started"
    )
    assert await zk.exists(layout.REASSIGN_PARTITIONS) is not None
    await _isr_changed(zk, "cx", 1, [2, 3, 4])
    await wait_for(lambda: _gone(zk, layout.REASSIGN_PARTITIONS), what="the legacy znode removed")
    assert (await _topic(zk, "cx"))["partitions"]["1"] == [3, 4]
    final = await state(zk, "cx", 1)
    assert (final["leader"], final["isr"]) == (3, [3, 4])

    # a topic deleted while one of its partitions moves: the waiter resolves, the legacy
    # znode's entry for it goes
    assert await r.submit({("cx", 0): [1, 4]}) == {("cx", 0): None}
    await zk.create(
        layout.REASSIGN_PARTITIONS, layout.reassign_partitions_json({("cx", 0): [1, 4]})
    )
    done = r.wait_done([("cx", 0)])
    await zk.create(layout.delete_topic_path("cx"))
    assert await wait_for(lambda: done.done() and done.result(), what="the waiter resolved")
    await wait_for(lambda: _gone(zk, layout.REASSIGN_PARTITIONS), what="the legacy entry dropped")
    await wait_for(lambda: _no_children(zk, layout.DELETE_TOPICS), what="the topic deleted")


async def _has(zk: AsyncZk, name: str, key: str, value: object) -> bool:
    return (await _topic(zk, name)).get(key) == value


async def _gone(zk: AsyncZk, path: str) -> bool:
    return await zk.exists(path) is None
