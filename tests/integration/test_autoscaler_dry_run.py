# ruff: noqa: F811 - the fixtures of test_controller_inprocess are imported and used by name
"""The autoscaler's dry run, in a controller run inside the test process (real ZooKeeper, fake
storage nodes whose disk use the test publishes as storage nodes do): it decides, logs and
exports its decision and plan, and changes nothing - no scale spec written, no drain, no move."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from services.common.zk import elastic
from services.common.zk.client import AsyncZk
from services.controller.app import ControllerApp

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness, whatever the import mode
from test_controller_harness import FakeStorage, wait_for  # noqa: E402  # isort: skip
from test_controller_inprocess import (  # noqa: E402,F401  # isort: skip - fixtures reused
    AppFactory,
    assigned,
    create,
    make_app,
    nodes,
    zk,
)

pytestmark = pytest.mark.integration


async def publish_usage(zk: AsyncZk, broker: int, used: int, capacity: int = 1000) -> None:
    data = elastic.StorageUsage(broker, used, capacity, 0, int(time.time() * 1000)).to_json()
    if await zk.exists(elastic.usage_path(broker)) is None:
        await zk.create(elastic.usage_path(broker), data, makepath=True)
    else:
        await zk.set(elastic.usage_path(broker), data)


def evaluation(app: ControllerApp) -> tuple[str, str]:
    assert app.active is not None
    action, reason, _ = app.active.elastic.evaluation
    return action, reason


async def test_dry_run_decides_and_exports_but_changes_nothing(
    zk_connect: str, zk: AsyncZk, make_app: AppFactory, nodes: list[FakeStorage]
) -> None:
    app = await make_app(
        kafkapy_autoscaler_enable=True,
        kafkapy_autoscaler_dry_run=True,
        kafkapy_autoscaler_provisioner="local",
        kafkapy_rebalance_check_interval_ms=100,
        kafkapy_autoscaler_cooldown_ms=0,
        kafkapy_autoscaler_disk_target_percent=50.0,
        kafkapy_autoscaler_max_nodes=5,
    )
    for i, zone in ((1, "a"), (2, "b"), (3, "c")):
        nodes.append(await FakeStorage(i, zk_connect, zone).start())
    assert (await create(zk, assigned("t", [1, 2, 3], [2, 3, 1], [3, 1, 2]))).error_code == 0
    for b in (1, 2, 3):
        await publish_usage(zk, b, 800)  # 80% > 50%: 5 nodes needed

    await wait_for(lambda: evaluation(app)[0] == "scale_up", 15, what="a scale-up decision")
    assert evaluation(app)[1] == "disk use 80.0% of capacity, above the 50% target: 5 nodes needed"
    m = app.metrics.elastic
    await wait_for(lambda: m.desired_nodes._value.get() == 5, 5, what="desired nodes exported")
    assert m.enabled._value.get() == 0  # a dry run does not act
    assert await zk.exists(elastic.STORAGE_SCALE) is None  # the provisioner was never asked

    # a fourth (empty) node and usage falling: the scale-down is decided and planned, not done
    nodes.append(await FakeStorage(4, zk_connect, "a").start())
    for b in (1, 2, 3, 4):
        await publish_usage(zk, b, 10)
    await wait_for(lambda: evaluation(app)[0] == "scale_down", 15, what="a scale-down decision")
    assert app.active is not None
    status = json.loads(app.active.elastic.status_json())
    assert status["autoscaler"]["dry_run"] is True
    assert status["evaluation"]["decision"] == "scale_down"
    assert status["plan"] is not None and status["draining"] == []
    assert status["last_decision"]["decision"] is None  # nothing was done
    got = await zk.get_or_none(elastic.AUTOSCALER)
    state = elastic.AutoscalerState.from_json(got[0] if got else None)
    assert state.draining == [] and state.last_decision == ""
    body = json.loads((await zk.get("/brokers/topics/t"))[0])
    assert not body.get("adding_replicas") and body["partitions"] == {
        "0": [1, 2, 3],
        "1": [2, 3, 1],
        "2": [3, 1, 2],
    }
    assert await zk.exists(elastic.STORAGE_SCALE) is None
