"""DescribeCluster (v0-1): the brokers of Metadata (the gateways, and storage node ids served by
a gateway in their zone); this gateway is "the controller"."""

from __future__ import annotations

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.gateway.context import RequestContext
from services.gateway.handlers.base import (
    CLUSTER_OPERATIONS,
    OPERATIONS_NOT_REQUESTED,
    ApiHandler,
    Body,
)
from services.gateway.handlers.metadata import client_brokers

BROKERS_ENDPOINT = 1


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    if req.get("endpoint_type", BROKERS_ENDPOINT) != BROKERS_ENDPOINT:
        return error_response(
            req,
            ctx.api_version,
            ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            "The request was sent to an endpoint of type BROKER, but we "
            "wanted an endpoint of type CONTROLLER",
        )
    return {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": BROKERS_ENDPOINT,
        "cluster_id": s.cache.cluster_id or "",
        "controller_id": s.node_id,
        "brokers": [
            {"broker_id": ep.node_id, "host": ep.host, "port": ep.port, "rack": ep.rack}
            for _, ep in sorted(client_brokers(ctx).items())
        ],
        "cluster_authorized_operations": (
            CLUSTER_OPERATIONS
            if req.get("include_cluster_authorized_operations")
            else OPERATIONS_NOT_REQUESTED
        ),
    }


def error_response(req: Body, version: int, code: ErrorCode, message: str | None = None) -> Body:
    return {
        "throttle_time": 0,
        "error_code": int(code),
        "error_message": message,
        "endpoint_type": BROKERS_ENDPOINT,
        "cluster_id": "",
        "controller_id": -1,
        "brokers": [],
    }


HANDLER = ApiHandler(ApiKey.DESCRIBE_CLUSTER, "DescribeCluster", handle, error_response)
