"""ZooKeeper layout of elastic storage, under kafka-py's own prefix.

- ``/kafka-py/storage-usage/<id>`` (ephemeral, written by each storage node every few seconds):
  ``{"version":2,"broker":0,"used_bytes":..,"capacity_bytes":..,"bytes_in":..,
  "timestamp":..,"replicas":n}`` (``bytes_in``: bytes appended by clients since the node
  started; the controller derives the rate from two reports). Totals only, a fixed ~150 bytes
  whatever the number of replicas: the controller asks each replica's size of the nodes
  (Storage.DescribeLogDirs) only when it plans moves.
- ``/kafka-py/autoscaler`` (persistent, written by the active controller, epoch-guarded): what
  the controller is doing (draining nodes, desired node count, the last decision and why), so a
  new controller resumes it.
- ``/kafka-py/storage-scale`` (persistent, written by the active controller's local provisioner):
  ``{"version":1,"replicas":n,"removed":[ids]}``, the local cluster's storage "StatefulSet".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from services.common.zk.layout import KAFKA_PY, dumps, loads

STORAGE_USAGE = f"{KAFKA_PY}/storage-usage"
AUTOSCALER = f"{KAFKA_PY}/autoscaler"
STORAGE_SCALE = f"{KAFKA_PY}/storage-scale"


def usage_path(broker_id: int) -> str:
    return f"{STORAGE_USAGE}/{broker_id}"


@dataclass(frozen=True, slots=True)
class StorageUsage:
    broker: int
    used_bytes: int
    capacity_bytes: int
    bytes_in: int
    timestamp_ms: int
    replicas: int = 0  # replicas hosted

    @property
    def used_percent(self) -> float:
        return 100.0 * self.used_bytes / self.capacity_bytes if self.capacity_bytes else 0.0

    def to_json(self) -> bytes:
        return dumps(
            {
                "version": 2,
                "broker": self.broker,
                "used_bytes": self.used_bytes,
                "capacity_bytes": self.capacity_bytes,
                "bytes_in": self.bytes_in,
                "timestamp": self.timestamp_ms,
                "replicas": self.replicas,
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> StorageUsage | None:
        """Version 1 (which also listed every replica's size) reads the same, the list ignored."""
        try:
            body = loads(data)
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        try:
            return cls(
                int(body["broker"]),
                int(body["used_bytes"]),
                int(body["capacity_bytes"]),
                int(body.get("bytes_in", 0)),
                int(body.get("timestamp", 0)),
                int(body.get("replicas", 0)),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(slots=True)
class AutoscalerState:
    """What the active controller persists: enough for the next one to carry on."""

    draining: list[int] = field(default_factory=list)  # ids being emptied, to remove after
    remove_after_drain: bool = False  # ask the provisioner to remove them once empty
    rebalance_pending: bool = False  # replicas are being spread onto new nodes
    throttled_topics: list[str] = field(default_factory=list)  # throttles to clear when done
    throttled_brokers: list[int] = field(default_factory=list)
    desired_nodes: int | None = None
    last_decision: str = ""
    last_reason: str = ""
    last_decision_ms: int = 0
    last_scale_ms: int = 0

    def to_json(self) -> bytes:
        return dumps({"version": 1, **asdict(self)})

    @classmethod
    def from_json(cls, data: bytes | None) -> AutoscalerState:
        try:
            body: Any = loads(data) if data else None
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return cls()
        try:
            return cls(
                draining=sorted(int(b) for b in body.get("draining") or []),
                remove_after_drain=bool(body.get("remove_after_drain", False)),
                rebalance_pending=bool(body.get("rebalance_pending", False)),
                throttled_topics=sorted(str(t) for t in body.get("throttled_topics") or []),
                throttled_brokers=sorted(int(b) for b in body.get("throttled_brokers") or []),
                desired_nodes=(
                    int(body["desired_nodes"]) if body.get("desired_nodes") is not None else None
                ),
                last_decision=str(body.get("last_decision", "")),
                last_reason=str(body.get("last_reason", "")),
                last_decision_ms=int(body.get("last_decision_ms", 0)),
                last_scale_ms=int(body.get("last_scale_ms", 0)),
            )
        except (TypeError, ValueError):
            return cls()


@dataclass(frozen=True, slots=True)
class ScaleSpec:
    """The local cluster's storage "StatefulSet": ordinals ``0..replicas-1`` but ``removed``."""

    replicas: int
    removed: tuple[int, ...] = ()

    @property
    def running(self) -> list[int]:
        return [i for i in range(self.replicas) if i not in self.removed]

    def without(self, ids: Iterable[int]) -> ScaleSpec:
        removed = set(self.removed) | set(ids)
        n = self.replicas
        while n > 0 and n - 1 in removed:
            n -= 1
        return ScaleSpec(n, tuple(sorted(i for i in removed if i < n)))

    def to_json(self) -> bytes:
        return dumps({"version": 1, "replicas": self.replicas, "removed": list(self.removed)})

    @classmethod
    def from_json(cls, data: bytes | None) -> ScaleSpec | None:
        try:
            body = loads(data) if data else None
            if not isinstance(body, dict):
                return None
            n = int(body["replicas"])
            return cls(n, tuple(sorted(int(i) for i in body.get("removed") or [] if int(i) < n)))
        except (KeyError, TypeError, ValueError):
            return None
