"""DescribeLogDirs (v1-4; flexible from v2, total/usable bytes from v4): the log dirs of the
storage nodes this gateway serves, each asked with one Storage.DescribeLogDirs.

A client addresses a broker id, but ids at one address reach the same gateway, which cannot tell
which of them the client meant (decision "DescribeLogDirs answers for the storage nodes a gateway
serves"). So a gateway answers for every storage node ``routing.storage_served_by`` places at it,
and names each dir ``storage-<id>:<path>``: asking every gateway (or every broker id and keeping
one answer per storage id, as ``kafka-py log-dirs`` does) sees each storage node exactly once.
A node that does not answer is left out (logged); a failed dir answers KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from services.common.errors import ErrorCode
from services.common.log_dir_names import dir_name
from services.common.logging import get_logger
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.handlers.metadata import live_gateways
from services.gateway.routing import storage_served_by
from services.gateway.storage_errors import rpc_error_code

log = get_logger("gateway.describe_log_dirs")


def storage_request(topics: list[Body] | None) -> pb.DescribeLogDirsRequest:
    if topics is None:
        return pb.DescribeLogDirsRequest(all_topics=True)
    return pb.DescribeLogDirsRequest(
        topics=[
            pb.DescribeLogDirsTopic(topic=t["topic"], partitions=t["partitions"]) for t in topics
        ]
    )


async def _ask(
    s: GatewayServices, node: int, req: pb.DescribeLogDirsRequest
) -> pb.DescribeLogDirsResponse | None:
    stub = s.storage.stub(node)
    if stub is None:
        log.info("storage node not registered, its log dirs left out", broker=node)
        return None
    try:
        resp: pb.DescribeLogDirsResponse = await stub.DescribeLogDirs(
            req, timeout=s.request_timeout_s
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - an unreachable node is left out of the answer
        code = rpc_error_code("DescribeLogDirs", exc)
        log.warning("storage node did not describe its log dirs", broker=node, error=code.name)
        return None
    return resp


def _result(broker_id: int, d: pb.LogDirInfo) -> Body:
    topics: dict[str, list[Body]] = {}
    for r in d.replicas:
        topics.setdefault(r.topic, []).append(
            {
                "partition_index": r.partition,
                "partition_size": r.size,
                "offset_lag": r.offset_lag,
                "is_future_key": r.is_future,
            }
        )
    return {
        "error_code": d.error_code,
        "log_dir": dir_name(broker_id, d.path),
        "topics": [{"name": name, "partitions": parts} for name, parts in sorted(topics.items())],
        "total_bytes": d.total_bytes,
        "usable_bytes": d.usable_bytes,
        "is_cordoned": False,
    }


def results(answers: Iterable[pb.DescribeLogDirsResponse | None]) -> list[Body]:
    return [_result(a.broker_id, d) for a in answers if a is not None for d in a.log_dirs]


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    racks = {node_id: reg.rack for node_id, reg in s.cache.brokers.items()}
    nodes = storage_served_by(live_gateways(s), racks, s.node_id)
    request = storage_request(req.get("topics"))
    answers = await asyncio.gather(*(_ask(s, n, request) for n in nodes))
    return {"throttle_time": 0, "error_code": 0, "results": results(answers)}


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {"throttle_time": 0, "error_code": int(code), "results": []}


HANDLER = ApiHandler(ApiKey.DESCRIBE_LOG_DIRS, "DescribeLogDirs", handle, error_response)
