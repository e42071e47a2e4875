"""The node provisioner interface: the one place that creates and removes storage nodes.

Storage nodes are ordinals ``0..n-1`` (broker id = StatefulSet ordinal, data kept per ordinal
like a PVC): scaling to ``n`` adds or removes the highest ordinals. The controller drains
nodes before it asks to remove them; :func:`check_scale_down` is the last guard, shared by every
implementation, that refuses to remove a node still hosting a replica.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol


class ProvisionerError(Exception):
    """Scaling failed or was refused; the message is one readable line."""


@dataclass(frozen=True, slots=True)
class ProvisionedNode:
    """One storage node as the platform sees it (not as ZooKeeper does)."""

    ordinal: int
    ready: bool
    zone: str | None = None
    name: str = ""


class NodeProvisioner(Protocol):
    kind: str

    async def current(self) -> int:
        """The number of storage nodes asked for (the StatefulSet's ``spec.replicas``)."""
        ...

    async def scale_to(self, replicas: int, hosting: Collection[int]) -> None:
        """Ask for ``replicas`` storage nodes; ``hosting`` = broker ids that still host
        replicas (a scale-down removing one of them is refused)."""
        ...

    async def remove(self, ids: Collection[int], hosting: Collection[int]) -> None:
        """Remove these (drained) storage nodes; a StatefulSet can only drop its highest
        ordinals, so other ids are refused there."""
        ...

    async def nodes(self) -> list[ProvisionedNode]:
        """The storage nodes that exist, with their zones when the platform knows them."""
        ...

    async def close(self) -> None: ...


def check_scale_down(current: int, replicas: int, hosting: Collection[int]) -> None:
    """Refuse to remove an ordinal that still hosts a replica."""
    if replicas < 0:
        raise ProvisionerError(f"cannot scale storage to {replicas} nodes")
    removed = sorted(b for b in hosting if replicas <= b < current)
    if replicas < current and removed:
        raise ProvisionerError(
            f"refusing to scale storage from {current} to {replicas} nodes: "
            f"{'node' if len(removed) == 1 else 'nodes'} {', '.join(map(str, removed))} "
            f"still {'hosts' if len(removed) == 1 else 'host'} replicas (drain them first)"
        )


def top_ordinals(current: int, ids: Collection[int]) -> int:
    """The replica count that removes exactly ``ids`` from a StatefulSet of ``current``, or a
    ProvisionerError when they are not its highest ordinals."""
    want = set(range(current - len(set(ids)), current))
    if set(ids) != want:
        raise ProvisionerError(
            f"a StatefulSet of {current} removes only its highest ordinals: remove "
            f"{', '.join(map(str, sorted(want, reverse=True)))} (in that order), not "
            f"{', '.join(map(str, sorted(ids)))}"
        )
    return current - len(want)
