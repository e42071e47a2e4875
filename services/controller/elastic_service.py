"""gRPC ``kafkapy.v1.Elastic``: decommission and the autoscaler's status, answered by the active
controller (a standby, or a term ending mid-request, answers NOT_CONTROLLER)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import grpc

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import elastic_pb2 as pb
from services.common.rpc.kafkapy.v1 import elastic_pb2_grpc
from services.controller.core import NotControllerError
from services.controller.elastic import ElasticError, ElasticStorage

log = get_logger("controller.elastic_service")


class ElasticService(elastic_pb2_grpc.ElasticServicer):
    def __init__(self, elastic: Callable[[], ElasticStorage | None]) -> None:
        self._elastic = elastic

    async def Decommission(
        self, request: pb.DecommissionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DecommissionResponse:
        e = self._elastic()
        if e is None:
            return pb.DecommissionResponse(error_code=int(ErrorCode.NOT_CONTROLLER))
        try:
            plan = await e.decommission(list(request.broker_ids), dry_run=request.dry_run)
        except ElasticError as exc:
            return pb.DecommissionResponse(
                error_code=int(ErrorCode.INVALID_REQUEST), error_message=str(exc)
            )
        except NotControllerError:
            return pb.DecommissionResponse(error_code=int(ErrorCode.NOT_CONTROLLER))
        except Exception as exc:  # noqa: BLE001 - answered, never raised into grpc
            log.exception("decommission failed")
            return pb.DecommissionResponse(
                error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR),
                error_message=f"{type(exc).__name__}: {exc}",
            )
        return pb.DecommissionResponse(plan_json=json.dumps(plan.summary()))

    async def AutoscalerStatus(
        self, request: pb.AutoscalerStatusRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AutoscalerStatusResponse:
        e = self._elastic()
        if e is None:
            return pb.AutoscalerStatusResponse(error_code=int(ErrorCode.NOT_CONTROLLER))
        try:
            return pb.AutoscalerStatusResponse(status_json=e.status_json())
        except Exception as exc:  # noqa: BLE001
            log.exception("autoscaler status failed")
            return pb.AutoscalerStatusResponse(
                error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR),
                error_message=f"{type(exc).__name__}: {exc}",
            )
