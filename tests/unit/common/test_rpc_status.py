"""Which gRPC statuses mean that the connection to a node broke."""

from __future__ import annotations

import grpc
import pytest

from services.common.errors import ErrorCode
from services.common.rpc_status import connection_broke
from services.gateway.storage_errors import rpc_error_code


@pytest.mark.parametrize(
    ("code", "details", "broke"),
    [
        (grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses", True),
        (grpc.StatusCode.UNKNOWN, "Stream removed", True),
        (grpc.StatusCode.INTERNAL, "Received RST_STREAM with error code 2", True),
        (grpc.StatusCode.UNKNOWN, "Socket closed", True),
        (grpc.StatusCode.UNKNOWN, "Unexpected <class 'ValueError'>: disk on fire", False),
        (grpc.StatusCode.INTERNAL, "Exception serializing response!", False),
        (grpc.StatusCode.INVALID_ARGUMENT, "Stream removed", False),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", False),
    ],
)
def test_connection_broke(code: grpc.StatusCode, details: str, broke: bool) -> None:
    assert connection_broke(code, details) is broke


def _error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_error(grpc.StatusCode.UNKNOWN, "Stream removed"), ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (_error(grpc.StatusCode.UNAVAILABLE, "Socket closed"), ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (_error(grpc.StatusCode.CANCELLED, "Cancelled"), ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline"), ErrorCode.REQUEST_TIMED_OUT),
        (_error(grpc.StatusCode.UNKNOWN, "Unexpected ValueError"), ErrorCode.UNKNOWN_SERVER_ERROR),
        (RuntimeError("bug"), ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_the_gateway_answers_a_broken_connection_with_a_retriable_error(
    error: BaseException, expected: ErrorCode
) -> None:
    assert rpc_error_code("Append", error) == expected
