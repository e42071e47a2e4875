"""The transaction coordinator process (common's ``CoordinatorProcess`` over
``__transaction_state``: see there for start, readiness, ZooKeeper session loss and SIGTERM).
Producer ids come in blocks from ``/latest_producer_id_block``."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from services.common.coordinator.clients import CoordinatorClients
from services.common.coordinator.markers import MarkerWriter
from services.common.coordinator.process import CoordinatorProcess, serve_coordinator
from services.common.rpc.kafkapy.v1 import transaction_coordinator_pb2_grpc
from services.common.runtime import run
from services.common.zk import layout
from services.common.zk.producer_ids import ProducerIdManager
from services.transaction_coordinator.metrics import TransactionMetrics
from services.transaction_coordinator.server import TransactionCoordinatorService
from services.transaction_coordinator.settings import TransactionCoordinatorSettings
from services.transaction_coordinator.shards import TxnShardManager


class TransactionCoordinatorApp(CoordinatorProcess):
    shards: TxnShardManager
    service: TransactionCoordinatorService

    def __init__(
        self, settings: TransactionCoordinatorSettings, metrics: TransactionMetrics | None = None
    ) -> None:
        super().__init__(layout.TRANSACTION, settings)
        self.metrics = metrics or TransactionMetrics()
        self.group_coordinators = CoordinatorClients(self.cache, layout.GROUP)
        self.shards = TxnShardManager(
            settings.node_id,
            self.cache,
            self.storage,
            settings,
            self.metrics,
            ProducerIdManager(self.zk, settings.node_id),
            MarkerWriter(
                self.cache,
                self.storage,
                settings.transaction_marker_retry_backoff_ms,
                groups=self.group_coordinators,
            ),
            registration=lambda: self.registrar.czxid,
        )
        self.metrics.watch_states(
            lambda: [s for shard in self.shards.loaded_shards() for s in shard.states()]
        )
        self.service = TransactionCoordinatorService(
            self.shards, self._offsets_partition, self.metrics
        )

    def _offsets_partition(self, group_id: str) -> int | None:
        topic = self.cache.topic(layout.CONSUMER_OFFSETS_TOPIC)
        if topic is None or not topic.partitions:
            return None
        return layout.group_partition(group_id, len(topic.partitions))

    async def on_stopping(self) -> None:
        await self.group_coordinators.close()

    def add_servicer(self, server: grpc.aio.Server) -> None:
        transaction_coordinator_pb2_grpc.add_TransactionCoordinatorServicer_to_server(
            self.service, server
        )


async def main(argv: Sequence[str] | None = None) -> int:
    return await serve_coordinator(
        "transaction-coordinator", TransactionCoordinatorSettings, TransactionCoordinatorApp, argv
    )


def cli() -> None:
    run(main)
