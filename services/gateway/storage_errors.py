"""Kafka error codes for failed storage RPCs (counted in the gateway's metrics)."""

from __future__ import annotations

import grpc

from services.common.errors import ErrorCode
from services.common.rpc_status import connection_broke
from services.gateway.metrics import STORAGE_RPC_ERRORS


def rpc_error_code(
    method: str, exc: BaseException, timed_out: ErrorCode = ErrorCode.REQUEST_TIMED_OUT
) -> ErrorCode:
    """Kafka error for a failed storage call: retriable where a metadata refresh may help.

    ``timed_out`` is the answer to a call past its deadline: REQUEST_TIMED_OUT suits the APIs
    whose responses carry it in Kafka (Produce, DeleteRecords...), not every API."""
    if isinstance(exc, grpc.aio.AioRpcError):
        status = exc.code()
        STORAGE_RPC_ERRORS.labels(method, status.name).inc()
        if status == grpc.StatusCode.DEADLINE_EXCEEDED:
            return timed_out
        if status == grpc.StatusCode.CANCELLED or connection_broke(status, exc.details()):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_SERVER_ERROR
    STORAGE_RPC_ERRORS.labels(method, type(exc).__name__).inc()
    return ErrorCode.UNKNOWN_SERVER_ERROR
