# ruff: noqa: F811 - the fixtures of test_controller_inprocess are imported and used by name
"""The replicas per node the autoscaler decides with are kept from the assignment changes the
controller makes or observes (services.controller.replica_counts, issue 19), and always equal a
recount from every partition - and the full snapshot the planner reads - through creations,
new partitions, a reassignment and its cancel, a topic found in ZooKeeper, deletions. Real
ZooKeeper and the controller app in-process, storage nodes that record orders."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.controller.active import ActiveController
from services.controller.replica_counts import recount

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness, whatever the import mode
from test_controller_harness import FakeStorage, controller_stub, wait_for  # noqa: E402  # isort: skip
from test_controller_inprocess import (  # noqa: E402,F401  # isort: skip - fixtures reused
    AppFactory,
    assigned,
    create,
    make_app,
    nodes,
    start_node,
    zk,
)

pytestmark = pytest.mark.integration


async def same_as_a_recount(active: ActiveController) -> dict[int, int]:
    """The kept counts equal a recount and the full snapshot; returns replicas per node."""
    kept = active.elastic.counts.refresh()
    full = recount(active.ctx)
    assert (kept.replicas, kept.hosting, kept.rfs) == (full.replicas, full.hosting, full.rfs)
    snap = active.elastic._snapshot(await active.reassigner.list_ongoing())
    assert snap.replicas == dict(kept.replicas)
    assert snap.hosting == set(kept.hosting) and snap.max_rf == kept.max_rf
    return dict(kept.replicas)


async def test_replica_counts_follow_every_assignment_change(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    # the autoscaler on (dry run) and looking every 100 ms: its looks take the marks meanwhile
    app = await make_app(
        kafkapy_autoscaler_enable=True,
        kafkapy_autoscaler_dry_run=True,
        kafkapy_rebalance_check_interval_ms=100,
    )
    for b in (1, 2, 3, 4):
        await start_node(zk_connect, nodes, b)
    active: ActiveController = app.active
    assert await same_as_a_recount(active) == {}

    assert (await create(zk, assigned("a", [1, 2, 3], [2, 3, 4]))).error_code == 0
    assert (await create(zk, assigned("b", [4]))).error_code == 0
    assert await same_as_a_recount(active) == {1: 1, 2: 2, 3: 2, 4: 2}

    stub, channel = await controller_stub(zk)
    try:
        more = pb.PartitionCountSpec(
            name="a", count=3, assignments=[pb.ReplicaAssignment(partition=2, broker_ids=[4, 1, 2])]
        )
        resp = await stub.CreatePartitions(
            pb.CreatePartitionsRequest(topics=[more], timeout_ms=5000)
        )
        assert resp.topics[0].error_code == 0
        assert await same_as_a_recount(active) == {1: 2, 2: 3, 3: 2, 4: 3}

        # a move counts its target; cancelled, its origin again
        assert await active.reassigner.submit({("a", 0): [2, 3, 4]}) == {("a", 0): None}
        assert await same_as_a_recount(active) == {1: 1, 2: 3, 3: 2, 4: 4}
        assert active.elastic.counts.total.hosting[1] == 2  # node 1 still holds a copy
        assert await active.reassigner.submit({("a", 0): None}) == {("a", 0): None}
        assert await same_as_a_recount(active) == {1: 2, 2: 3, 3: 2, 4: 3}

        # a topic written to ZooKeeper by someone else, found by the controller
        await zk.create(layout.topic_path("z"), layout.topic_assignment_json({0: [3], 1: [1]}))
        await wait_for(lambda: "z" in active.ctx.topics, what="topic z found")
        assert await same_as_a_recount(active) == {1: 3, 2: 3, 3: 3, 4: 3}
        # and a partition added to it there
        body = layout.loads((await zk.get(layout.topic_path("z")))[0])
        body["partitions"]["2"] = [2]
        await zk.set(layout.topic_path("z"), json.dumps(body).encode())
        await wait_for(lambda: 2 in active.ctx.topics["z"].assignment, what="z-2 found")
        assert await same_as_a_recount(active) == {1: 3, 2: 4, 3: 3, 4: 3}

        resp = await stub.DeleteTopics(pb.DeleteTopicsRequest(names=["a"], timeout_ms=5000))
        assert resp.topics[0].error_code == 0
        await wait_for(lambda: "a" not in active.ctx.topics, what="topic a deleted")
        assert await same_as_a_recount(active) == {1: 1, 2: 1, 3: 1, 4: 1}
    finally:
        await channel.close()
    # a queued deletion leaves the counts at once: node 4 down, topic b waits to be deleted
    await nodes[3].deregister()
    await wait_for(lambda: 4 not in active.ctx.brokers, what="node 4 seen gone")
    await zk.create(layout.delete_topic_path("b"))
    await wait_for(lambda: "b" in active.ctx.topics_to_delete, what="topic b queued")
    assert await same_as_a_recount(active) == {1: 1, 2: 1, 3: 1}
    await nodes[3].register()
    await wait_for(lambda: "b" not in active.ctx.topics, what="topic b deleted")
    assert await same_as_a_recount(active) == {1: 1, 2: 1, 3: 1}
    # topic z removed from ZooKeeper by someone else
    await zk.delete(layout.topic_path("z"), recursive=True)
    await wait_for(lambda: "z" not in active.ctx.topics, what="topic z gone")
    assert await same_as_a_recount(active) == {}
