"""WriteTxnMarkers (v1), as Kafka's Admin.abortTransaction sends it (``kafka-py transactions
abort``): each marker's partitions go to their leaders' Storage.WriteTxnMarkers, which append
the COMMIT/ABORT control batch with the producer state's epoch and coordinator-epoch checks
and answer once it is replicated. The transaction coordinator writes its markers straight to
storage; this is the operator's path to close a hanging transaction."""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.leader_calls import PartitionKey, ask_leaders, by_topic
from services.gateway.storage_errors import rpc_error_code

MARKER_TIMEOUT_MS = 30_000  # how long a leader waits for the markers' replication (Kafka's default)


def _partition(index: int, code: ErrorCode | int) -> Body:
    return {"partition_index": index, "error_code": int(code)}


async def _marker(ctx: RequestContext, marker: Body) -> Body:
    s = ctx.services
    wanted: dict[PartitionKey, None] = dict.fromkeys(
        (t["name"], int(p)) for t in marker.get("topics") or () for p in t["partition_indexes"]
    )

    def call(node: int, items: list[pb.TxnMarkerPartition]) -> Any:
        request = pb.WriteTxnMarkersRequest(
            markers=[
                pb.WritableTxnMarker(
                    producer_id=marker["producer_id"],
                    producer_epoch=marker["producer_epoch"],
                    transaction_result=bool(marker["transaction_result"]),
                    coordinator_epoch=marker["coordinator_epoch"],
                    partitions=items,
                )
            ],
            timeout_ms=MARKER_TIMEOUT_MS,
        )
        return _call(s, node, request)

    results = await ask_leaders(
        s,
        ((key, pb.TxnMarkerPartition(topic=key[0], partition=key[1])) for key in wanted),
        call,
        lambda index, r: _partition(index, r.error_code),
        _partition,
    )
    return {"producer_id": marker["producer_id"], "topics": by_topic(results, "name")}


async def _call(
    s: GatewayServices, node: int, request: pb.WriteTxnMarkersRequest
) -> dict[PartitionKey, Any] | ErrorCode:
    """Storage.WriteTxnMarkers on ``node``: its results of the one marker by partition, or the
    Kafka error for all of them (as ``leader_calls.call_leader``; the answer nests the
    partitions under the marker)."""
    stub = s.storage.stub(node)
    if stub is None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    # the node answers once the markers are replicated (by MARKER_TIMEOUT_MS), plus a hop
    timeout_s = MARKER_TIMEOUT_MS / 1000.0 + s.request_timeout_s
    try:
        resp = await stub.WriteTxnMarkers(request, timeout=timeout_s)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - any RPC failure becomes a partition error
        return rpc_error_code("WriteTxnMarkers", exc)
    return {(r.topic, r.partition): r for m in resp.markers for r in m.partitions}


async def handle(ctx: RequestContext, req: Body) -> Body:
    markers = await asyncio.gather(*(_marker(ctx, m) for m in req.get("markers") or ()))
    return {"markers": list(markers)}


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {
        "markers": [
            {
                "producer_id": m["producer_id"],
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [_partition(p, code) for p in t["partition_indexes"]],
                    }
                    for t in m.get("topics") or ()
                ],
            }
            for m in req.get("markers") or ()
        ]
    }


HANDLER = ApiHandler(ApiKey.WRITE_TXN_MARKERS, "WriteTxnMarkers", handle, error_response)
