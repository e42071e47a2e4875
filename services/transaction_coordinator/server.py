"""The ``TransactionCoordinator`` gRPC service: the transaction APIs (``api``) behind common's
``ForwardService``."""

from __future__ import annotations

from typing import Protocol

from services.common.coordinator.forward import Body, ForwardedApis, ForwardService
from services.common.rpc.kafkapy.v1 import transaction_coordinator_pb2_grpc
from services.common.txn_errors import API_NAMES, error_response, transactional_ids
from services.transaction_coordinator import api
from services.transaction_coordinator.metrics import TransactionMetrics


class ShardSettler(api.ShardLookup, Protocol):
    async def settle(self, keys: list[str], timeout_s: float) -> None: ...


class TransactionCoordinatorService(
    ForwardService, transaction_coordinator_pb2_grpc.TransactionCoordinatorServicer
):
    def __init__(
        self,
        shards: ShardSettler,
        offsets_partition: api.OffsetsPartitions,
        metrics: TransactionMetrics,
    ) -> None:
        async def handle(key: int, version: int, body: Body, client_id: str, host: str) -> Body:
            return await api.handle(shards, offsets_partition, key, version, body)

        apis = ForwardedApis(
            names=API_NAMES,
            supports=api.supports,
            handle=handle,
            error_response=error_response,
            keys=transactional_ids,
        )
        super().__init__(shards, apis, metrics.request_ms)
