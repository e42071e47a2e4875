"""The rebalance planner: a target replica layout from the current one, moving as little as it can.

Pure and deterministic (same input, same plan): no I/O, no clock, no randomness; every choice is
broken by sizes, then topic/partition names and broker ids. The controller feeds it the current
assignment, the live storage nodes with their zones, the size of each partition and the nodes
being drained; it answers the target layout and the partition moves to get there, or refuses
with one readable reason.

Rules, in priority order:

1. Nodes being drained (``excluded``) host nothing.
2. Zones: a partition of replication factor ``r`` never has more than ``ceil(r / Z)`` replicas in
   one zone, ``Z`` being the number of zones among the nodes it may use; so with ``Z >= r`` its
   replicas are in distinct zones. Draining nodes so that fewer zones remain than before (and
   fewer than ``r``) is refused rather than weakened.
3. Replicas per node within ±1 of even among the nodes of the same zone structure: every single
   replica move from a node to one holding two or more fewer replicas that rule 2 allows is
   made (so without zones, or with zones of equal size, max - min <= 1). With zones of unequal
   size the zones' shares follow from rule 2 (zones a, b, c, a, b and RF 3: the single node of
   zone c holds a replica of every partition).
4. Disk bytes: swaps of replicas between the fullest and the emptiest node while that brings
   them closer, until they are within ``disk_tolerance`` of the mean or no swap helps.
5. Leaders (the first replica, Kafka's preferred leader) per node within ±1 of even where the
   replica sets allow it (leadership shifts along chains of shared partitions, a max-flow in
   all but name); a partition keeps its preferred leader when it can.

Replicas on nodes that are neither live nor drained (a node restarting) stay where they are and
count for nothing: the planner never moves data it cannot see.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]


class PlanError(Exception):
    """The layout asked for cannot be reached; the message is one readable line."""


@dataclass(frozen=True, slots=True)
class Node:
    """A storage node the planner may use: its broker id, its zone (``broker.rack``) and, when
    known, the bytes its volume can hold."""

    id: int
    zone: str | None = None
    capacity_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Move:
    """One partition's reassignment: its replicas now and in the target (first = preferred)."""

    tp: TopicPartition
    old: tuple[int, ...]
    new: tuple[int, ...]
    size_bytes: int

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(b for b in self.new if b not in self.old)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(b for b in self.old if b not in self.new)

    @property
    def bytes_to_copy(self) -> int:
        return self.size_bytes * len(self.adding)


@dataclass(slots=True)
class Plan:
    target: dict[TopicPartition, list[int]]
    moves: list[Move]
    replicas: dict[int, int] = field(default_factory=dict)  # node -> replicas in the target
    leaders: dict[int, int] = field(default_factory=dict)  # node -> preferred leaderships
    bytes: dict[int, int] = field(default_factory=dict)  # node -> bytes in the target

    @property
    def bytes_to_copy(self) -> int:
        return sum(m.bytes_to_copy for m in self.moves)

    def summary(self) -> dict[str, object]:
        return {
            "moves": len(self.moves),
            "bytes_to_copy": self.bytes_to_copy,
            "replicas": {str(k): v for k, v in sorted(self.replicas.items())},
            "leaders": {str(k): v for k, v in sorted(self.leaders.items())},
            "bytes": {str(k): v for k, v in sorted(self.bytes.items())},
        }


def next_moves(
    moves: Sequence[Move], in_flight: Iterable[TopicPartition], limit: int
) -> list[Move]:
    """The moves to submit now: at most ``limit`` reassignments running at once, in plan order,
    none of a partition that is already moving."""
    busy = set(in_flight)
    room = max(0, limit - len(busy))
    return [m for m in moves if m.tp not in busy][:room]


