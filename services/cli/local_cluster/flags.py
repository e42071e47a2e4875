"""Command lines of the local cluster's services: ``python -m <package>.<role> <flags>``.

Flags use Kafka's property names. Every role gets the ZooKeeper connection, the (shared, short)
session timeout and its admin listener; the rest comes from the role's renderer in
``ROLE_FLAGS`` (a new role adds one renderer there).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from services.cli.local_cluster.layout import Service


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """What a service's flags depend on beyond its own slot."""

    host: str
    zk_connect: str
    zk_session_timeout_ms: int
    storage_nodes: int
    storage_dirs: Callable[[int], Sequence[Path]]


Renderer = Callable[[Service, ClusterShape, list[str]], list[str]]


def _controller(svc: Service, shape: ClusterShape, common: list[str]) -> list[str]:
    # __consumer_offsets and __transaction_state want 3 replicas (Kafka's default), the latter
    # a min ISR of 2; a smaller cluster gets what it can host, as Kafka's own test clusters
    # configure it.
    internal_rf = min(3, shape.storage_nodes)
    return [
        "--controller.id", str(svc.index), "--listeners", f"{shape.host}:{svc.port}", *common,
        "--offsets.topic.replication.factor", str(internal_rf),
        "--transaction.state.log.replication.factor", str(internal_rf),
        "--transaction.state.log.min.isr", str(min(2, internal_rf)),
    ]  # fmt: skip


def _storage(svc: Service, shape: ClusterShape, common: list[str]) -> list[str]:
    return [
        "--broker.id", str(svc.index), "--listeners", f"{shape.host}:{svc.port}",
        "--log.dirs", ",".join(str(d) for d in shape.storage_dirs(svc.index)),
        "--broker.rack", str(svc.zone), *common,
    ]  # fmt: skip


def _zoned_node(svc: Service, shape: ClusterShape, common: list[str]) -> list[str]:
    """Group and transaction coordinators, gateways: a node id and a rack."""
    return [
        "--node.id", str(svc.index), "--listeners", f"{shape.host}:{svc.port}",
        "--broker.rack", str(svc.zone), *common,
    ]  # fmt: skip


ROLE_FLAGS: dict[str, Renderer] = {
    "controller": _controller,
    "storage": _storage,
    "group_coordinator": _zoned_node,
    "transaction_coordinator": _zoned_node,
    "gateway": _zoned_node,
}


def service_flags(svc: Service, shape: ClusterShape, extra: Sequence[str] = ()) -> list[str]:
    """The flags of one service; ``extra`` (the caller's own flags) comes last and wins."""
    # Every service gets the same (short) session timeout: a restarted process waits that long
    # for the node of its killed predecessor to expire.
    common = [
        "--zookeeper.connect", shape.zk_connect,
        "--zookeeper.session.timeout.ms", str(shape.zk_session_timeout_ms),
        "--admin.host", shape.host,
        "--admin.port", str(svc.admin_port),
    ]  # fmt: skip
    return [*ROLE_FLAGS[svc.role](svc, shape, common), *extra]


def service_argv(package: str, role: str, flags: Sequence[str]) -> list[str]:
    """``python -m <package>.<role> <flags>`` with this interpreter."""
    return [sys.executable, "-m", f"{package}.{role}", *flags]
