"""The ``kafkapy.v1.Storage`` gRPC service (grpc.aio): thin adapters over the replica manager."""

from __future__ import annotations

from typing import Any

import grpc

from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.rpc.kafkapy.v1 import storage_pb2_grpc as pb_grpc
from services.storage.appends import append
from services.storage.epochs import offset_for_leader_epoch
from services.storage.fetches import fetch
from services.storage.offsets import list_offsets
from services.storage.replica_manager import ReplicaManager

log = get_logger("storage.server")


class StorageService(pb_grpc.StorageServicer):
    """Request names in the latency histogram are Kafka's (RequestMetrics ``request`` tag)."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm

    async def Append(self, request: pb.AppendRequest, context: Any) -> pb.AppendResponse:
        with self.rm.metrics.timed("Produce"):
            return await append(self.rm, request)

    async def Fetch(self, request: pb.FetchRequest, context: Any) -> pb.FetchResponse:
        name = "FetchFollower" if request.replica_id >= 0 else "FetchConsumer"
        with self.rm.metrics.timed(name):
            return await fetch(self.rm, request)

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: Any
    ) -> pb.ListOffsetsResponse:
        with self.rm.metrics.timed("ListOffsets"):
            return list_offsets(self.rm, request)

    async def UpdatePartitions(
        self, request: pb.UpdatePartitionsRequest, context: Any
    ) -> pb.UpdatePartitionsResponse:
        with self.rm.metrics.timed("LeaderAndIsr"):
            return await self.rm.update_partitions(request)

    async def StopReplicas(
        self, request: pb.StopReplicasRequest, context: Any
    ) -> pb.StopReplicasResponse:
        with self.rm.metrics.timed("StopReplica"):
            return await self.rm.stop_replicas(request)

    async def OffsetForLeaderEpoch(
        self, request: pb.OffsetForLeaderEpochRequest, context: Any
    ) -> pb.OffsetForLeaderEpochResponse:
        with self.rm.metrics.timed("OffsetForLeaderEpoch"):
            return offset_for_leader_epoch(self.rm, request)


def add_storage_service(server: grpc.aio.Server, rm: ReplicaManager) -> StorageService:
    service = StorageService(rm)
    pb_grpc.add_StorageServicer_to_server(service, server)
    return service
