"""A rolling restart of a cluster's storage nodes, one node at a time.

For each node: restart it (its SIGTERM runs the controlled shutdown: leadership moves away
before it stops), wait until no partition is under-replicated (every partition's ISR is its
whole replica list: the node caught up everywhere), then give it back the leadership of the
partitions it is the preferred replica of (a preferred leader election of those partitions, as
``kafka-leader-election.sh`` would) and wait until it leads them. Only then the next node.
The partition states are read from ZooKeeper.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kazoo.exceptions import NoNodeError

from services.cli.common import CliError
from services.cli.zk_client import open_zk
from services.common.zk.security import NO_SECURITY, ZkSecurity

POLL_S = 0.25
ELECT_AGAIN_S = 1.0
TopicPartition = tuple[str, int]


class RollingRestartError(RuntimeError):
    """The rolling restart stopped; the message is one readable line."""


@dataclass(frozen=True, slots=True)
class PartitionView:
    replicas: tuple[int, ...]
    leader: int
    isr: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return set(self.isr) != set(self.replicas)


def under_replicated(parts: dict[TopicPartition, PartitionView]) -> list[TopicPartition]:
    return sorted(tp for tp, v in parts.items() if v.under_replicated)


def preferred_elsewhere(
    parts: dict[TopicPartition, PartitionView], broker_id: int
) -> list[TopicPartition]:
    """Partitions ``broker_id`` is the preferred (first) replica of and does not lead."""
    return sorted(
        tp
        for tp, v in parts.items()
        if v.replicas and v.replicas[0] == broker_id and v.leader != broker_id
    )


def _text(tps: Sequence[TopicPartition], limit: int = 5) -> str:
    names = [f"{t}-{p}" for t, p in tps[:limit]]
    more = f" and {len(tps) - limit} more" if len(tps) > limit else ""
    return ", ".join(names) + more


class ClusterView:
    """Topic assignments and partition states as ZooKeeper holds them."""

    def __init__(
        self, zk_connect: str, timeout: float = 10.0, security: ZkSecurity = NO_SECURITY
    ) -> None:
        try:
            self.zk = open_zk(zk_connect, timeout, security)
        except CliError as exc:
            raise RollingRestartError(str(exc)) from None

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def partitions(self) -> dict[TopicPartition, PartitionView]:
        out: dict[TopicPartition, PartitionView] = {}
        try:
            topics = self.zk.get_children("/brokers/topics")
        except NoNodeError:
            return out
        for topic in topics:
            try:
                data, _ = self.zk.get(f"/brokers/topics/{topic}")
            except NoNodeError:
                continue
            for p, replicas in (json.loads(data).get("partitions") or {}).items():
                try:
                    raw, _ = self.zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")
                    state = json.loads(raw)
                except NoNodeError:
                    state = {"leader": -1, "isr": []}
                out[(topic, int(p))] = PartitionView(
                    tuple(int(r) for r in replicas),
                    int(state["leader"]),
                    tuple(int(r) for r in state["isr"]),
                )
        return out


class RollingRestart:
    """``restart(index)`` restarts storage node ``index`` and returns once it is ready (raising
    RollingRestartError otherwise); ``elect_preferred(partitions)`` asks for a preferred leader
    election; ``say`` prints one progress line."""

    def __init__(
        self,
        view: ClusterView,
        restart: Callable[[int], None],
        elect_preferred: Callable[[list[TopicPartition]], None],
        say: Callable[[str], None],
        *,
        sync_timeout: float,
    ) -> None:
        self.view = view
        self.restart = restart
        self.elect_preferred = elect_preferred
        self.say = say
        self.sync_timeout = sync_timeout

    def run(self, broker_ids: Sequence[int]) -> None:
        lagging = under_replicated(self.view.partitions())
        if lagging:
            raise RollingRestartError(
                f"{len(lagging)} partition(s) are under-replicated before the restart "
                f"({_text(lagging)}): refusing to take a node down"
            )
        started = time.monotonic()
        for n, broker_id in enumerate(broker_ids, 1):
            self.say(f"[{n}/{len(broker_ids)}] storage-{broker_id}: controlled shutdown")
            self.restart(broker_id)
            self._wait_in_sync(broker_id)
            self._wait_preferred(broker_id)
        self.say(
            f"rolling restart of {len(broker_ids)} storage node(s) done in "
            f"{time.monotonic() - started:.1f}s: every partition fully in sync"
        )

    def _wait_in_sync(self, broker_id: int) -> None:
        deadline = time.monotonic() + self.sync_timeout
        started = time.monotonic()
        while lagging := under_replicated(self.view.partitions()):
            if time.monotonic() > deadline:
                raise RollingRestartError(
                    f"storage-{broker_id}: {len(lagging)} partition(s) still under-replicated "
                    f"after {self.sync_timeout:g}s ({_text(lagging)})"
                )
            time.sleep(POLL_S)
        self.say(
            f"storage-{broker_id}: no under-replicated partitions "
            f"({time.monotonic() - started:.1f}s after the restart)"
        )

    def _wait_preferred(self, broker_id: int) -> None:
        wanted = preferred_elsewhere(self.view.partitions(), broker_id)
        if not wanted:
            self.say(f"storage-{broker_id}: leads its preferred partitions")
            return
        self.say(f"storage-{broker_id}: preferred leader election for {len(wanted)} partition(s)")
        self.elect_preferred(wanted)
        deadline = time.monotonic() + self.sync_timeout
        elected = time.monotonic()
        while wanted := preferred_elsewhere(self.view.partitions(), broker_id):
            now = time.monotonic()
            if now > deadline:
                raise RollingRestartError(
                    f"storage-{broker_id}: does not lead {len(wanted)} partition(s) it is the "
                    f"preferred replica of after {self.sync_timeout:g}s ({_text(wanted)})"
                )
            if now - elected > ELECT_AGAIN_S:  # refused meanwhile (e.g. an ISR changed)
                self.elect_preferred(wanted)
                elected = now
            time.sleep(POLL_S)
        self.say(f"storage-{broker_id}: leads its preferred partitions again")
