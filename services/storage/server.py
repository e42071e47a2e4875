"""The ``kafkapy.v1.Storage`` gRPC service (grpc.aio): thin adapters over the replica manager."""

from __future__ import annotations

import time
from typing import Any

import grpc

from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.rpc.kafkapy.v1 import storage_pb2_grpc as pb_grpc
from services.storage.appends import append, append_now, finish_append
from services.storage.delete_records import delete_records
from services.storage.epochs import offset_for_leader_epoch
from services.storage.exchange import ExchangeStreams, serve_exchange
from services.storage.fetches import fetch
from services.storage.log_dir_info import describe_log_dirs
from services.storage.offsets import list_offsets
from services.storage.producers import describe_producers
from services.storage.replica_manager import ReplicaManager
from services.storage.txn_markers import write_txn_markers
from services.storage.wire import (
    APPEND,
    FETCH,
    AppendCall,
    FetchReply,
    fetch_response_bytes,
    parse_append_request,
    parse_exchange_requests,
)

log = get_logger("storage.server")


class StorageService(pb_grpc.StorageServicer):
    """Request names in the latency histogram are Kafka's (RequestMetrics ``request`` tag)."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        self.exchanges = ExchangeStreams()  # ended by the node as it stops

    async def Append(
        self, request: pb.AppendRequest | AppendCall, context: Any
    ) -> pb.AppendResponse:
        with self.rm.metrics.timed("Produce"):
            return await append(self.rm, request)

    def append_now(self, request: AppendCall, context: Any) -> Any:
        """Append in the Exchange's reader (exchange.py): the appends are made at once, in the
        order the calls arrive; the answer, or for acks=-1 a coroutine that waits for the ISR
        and gives it. Timed as the unary Append is."""
        timer = self.rm.metrics.request_timer("Produce")
        start = time.perf_counter()
        try:
            results, pending = append_now(self.rm, request)
        except BaseException:
            timer.observe((time.perf_counter() - start) * 1000.0)
            raise
        if not pending:
            timer.observe((time.perf_counter() - start) * 1000.0)
            return pb.AppendResponse(partitions=results)
        return self._replicated(results, pending, request.timeout_ms, timer, start)

    async def _replicated(
        self, results: Any, pending: Any, timeout_ms: int, timer: Any, start: float
    ) -> pb.AppendResponse:
        try:
            return await finish_append(self.rm, results, pending, timeout_ms)
        finally:
            timer.observe((time.perf_counter() - start) * 1000.0)

    async def Fetch(  # type: ignore[override]  # answers a wire.FetchReply (see below)
        self, request: pb.FetchRequest, context: Any
    ) -> FetchReply:
        name = "FetchFollower" if request.replica_id >= 0 else "FetchConsumer"
        with self.rm.metrics.timed(name):
            return await fetch(self.rm, request)

    async def Exchange(self, request_iterator: Any, context: Any) -> None:  # type: ignore[override]
        """Append and Fetch multiplexed on one stream (services/storage/exchange.py)."""
        await serve_exchange(
            {APPEND: self.Append, FETCH: self.Fetch},
            context,
            self.exchanges,
            self.rm.metrics,
            inline={APPEND: self.append_now},
        )

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: Any
    ) -> pb.ListOffsetsResponse:
        with self.rm.metrics.timed("ListOffsets"):
            return list_offsets(self.rm, request)

    async def DeleteRecords(
        self, request: pb.DeleteRecordsRequest, context: Any
    ) -> pb.DeleteRecordsResponse:
        with self.rm.metrics.timed("DeleteRecords"):
            return await delete_records(self.rm, request)

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

    async def WriteTxnMarkers(
        self, request: pb.WriteTxnMarkersRequest, context: Any
    ) -> pb.WriteTxnMarkersResponse:
        with self.rm.metrics.timed("WriteTxnMarkers"):
            return await write_txn_markers(self.rm, request)

    async def DescribeLogDirs(
        self, request: pb.DescribeLogDirsRequest, context: Any
    ) -> pb.DescribeLogDirsResponse:
        with self.rm.metrics.timed("DescribeLogDirs"):
            return await describe_log_dirs(self.rm, request)

    async def DescribeProducers(
        self, request: pb.DescribeProducersRequest, context: Any
    ) -> pb.DescribeProducersResponse:
        with self.rm.metrics.timed("DescribeProducers"):
            return describe_producers(self.rm, request)


def add_storage_service(server: grpc.aio.Server, rm: ReplicaManager) -> StorageService:
    service = StorageService(rm)
    handlers = {}
    for method in pb.DESCRIPTOR.services_by_name["Storage"].methods:
        request_type = getattr(pb, method.input_type.name)
        response_type = getattr(pb, method.output_type.name)
        if method.name == "Exchange":
            # requests parsed by wire.parse_exchange_requests, answers written as buffers
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                service.Exchange,
                request_deserializer=parse_exchange_requests,
                response_serializer=b"".join,
            )
            continue
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            getattr(service, method.name),
            # Append reads into a wire.AppendCall (each record set copied once, to a bytearray);
            # Fetch answers a wire.FetchReply (each record set copied once, when written)
            request_deserializer=(
                parse_append_request if method.name == "Append" else request_type.FromString
            ),
            response_serializer=(
                fetch_response_bytes if method.name == "Fetch" else response_type.SerializeToString
            ),
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("kafkapy.v1.Storage", handlers),)
    )
    server.add_registered_method_handlers("kafkapy.v1.Storage", handlers)
    return service
