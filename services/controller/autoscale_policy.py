"""The autoscaler's policy: from measured signals to one decision, with its reason. Pure.

Signals per storage node: bytes on disk against its capacity, client bytes in per second and
replicas hosted. For each signal with a limit the policy computes how many nodes the cluster
needs to stay under it:

- scale up when more nodes than there are are needed for any signal at its target
  (``disk.target.percent``, ``bytes.in.per.node.max``, ``partitions.per.node.max``), to that
  many (at most ``max.nodes``);
- scale down by one node (the highest id: the last StatefulSet ordinal) when, for every signal,
  one node fewer would stay below the target lowered by ``hysteresis.percent``, never below
  ``min.nodes`` nor below the replication factor of any topic;
- otherwise, or during the ``cooldown`` after a scaling, or while replicas are moving, hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SCALE_UP = "scale_up"
SCALE_DOWN = "scale_down"
HOLD = "hold"


@dataclass(frozen=True, slots=True)
class NodeLoad:
    used_bytes: int
    capacity_bytes: int
    bytes_in_per_sec: float = 0.0
    replicas: int = 0


@dataclass(frozen=True, slots=True)
class Policy:
    disk_target_percent: float = 70.0
    hysteresis_percent: float = 20.0
    bytes_in_per_node_max: int = 0
    partitions_per_node_max: int = 0
    min_nodes: int = 3
    max_nodes: int = 12
    cooldown_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class Decision:
    action: str  # SCALE_UP | SCALE_DOWN | HOLD
    nodes: int  # the node count it asks for (the current one when holding)
    reason: str
    remove: tuple[int, ...] = ()  # SCALE_DOWN: the ids to drain then remove
    needed: dict[str, int] = field(default_factory=dict)  # signal -> nodes it needs


def decide(
    loads: dict[int, NodeLoad],
    policy: Policy,
    *,
    min_nodes_for_data: int,
    busy: str = "",
    last_scale_ms: int = 0,
    now_ms: int,
) -> Decision:
    """One decision for the live storage nodes ``loads`` (id -> load).

    ``min_nodes_for_data``: the fewest nodes that can hold every partition (largest replication
    factor); ``busy``: why no decision may be taken now (replicas moving, a drain), or "".
    """
    n = len(loads)
    floor = max(policy.min_nodes, min_nodes_for_data)
    ceiling = max(policy.max_nodes, floor)
    if busy:
        return Decision(HOLD, n, busy)
    if n < floor:
        return Decision(
            SCALE_UP,
            floor,
            f"{n} storage nodes, fewer than the {floor} needed "
            f"(min.nodes {policy.min_nodes}, largest replication factor {min_nodes_for_data})",
        )
    left_ms = last_scale_ms + policy.cooldown_ms - now_ms
    up = _needed(loads, policy, 1.0)
    if not up:
        return Decision(HOLD, n, "no signal: no disk capacity reported and no other limit set")
    want_up = max(up.values(), default=0)
    if want_up > n and n < ceiling:
        target = min(ceiling, want_up)
        if left_ms > 0:
            return Decision(
                HOLD,
                n,
                f"cooldown: {_why_up(loads, policy, up, n)}; {math.ceil(left_ms / 1000)} s left",
                needed=up,
            )
        return Decision(SCALE_UP, target, _why_up(loads, policy, up, n), needed=up)
    if want_up > n:
        return Decision(
            HOLD, n, f"at max.nodes {ceiling}: {_why_up(loads, policy, up, n)}", needed=up
        )
    if n > ceiling:
        victim = max(loads)
        return Decision(
            SCALE_DOWN,
            n - 1,
            f"{n} storage nodes, more than max.nodes {ceiling}",
            (victim,),
            needed=up,
        )
    if n <= floor:
        return Decision(HOLD, n, f"within the target at {n} nodes (the fewest allowed)", needed=up)
    low = policy.disk_target_percent - policy.hysteresis_percent
    if low <= 0:
        return Decision(
            HOLD,
            n,
            f"within the target at {n} nodes (hysteresis leaves no room to scale down)",
            needed=up,
        )
    down = _needed(loads, policy, low / policy.disk_target_percent)
    if max(down.values()) <= n - 1:
        victim = max(loads)
        reason = _why_down(loads, policy, n)
        if left_ms > 0:
            return Decision(
                HOLD, n, f"cooldown: {reason}; {math.ceil(left_ms / 1000)} s left", needed=up
            )
        return Decision(SCALE_DOWN, n - 1, reason, (victim,), needed=up)
    return Decision(HOLD, n, f"within the target at {n} nodes", needed=up)


def _needed(loads: dict[int, NodeLoad], policy: Policy, factor: float) -> dict[str, int]:
    """Nodes each signal needs with its limit scaled by ``factor``."""
    out: dict[str, int] = {}
    caps = [ld.capacity_bytes for ld in loads.values() if ld.capacity_bytes > 0]
    if caps:
        per_node = (sum(caps) / len(caps)) * policy.disk_target_percent / 100 * factor
        used = sum(ld.used_bytes for ld in loads.values())
        out["disk"] = math.ceil(used / per_node) if per_node > 0 else 0
    if policy.bytes_in_per_node_max > 0:
        rate = sum(ld.bytes_in_per_sec for ld in loads.values())
        out["bytes_in"] = math.ceil(rate / (policy.bytes_in_per_node_max * factor))
    if policy.partitions_per_node_max > 0:
        replicas = sum(ld.replicas for ld in loads.values())
        out["partitions"] = math.ceil(replicas / (policy.partitions_per_node_max * factor))
    return out


def disk_percent(loads: dict[int, NodeLoad]) -> float:
    cap = sum(ld.capacity_bytes for ld in loads.values())
    return 100.0 * sum(ld.used_bytes for ld in loads.values()) / cap if cap else 0.0


def _why_up(loads: dict[int, NodeLoad], policy: Policy, up: dict[str, int], n: int) -> str:
    parts = []
    if up.get("disk", 0) > n:
        parts.append(
            f"disk use {disk_percent(loads):.1f}% of capacity, above the "
            f"{policy.disk_target_percent:g}% target: {up['disk']} nodes needed"
        )
    if up.get("bytes_in", 0) > n:
        parts.append(
            f"bytes in {sum(ld.bytes_in_per_sec for ld in loads.values()):.0f}/s, over "
            f"{policy.bytes_in_per_node_max}/s per node: {up['bytes_in']} nodes needed"
        )
    if up.get("partitions", 0) > n:
        parts.append(
            f"{sum(ld.replicas for ld in loads.values())} replicas, over "
            f"{policy.partitions_per_node_max} per node: {up['partitions']} nodes needed"
        )
    return "; ".join(parts)


def _why_down(loads: dict[int, NodeLoad], policy: Policy, n: int) -> str:
    low = policy.disk_target_percent - policy.hysteresis_percent
    caps = [ld.capacity_bytes for ld in loads.values() if ld.capacity_bytes > 0]
    if caps:
        fewer = (
            100.0 * sum(ld.used_bytes for ld in loads.values()) / (sum(caps) / len(caps) * (n - 1))
        )
        return (
            f"disk use {disk_percent(loads):.1f}%; with {n - 1} nodes it would be {fewer:.1f}%, "
            f"below {low:g}% (target {policy.disk_target_percent:g}% - hysteresis "
            f"{policy.hysteresis_percent:g}%)"
        )
    return f"every signal stays below its limit with {n - 1} nodes"