def plan(
    assignment: Mapping[TopicPartition, Sequence[int]],
    nodes: Sequence[Node],
    sizes: Mapping[TopicPartition, int] | None = None,
    *,
    excluded: Iterable[int] = (),
    disk_tolerance: float = 0.1,
    max_fill_ratio: float = 0.95,
) -> Plan:
    """The target layout and the moves to reach it (see the module docstring for the rules).

    ``nodes`` are the live storage nodes, drained ones included; ``excluded`` the ids being
    drained; ``sizes`` the bytes of one replica of each partition (missing = 0). Raises
    PlanError when the remaining nodes cannot hold every partition's replicas in distinct zones
    or cannot fit the data (more than ``max_fill_ratio`` of their capacity).
    """
    return _Planner(assignment, nodes, sizes or {}, set(excluded), disk_tolerance).run(
        max_fill_ratio
    )


class _Planner:
    def __init__(
        self,
        assignment: Mapping[TopicPartition, Sequence[int]],
        nodes: Sequence[Node],
        sizes: Mapping[TopicPartition, int],
        excluded: set[int],
        disk_tolerance: float,
    ) -> None:
        self.old = {tp: list(r) for tp, r in sorted(assignment.items())}
        self.nodes = {n.id: n for n in nodes}
        self.excluded = excluded & set(self.nodes)
        self.eligible = sorted(set(self.nodes) - self.excluded)
        self.size = {tp: max(0, int(sizes.get(tp, 0))) for tp in self.old}
        self.tolerance = disk_tolerance
        self.zone_of = {n.id: (n.zone if n.zone is not None else f"<node {n.id}>") for n in nodes}
        self.zoned = any(n.zone is not None for n in nodes)
        self.zones = {self.zone_of[b] for b in self.eligible} if self.zoned else set()
        self.all_zones = {self.zone_of[b] for b in self.nodes} if self.zoned else set()
        self.new: dict[TopicPartition, list[int]] = {tp: list(r) for tp, r in self.old.items()}
        self.count: Counter[int] = Counter({b: 0 for b in self.eligible})
        self.load: Counter[int] = Counter({b: 0 for b in self.eligible})
        for tp, replicas in self.new.items():
            for b in replicas:
                if b in self.count:
                    self.count[b] += 1
                    self.load[b] += self.size[tp]

    # ---- rules ------------------------------------------------------------------------------
    def zone_cap(self, rf: int) -> int:
        return math.ceil(rf / len(self.zones)) if self.zoned and self.zones else rf

    def fits(self, tp: TopicPartition, replicas: Sequence[int], out: int, into: int) -> bool:
        """May ``into`` take the place of ``out`` in ``replicas``?"""
        if into in replicas or into not in self.count:
            return False
        if not self.zoned:
            return True
        zone = self.zone_of[into]
        same = sum(
            1 for b in replicas if b != out and b in self.zone_of and self.zone_of[b] == zone
        )
        return same + 1 <= self.zone_cap(len(replicas))

    def check_feasible(self, max_fill_ratio: float) -> None:
        if not self.old:
            return
        rf_max = max(len(r) for r in self.old.values())
        drained = (
            f" once {_ids(self.excluded)} {'is' if len(self.excluded) == 1 else 'are'} drained"
            if self.excluded
            else ""
        )
        if len(self.eligible) < rf_max:
            raise PlanError(
                f"replication factor {rf_max} needs {rf_max} storage nodes but only "
                f"{len(self.eligible)} would remain{drained}"
            )
        if self.zoned:
            needed = min(rf_max, len(self.all_zones))
            if len(self.zones) < needed:
                raise PlanError(
                    f"replication factor {rf_max} needs {needed} zones but only "
                    f"{len(self.zones)} ({', '.join(sorted(self.zones))}) would remain{drained}"
                )
            per_zone = Counter(self.zone_of[b] for b in self.eligible)
            for rf in sorted({len(r) for r in self.old.values()}):
                cap = self.zone_cap(rf)
                if sum(min(n, cap) for n in per_zone.values()) < rf:
                    raise PlanError(
                        f"replication factor {rf} cannot be spread over zones "
                        f"{dict(sorted(per_zone.items()))} with at most {cap} per zone{drained}"
                    )
        capacities = [self.nodes[b].capacity_bytes for b in self.eligible]
        if all(c is not None for c in capacities):
            total = sum(self.size[tp] * len(r) for tp, r in self.old.items())
            room = int(sum(c or 0 for c in capacities) * max_fill_ratio)
            if total > room:
                raise PlanError(
                    f"the data does not fit: {total} bytes of replicas, the remaining nodes "
                    f"hold {room} bytes ({max_fill_ratio:.0%} of their capacity){drained}"
                )

    # ---- phases -----------------------------------------------------------------------------
    def run(self, max_fill_ratio: float) -> Plan:
        self.check_feasible(max_fill_ratio)
        self.evacuate()
        self.balance_counts()
        self.balance_bytes()
        self.balance_counts()  # a swap can open a replica move that was blocked by zones
        self.check_capacity(max_fill_ratio)
        return self.result(self.choose_leaders())

    def _apply(self, tp: TopicPartition, out: int, into: int) -> None:
        replicas = self.new[tp]
        replicas[replicas.index(out)] = into
        if out in self.count:
            self.count[out] -= 1
            self.load[out] -= self.size[tp]
        self.count[into] += 1
        self.load[into] += self.size[tp]

    def _best_destination(self, tp: TopicPartition, out: int) -> int | None:
        fits = [b for b in self.eligible if self.fits(tp, self.new[tp], out, b)]
        return min(fits, key=lambda b: (self.count[b], self.load[b], b), default=None)

    def evacuate(self) -> None:
        """Rules 1 and 2: replicas off drained nodes, zones over their cap relieved."""
        for tp, replicas in self.new.items():
            for out in list(replicas):
                if out in self.excluded:
                    self._replace(tp, out, "it is being drained")
            if not self.zoned:
                continue
            cap = self.zone_cap(len(replicas))
            for out in sorted(replicas, key=lambda b: (-self.count[b], -b)):
                if out not in replicas or out not in self.zone_of or out in self.excluded:
                    continue
                zone = self.zone_of[out]
                if sum(1 for b in replicas if self.zone_of.get(b) == zone) > cap:
                    self._replace(tp, out, f"zone {zone} holds too many of its replicas")

    def _replace(self, tp: TopicPartition, out: int, why: str) -> None:
        into = self._best_destination(tp, out)
        if into is None:
            raise PlanError(
                f"no storage node can take the replica of {tp[0]}-{tp[1]} on node {out} ({why})"
            )
        self._apply(tp, out, into)

    def balance_counts(self) -> None:
        """Rule 3: move single replicas from a node to one holding at least two fewer."""
        limit = 4 * sum(len(r) for r in self.new.values()) + 16
        for _ in range(limit):
            move = self._count_move()
            if move is None:
                return
            self._apply(*move)

    def _count_move(self) -> tuple[TopicPartition, int, int] | None:
        by_count = sorted(self.eligible, key=lambda b: (-self.count[b], -self.load[b], b))
        for x in by_count:
            for y in reversed(by_count):
                if self.count[x] - self.count[y] < 2:
                    break
                best: tuple[tuple[int, int, TopicPartition], TopicPartition] | None = None
                gap = self.load[x] - self.load[y]
                for tp, replicas in self.new.items():
                    if x not in replicas or not self.fits(tp, replicas, x, y):
                        continue
                    # free (x only got it in this plan) first, then the size that best evens
                    # the two nodes' bytes
                    free = 0 if x not in self.old[tp] else 1
                    key = (free, abs(gap - 2 * self.size[tp]), tp)
                    if best is None or key < best[0]:
                        best = (key, tp)
                if best is not None:
                    return best[1], x, y
        return None

    def balance_bytes(self) -> None:
        """Rule 4: swap a bigger replica of the fullest node for a smaller one of the emptiest."""
        if not self.eligible or not any(self.size.values()):
            return
        limit = 2 * len(self.new) + 16
        for _ in range(limit):
            mean = sum(self.load[b] for b in self.eligible) / len(self.eligible)
            by_load = sorted(self.eligible, key=lambda b: (-self.load[b], b))
            x, y = by_load[0], by_load[-1]
            gap = self.load[x] - self.load[y]
            if gap <= self.tolerance * mean:
                return
            swap = self._byte_swap(x, y, gap)
            if swap is None:
                return
            p, q = swap
            self._apply(p, x, y)
            self._apply(q, y, x)

    def _byte_swap(self, x: int, y: int, gap: int) -> tuple[TopicPartition, TopicPartition] | None:
        on_x = [tp for tp, r in self.new.items() if x in r and y not in r]
        on_y = [tp for tp, r in self.new.items() if y in r and x not in r]
        best: tuple[tuple[int, TopicPartition, TopicPartition], TopicPartition, TopicPartition]
        best = None  # type: ignore[assignment]
        for p in on_x:
            if not self.fits(p, self.new[p], x, y):
                continue
            for q in on_y:
                delta = self.size[p] - self.size[q]
                if delta <= 0 or 2 * delta >= 2 * gap or not self.fits(q, self.new[q], y, x):
                    continue
                key = (abs(gap - 2 * delta), p, q)
                if best is None or key < best[0]:
                    best = (key, p, q)
        return None if best is None else (best[1], best[2])

    def check_capacity(self, max_fill_ratio: float) -> None:
        for b in self.eligible:
            cap = self.nodes[b].capacity_bytes
            if cap is not None and self.load[b] > cap * max_fill_ratio:
                raise PlanError(
                    f"the data does not fit: node {b} would hold {self.load[b]} bytes, more "
                    f"than {max_fill_ratio:.0%} of its {cap} bytes"
                )

    def choose_leaders(self) -> dict[TopicPartition, int]:
        """Rule 5: keep preferred leaders, then shift leadership along shared partitions until no
        node leads two more than another it can hand one to (directly or through a chain)."""
        leader: dict[TopicPartition, int] = {}
        leads: Counter[int] = Counter({b: 0 for b in self.eligible})
        for tp, replicas in self.new.items():
            movable = [b for b in replicas if b in leads]
            if not movable:
                leader[tp] = replicas[0]
                continue
            first = self.old[tp][0] if self.old[tp] else None
            pick = first if first in movable else min(movable, key=lambda b: (leads[b], b))
            leader[tp] = pick
            leads[pick] += 1
        limit = len(self.new) * max(1, len(self.eligible)) + 16
        for _ in range(limit):
            if not self._shift_leadership(leader, leads):
                break
        return leader

    def _shift_leadership(self, leader: dict[TopicPartition, int], leads: Counter[int]) -> bool:
        for x in sorted(self.eligible, key=lambda b: (-leads[b], b)):
            # BFS: from a node, the nodes a partition it leads could be handed to
            parent: dict[int, tuple[int, TopicPartition]] = {}
            queue = deque([x])
            seen = {x}
            found = None
            while queue and found is None:
                u = queue.popleft()
                for tp, lead in leader.items():
                    if lead != u:
                        continue
                    for v in self.new[tp]:
                        if v in seen or v not in leads:
                            continue
                        seen.add(v)
                        parent[v] = (u, tp)
                        if leads[v] <= leads[x] - 2:
                            found = v
                            break
                        queue.append(v)
                    if found is not None:
                        break
            if found is None:
                continue
            v = found
            while v != x:
                u, tp = parent[v]
                leader[tp] = v
                v = u
            leads[x] -= 1
            leads[found] += 1
            return True
        return False

    def result(self, leader: dict[TopicPartition, int]) -> Plan:
        target: dict[TopicPartition, list[int]] = {}
        moves: list[Move] = []
        for tp, replicas in self.new.items():
            lead = leader[tp]
            ordered = [lead] + [b for b in replicas if b != lead]
            target[tp] = ordered
            if ordered != self.old[tp]:
                moves.append(Move(tp, tuple(self.old[tp]), tuple(ordered), self.size[tp]))
        # data-free reorders first (leadership only), then the smallest copies: more partitions
        # reach their target sooner under the concurrency bound
        moves.sort(key=lambda m: (m.bytes_to_copy, m.tp))
        leads = Counter(t[0] for t in target.values())
        return Plan(
            target,
            moves,
            replicas=dict(sorted(self.count.items())),
            leaders={b: leads.get(b, 0) for b in self.eligible},
            bytes=dict(sorted(self.load.items())),
        )


def _ids(ids: Iterable[int]) -> str:
    got = sorted(ids)
    return "node " + str(got[0]) if len(got) == 1 else "nodes " + ", ".join(map(str, got))
