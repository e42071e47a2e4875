"""The group coordinator process (common's ``CoordinatorProcess`` over ``__consumer_offsets``:
see there for start, readiness, ZooKeeper session loss and SIGTERM)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping, Sequence

import grpc

from services.common.coordinator.process import CoordinatorProcess, serve_coordinator
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2_grpc
from services.common.runtime import run
from services.common.zk import layout
from services.group_coordinator.config import GroupConfig
from services.group_coordinator.lag import LagTracker
from services.group_coordinator.metrics import CoordinatorMetrics
from services.group_coordinator.server import GroupCoordinatorService
from services.group_coordinator.settings import GroupCoordinatorSettings
from services.group_coordinator.shards import ShardManager

log = get_logger("group_coordinator")


class GroupCoordinatorApp(CoordinatorProcess):
    shards: ShardManager
    service: GroupCoordinatorService

    def __init__(
        self, settings: GroupCoordinatorSettings, metrics: CoordinatorMetrics | None = None
    ) -> None:
        super().__init__(layout.GROUP, settings)
        self.metrics = metrics or CoordinatorMetrics()
        self.shards = ShardManager(
            settings.node_id,
            self.cache,
            self.storage,
            settings,
            GroupConfig.from_settings(settings),
            self.metrics,
            registration=lambda: self.registrar.czxid,
            topic_exists=self._topic_exists,
        )
        self.cache.on_topic_removed(self.shards.on_topic_removed)
        self.metrics.watch_groups(
            lambda: [s for shard in self.shards.loaded_shards() for s in shard.group_states()]
        )
        self.service = GroupCoordinatorService(self.shards, self.metrics)
        self.lag = LagTracker(
            self.cache, self.storage, self._committed, settings.request_timeout_ms / 1000.0
        )
        self.metrics.registry.register(self.lag.collector())
        self._lag_interval_s = settings.consumer_lag_refresh_interval_ms / 1000.0
        self._lag_task: asyncio.Task[None] | None = None

    def _committed(self) -> Iterator[tuple[str, Mapping[tuple[str, int], int]]]:
        for shard in self.shards.loaded_shards():
            for group_id, group in list(shard.groups.items()):
                yield group_id, {tp: o.offset for tp, o in list(group.offsets.items())}

    async def on_started(self) -> None:
        self._lag_task = asyncio.create_task(self.lag.run(self._lag_interval_s), name="lag")

    async def on_stopping(self) -> None:
        if self._lag_task is not None:
            self._lag_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lag_task

    def add_servicer(self, server: grpc.aio.Server) -> None:
        group_coordinator_pb2_grpc.add_GroupCoordinatorServicer_to_server(self.service, server)

    async def _topic_exists(self, topic: str) -> bool:
        return await self.zk.exists(layout.topic_path(topic)) is not None


async def main(argv: Sequence[str] | None = None) -> int:
    return await serve_coordinator(
        "group-coordinator", GroupCoordinatorSettings, GroupCoordinatorApp, argv
    )


def cli() -> None:
    run(main)
