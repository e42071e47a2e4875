"""gRPC ``kafkapy.v1.Controller``: served by every controller, answered by the active one.

A standby (or a controller whose term ends mid-request) answers NOT_CONTROLLER for every topic,
so callers look up the active controller and retry, as Kafka clients do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import controller_pb2 as pb
from services.common.rpc.kafkapy.v1 import controller_pb2_grpc
from services.controller.controlled_shutdown import ControlledShutdowns
from services.controller.core import NotControllerError

if TYPE_CHECKING:
    from services.controller.admin import AdminOps

log = get_logger("controller.service")

R = TypeVar("R")


def _topic_results(names: list[str], code: ErrorCode, message: str) -> list[pb.TopicResult]:
    return [pb.TopicResult(name=n, error_code=int(code), error_message=message) for n in names]


class ControllerService(controller_pb2_grpc.ControllerServicer):
    def __init__(self, admin: Callable[[], AdminOps | None]) -> None:
        """``admin``: the active term's operations, None while this controller is standby."""
        self._admin = admin

    async def _serve(
        self,
        rpc: str,
        op: Callable[[AdminOps], Awaitable[R]],
        reject: Callable[[ErrorCode, str], R],
    ) -> R:
        admin = self._admin()
        if admin is None:
            return reject(ErrorCode.NOT_CONTROLLER, "")
        try:
            return await op(admin)
        except NotControllerError:
            return reject(ErrorCode.NOT_CONTROLLER, "")
        except Exception as exc:  # noqa: BLE001 - answered as Kafka's UNKNOWN_SERVER_ERROR
            log.exception("request failed", rpc=rpc)
            return reject(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    async def CreateTopics(
        self, request: pb.CreateTopicsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CreateTopicsResponse:
        names = [t.name for t in request.topics]
        return await self._serve(
            "CreateTopics",
            lambda a: a.create_topics(request),
            lambda code, msg: pb.CreateTopicsResponse(topics=_topic_results(names, code, msg)),
        )

    async def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteTopicsResponse:
        names = list(request.names)
        return await self._serve(
            "DeleteTopics",
            lambda a: a.delete_topics(request),
            lambda code, msg: pb.DeleteTopicsResponse(topics=_topic_results(names, code, msg)),
        )

    async def CreatePartitions(
        self, request: pb.CreatePartitionsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CreatePartitionsResponse:
        names = [t.name for t in request.topics]
        return await self._serve(
            "CreatePartitions",
            lambda a: a.create_partitions(request),
            lambda code, msg: pb.CreatePartitionsResponse(topics=_topic_results(names, code, msg)),
        )

    async def CreateInternalTopic(
        self, request: pb.CreateInternalTopicRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CreateInternalTopicResponse:
        return await self._serve(
            "CreateInternalTopic",
            lambda a: a.create_internal_topic(request),
            lambda code, msg: pb.CreateInternalTopicResponse(
                error_code=int(code), error_message=msg
            ),
        )

    async def ElectLeaders(
        self, request: pb.ElectLeadersRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ElectLeadersResponse:
        return await self._serve(
            "ElectLeaders",
            lambda a: a.elect_leaders(request),
            lambda code, msg: pb.ElectLeadersResponse(error_code=int(code), error_message=msg),
        )

    async def ControlledShutdown(
        self, request: pb.ControlledShutdownRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ControlledShutdownResponse:
        return await self._serve(
            "ControlledShutdown",
            lambda a: ControlledShutdowns(a.c).handle(request),
            lambda code, msg: pb.ControlledShutdownResponse(
                error_code=int(code), error_message=msg
            ),
        )

    async def AlterConfigs(
        self, request: pb.AlterConfigsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AlterConfigsResponse:
        def reject(code: ErrorCode, msg: str) -> pb.AlterConfigsResponse:
            return pb.AlterConfigsResponse(
                resources=[
                    pb.ConfigResourceResult(
                        resource_type=r.resource_type,
                        name=r.name,
                        error_code=int(code),
                        error_message=msg,
                    )
                    for r in request.resources
                ]
            )

        return await self._serve("AlterConfigs", lambda a: a.alter_configs(request), reject)

    async def AlterPartitionReassignments(
        self,
        request: pb.AlterPartitionReassignmentsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.AlterPartitionReassignmentsResponse:
        return await self._serve(
            "AlterPartitionReassignments",
            lambda a: a.alter_partition_reassignments(request),
            lambda code, msg: pb.AlterPartitionReassignmentsResponse(
                error_code=int(code), error_message=msg
            ),
        )

    async def ListPartitionReassignments(
        self,
        request: pb.ListPartitionReassignmentsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> pb.ListPartitionReassignmentsResponse:
        return await self._serve(
            "ListPartitionReassignments",
            lambda a: a.list_partition_reassignments(request),
            lambda code, msg: pb.ListPartitionReassignmentsResponse(
                error_code=int(code), error_message=msg
            ),
        )
