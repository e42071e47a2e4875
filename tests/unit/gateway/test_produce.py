"""Produce handler: validation, one Append per storage node, result mapping, failures."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import grpc

from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey
from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import storage_pb2 as spb
from services.gateway.handlers import produce

from .fakes import FakeStorage, add_brokers, add_topic, context, services

BATCH = build_batch([Record(value=b"hello"), Record(value=b"world")])


def _cache() -> MetadataCache:
    cache = MetadataCache()
    add_brokers(cache, 11, 12)
    add_topic(cache, "a", {0: [11, 12], 1: [12, 11], 2: [11, 12]})
    add_topic(cache, "b", {0: [12, 11]}, config={"max.message.bytes": "60"})
    add_topic(cache, "c", {0: [13]})  # leader 13 is not registered
    add_topic(cache, "__consumer_offsets", {0: [11]})
    return cache


def _req(*parts: tuple[str, int, Any], acks: int = -1, txn: str | None = None) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, index, records in parts:
        topics.setdefault(name, []).append({"index": index, "records": memoryview(records)})
    return {
        "transactional_id": txn,
        "acks": acks,
        "timeout": 1000,
        "topic_data": [{"name": n, "partition_data": p} for n, p in topics.items()],
    }


def _codes(resp: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {
        (t["name"], p["index"]): p["error_code"]
        for t in resp["responses"]
        for p in t["partition_responses"]
    }


async def test_one_append_per_node_and_results_mapped() -> None:
    svc = services(_cache())
    req = _req(
        ("a", 0, BATCH),
        ("a", 1, BATCH),
        ("a", 2, BATCH),
        ("b", 0, BATCH[:80]),
        ("nope", 0, BATCH),
        ("a", 9, BATCH),
        txn=None,
    )
    # b/0 is a truncated batch: rejected before any RPC
    resp = await produce.handle(context(svc, ApiKey.PRODUCE, 9), req)
    assert resp is not None
    codes = _codes(resp)
    assert codes == {
        ("a", 0): 0,
        ("a", 1): 0,
        ("a", 2): 0,
        ("b", 0): ErrorCode.CORRUPT_MESSAGE,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("a", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    storage: FakeStorage = svc.storage  # type: ignore[assignment]
    calls = {
        n: [(c, [(p.topic, p.partition) for p in r.partitions]) for c, r in node.calls]
        for n, node in storage.nodes.items()
    }
    assert calls == {11: [("Append", [("a", 0), ("a", 2)])], 12: [("Append", [("a", 1)])]}
    append = storage.nodes[11].calls[0][1]
    assert append.acks == -1 and append.timeout_ms == 1000 and append.partitions[0].records == BATCH
    by_part = {
        (t["name"], p["index"]): p for t in resp["responses"] for p in t["partition_responses"]
    }
    assert by_part[("a", 2)]["base_offset"] == 101 and by_part[("a", 0)]["base_offset"] == 100
    assert by_part[("a", 1)]["log_start_offset"] == 0


async def test_invalid_acks() -> None:
    svc = services(_cache())
    resp = await produce.handle(context(svc, ApiKey.PRODUCE, 9), _req(("a", 0, BATCH), acks=2))
    assert _codes(resp) == {("a", 0): ErrorCode.INVALID_REQUIRED_ACKS}  # type: ignore[arg-type]
    assert not svc.storage.nodes  # type: ignore[attr-defined]


async def test_record_checks() -> None:
    svc = services(_cache())
    old_magic = bytearray(BATCH)
    old_magic[16] = 1
    zstd = bytearray(BATCH)
    struct.pack_into(">h", zstd, 21, 4)
    req = _req(
        ("a", 0, BATCH + BATCH),
        ("a", 1, bytes(old_magic)),
        ("a", 2, bytes(zstd)),
        ("b", 0, BATCH),
        ("__consumer_offsets", 0, BATCH),
        ("c", 0, BATCH),
    )
    resp = await produce.handle(context(svc, ApiKey.PRODUCE, 6), req)
    assert _codes(resp) == {  # type: ignore[arg-type]
        ("a", 0): ErrorCode.INVALID_RECORD,
        ("a", 1): ErrorCode.INVALID_RECORD,
        ("a", 2): ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
        ("b", 0): ErrorCode.MESSAGE_TOO_LARGE,  # topic max.message.bytes=60
        ("__consumer_offsets", 0): ErrorCode.INVALID_TOPIC_EXCEPTION,
        ("c", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER,  # storage leader not registered
    }
    assert not svc.storage.nodes  # type: ignore[attr-defined]
    # the same zstd batch is fine from v7 on
    resp = await produce.handle(context(svc, ApiKey.PRODUCE, 7), _req(("a", 2, bytes(zstd))))
    assert _codes(resp) == {("a", 2): 0}  # type: ignore[arg-type]


async def test_message_max_bytes_setting_is_the_default_limit() -> None:
    svc = services(_cache(), message_max_bytes=50)
    resp = await produce.handle(context(svc, ApiKey.PRODUCE, 9), _req(("a", 0, BATCH)))
    assert _codes(resp) == {("a", 0): ErrorCode.MESSAGE_TOO_LARGE}  # type: ignore[arg-type]


def _rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "x")


async def test_rpc_failures_and_storage_errors() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]

    async def unavailable(request: Any) -> Any:
        raise _rpc_error(grpc.StatusCode.UNAVAILABLE)

    async def storage_error(request: Any) -> Any:
        return spb.AppendResponse(
            partitions=[
                spb.PartitionAppendResult(
                    topic=p.topic,
                    partition=p.partition,
                    error_code=ErrorCode.NOT_ENOUGH_REPLICAS,
                    error_message="only 1 in sync",
                    base_offset=-1,
                    log_start_offset=-1,
                )
                for p in request.partitions
            ]
        )

    storage.node(11).append_handler = unavailable
    storage.node(12).append_handler = storage_error
    resp = await produce.handle(
        context(svc, ApiKey.PRODUCE, 9), _req(("a", 0, BATCH), ("a", 1, BATCH))
    )
    parts = {p["index"]: p for p in resp["responses"][0]["partition_responses"]}  # type: ignore[index]
    assert parts[0]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert parts[1]["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert parts[1]["error_message"] == "only 1 in sync"

    async def deadline(request: Any) -> Any:
        raise _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED)

    storage.node(11).append_handler = deadline
    resp = await produce.handle(context(svc, ApiKey.PRODUCE, 9), _req(("a", 0, BATCH)))
    assert _codes(resp) == {("a", 0): ErrorCode.REQUEST_TIMED_OUT}  # type: ignore[arg-type]


async def test_acks0_fires_appends_and_answers_nothing() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]
    appended = asyncio.Event()

    async def slow(request: Any) -> Any:
        await asyncio.sleep(0.05)
        appended.set()
        return spb.AppendResponse()

    storage.node(11).append_handler = slow
    resp = await produce.handle(
        context(svc, ApiKey.PRODUCE, 9), _req(("a", 0, BATCH), acks=0, txn="tx-1")
    )
    assert resp is None
    await asyncio.wait_for(appended.wait(), 1.0)
    request = storage.nodes[11].calls[0][1]
    assert request.acks == 0 and request.transactional_id == "tx-1"


async def test_error_response_covers_every_partition() -> None:
    req = _req(("a", 0, BATCH), ("b", 3, BATCH))
    resp = produce.error_response(req, 9, ErrorCode.UNKNOWN_SERVER_ERROR)
    assert _codes(resp) == {("a", 0): -1, ("b", 3): -1}


async def test_acks0_failure_closes_the_connection() -> None:
    svc = services(_cache())
    storage: FakeStorage = svc.storage  # type: ignore[assignment]
    closed: list[str] = []

    async def failing(request: Any) -> Any:
        return spb.AppendResponse(
            partitions=[
                spb.PartitionAppendResult(
                    topic=p.topic,
                    partition=p.partition,
                    error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                )
                for p in request.partitions
            ]
        )

    storage.node(11).append_handler = failing
    ctx = context(svc, ApiKey.PRODUCE, 9)
    ctx.close = closed.append
    # a synchronous error (unknown topic) closes at once
    assert await produce.handle(ctx, _req(("nope", 0, BATCH), acks=0)) is None
    assert closed == ["acks=0 produce failed: UNKNOWN_TOPIC_OR_PARTITION"]
    # an error from storage closes when the append completes
    assert await produce.handle(ctx, _req(("a", 0, BATCH), acks=0)) is None
    await svc.wait_background(1.0)
    await asyncio.sleep(0)
    assert closed[1:] == ["acks=0 produce failed: NOT_LEADER_OR_FOLLOWER"]
    # success: nothing closed
    storage.node(11).append_handler = None
    assert await produce.handle(ctx, _req(("a", 0, BATCH), acks=0)) is None
    await svc.wait_background(1.0)
    await asyncio.sleep(0)
    assert len(closed) == 2
