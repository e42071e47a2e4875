"""Liveness after the heal, read from the cluster itself.

``cluster_checks`` are polled together until all hold or a deadline passes: every process runs,
exactly one controller acts (its ``activecontrollercount`` gauge is 1, every other one's 0, and
``/controller`` names it), every partition of every topic has a live leader and a full ISR, and
every ``__consumer_offsets`` shard is owned by a registered group coordinator. Each check
answers (ok, detail); the detail at the deadline is the evidence of a failure.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from services.cli.local_cluster import LocalCluster
from services.common.zk.layout import (
    BROKER_IDS,
    BROKER_TOPICS,
    CONSUMER_OFFSETS_TOPIC,
    CONTROLLER,
    GROUP_COORDINATOR_IDS,
    GROUP_COORDINATOR_SHARDS,
    ShardMap,
)
from tests.e2e.checker.monitor import acting_controllers


@dataclass(slots=True)
class LivenessResult:
    name: str
    ok: bool
    detail: str = ""
    seconds: float | None = None  # time from the heal until it held (or the measure)
    measure: bool = False  # ``seconds`` is a measured quantity, shown with the detail


Check = Callable[[LocalCluster, KazooClient], tuple[bool, str]]


def processes_running(cluster: LocalCluster, zk: KazooClient) -> tuple[bool, str]:
    down = cluster.exited()
    return not down, f"down: {down}" if down else "all running"


def one_acting_controller(cluster: LocalCluster, zk: KazooClient) -> tuple[bool, str]:
    acting, seen = acting_controllers(cluster, timeout=3)
    try:
        holder = json.loads(zk.get(CONTROLLER)[0])["brokerid"]
    except NoNodeError:
        holder = None
    ok = len(acting) == 1 and acting[0] == holder
    return ok, f"/controller={holder} activecontrollercount {seen}"


def partitions_led_with_full_isr(cluster: LocalCluster, zk: KazooClient) -> tuple[bool, str]:
    live = {int(b) for b in zk.get_children(BROKER_IDS)}
    bad: list[str] = []
    total = 0
    for topic in sorted(zk.get_children(BROKER_TOPICS)):
        assignment = json.loads(zk.get(f"{BROKER_TOPICS}/{topic}")[0])["partitions"]
        for p, replicas in sorted(assignment.items(), key=lambda kv: int(kv[0])):
            total += 1
            try:
                state = json.loads(zk.get(f"{BROKER_TOPICS}/{topic}/partitions/{p}/state")[0])
            except NoNodeError:
                bad.append(f"{topic}/{p}: no state")
                continue
            if state["leader"] not in live or sorted(state["isr"]) != sorted(replicas):
                bad.append(
                    f"{topic}/{p}: leader {state['leader']} isr {state['isr']} replicas {replicas}"
                )
    detail = f"{total} partitions, live storage {sorted(live)}"
    if bad:
        detail += f"; {len(bad)} not led with a full ISR: " + "; ".join(bad[:8])
    return not bad, detail


def shards_placed(cluster: LocalCluster, zk: KazooClient) -> tuple[bool, str]:
    if not zk.exists(f"{BROKER_TOPICS}/{CONSUMER_OFFSETS_TOPIC}"):
        return True, "no group used yet: no __consumer_offsets, nothing to place"
    try:
        shard_map = ShardMap.from_json(zk.get(GROUP_COORDINATOR_SHARDS)[0])
    except NoNodeError:
        return False, "__consumer_offsets exists but no shard map"
    live = {int(c) for c in zk.get_children(GROUP_COORDINATOR_IDS)}
    orphans = sorted(p for p, s in shard_map.shards.items() if s.owner not in live)
    missing = sorted(set(range(shard_map.partitions)) - set(shard_map.shards))
    ok = not orphans and not missing
    return ok, (
        f"{len(shard_map.shards)}/{shard_map.partitions} shards, coordinators {sorted(live)}"
        + (f"; owned by a dead coordinator: {orphans[:10]}" if orphans else "")
        + (f"; unplaced: {missing[:10]}" if missing else "")
    )


CLUSTER_CHECKS: dict[str, Check] = {
    "every process running": processes_running,
    "one acting controller": one_acting_controller,
    "every partition led, full ISR": partitions_led_with_full_isr,
    "every coordinator shard placed": shards_placed,
}


def wait_live(
    cluster: LocalCluster,
    since: float,
    timeout: float,
    checks: dict[str, Check] | None = None,
) -> list[LivenessResult]:
    """Poll ``checks`` until all hold in the same round, or ``timeout`` s pass; ``since``
    (monotonic) is the heal, from which each check's first time-to-ok is measured. The details
    are those of the last round."""
    checks = checks or CLUSTER_CHECKS
    results = {name: LivenessResult(name, False) for name in checks}
    deadline = time.monotonic() + timeout
    zk = KazooClient(hosts=cluster.zk_connect, timeout=5)
    zk.start(15)
    try:
        while True:
            for name, fn in checks.items():
                res = results[name]
                try:
                    res.ok, res.detail = fn(cluster, zk)
                except Exception as exc:  # noqa: BLE001 - retried until the deadline
                    res.ok, res.detail = False, f"check failed: {exc!r}"
                if res.ok and res.seconds is None:
                    res.seconds = time.monotonic() - since
            if all(r.ok for r in results.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        zk.stop()
        zk.close()
    return list(results.values())
