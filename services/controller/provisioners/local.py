"""Storage nodes of the local cluster (``kafka-py cluster up``): a spec in ZooKeeper, applied by
the cluster's supervisor as a StatefulSet controller would.

The active controller writes ``/kafka-py/storage-scale`` ``{"version":1,"replicas":n,
"removed":[ids]}`` (epoch-guarded); the local cluster starts storage processes ``0..n-1`` not in
``removed`` with their own data dirs (kept when a node stops, like a PVC) and stops the others
(services/cli/local_scaler.py). Unlike a StatefulSet it can stop any ordinal, so a
decommissioned node in the middle is ``removed`` until the highest ordinals go.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from services.common.zk import elastic
from services.common.zk.client import AsyncZk
from services.controller.model import LiveBroker
from services.controller.provisioners.base import (
    ProvisionedNode,
    ProvisionerError,
)
from services.controller.zkstore import Create, EpochGuard, SetData


class LocalProvisioner:
    kind = "local"

    def __init__(
        self, zk: AsyncZk, guard: EpochGuard, brokers: Callable[[], dict[int, LiveBroker]]
    ) -> None:
        self.zk = zk
        self.guard = guard
        self.brokers = brokers

    async def _spec(self) -> tuple[elastic.ScaleSpec, int | None]:
        got = await self.zk.get_or_none(elastic.STORAGE_SCALE)
        spec = elastic.ScaleSpec.from_json(got[0]) if got else None
        if spec is None:  # nobody wrote one yet: what runs is the spec
            live = sorted(self.brokers())
            n = live[-1] + 1 if live else 0
            spec = elastic.ScaleSpec(n, tuple(i for i in range(n) if i not in live))
        return spec, (got[1].version if got else None)

    async def _write(self, spec: elastic.ScaleSpec, version: int | None) -> None:
        if version is None:
            await self.guard.commit([Create(elastic.STORAGE_SCALE, spec.to_json())])
        else:
            await self.guard.commit([SetData(elastic.STORAGE_SCALE, spec.to_json(), version)])

    async def current(self) -> int:
        spec, _ = await self._spec()
        return len(spec.running)

    async def scale_to(self, replicas: int, hosting: Collection[int]) -> None:
        """``replicas`` running nodes: new ordinals above the highest, or the highest removed
        (refused while one of them hosts a replica)."""
        spec, version = await self._spec()
        running = spec.running
        if replicas >= len(running):
            n = spec.replicas + (replicas - len(running))
            await self._write(elastic.ScaleSpec(n, spec.removed), version)
            return
        await self.remove(running[replicas:], hosting)

    async def remove(self, ids: Collection[int], hosting: Collection[int]) -> None:
        busy = sorted(set(ids) & set(hosting))
        if busy:
            raise ProvisionerError(
                f"refusing to remove {'node' if len(busy) == 1 else 'nodes'} "
                f"{', '.join(map(str, busy))}: still hosting replicas (drain first)"
            )
        spec, version = await self._spec()
        await self._write(spec.without(ids), version)

    async def nodes(self) -> list[ProvisionedNode]:
        spec, _ = await self._spec()
        live = self.brokers()
        return [
            ProvisionedNode(
                b,
                b in live,
                live[b].registration.rack if b in live else None,
                f"storage-{b}",
            )
            for b in spec.running
        ]

    async def close(self) -> None:
        return None
