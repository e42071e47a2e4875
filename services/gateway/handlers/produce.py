"""Produce (v3-9): one Storage.Append per leader node, results mapped back per partition.

Checks made here, before any RPC (Kafka's order): acks in {0, 1, -1} else INVALID_REQUIRED_ACKS
everywhere; unknown topic/partition -> UNKNOWN_TOPIC_OR_PARTITION; Kafka's internal topics ->
INVALID_TOPIC_EXCEPTION; the cheap part of ProduceRequest.validateRecords from the batch header
only (exactly one batch, magic 2, no zstd before v7) -> INVALID_RECORD /
UNSUPPORTED_COMPRESSION_TYPE; batch larger than max.message.bytes -> MESSAGE_TOO_LARGE. CRCs and
producer state are storage's job (not validated twice). A transactional_id is passed on to
storage, which owns producer state. acks=0: the appends are fired and nothing is answered; if
a partition fails, the connection is closed instead (Kafka's way of telling such a client).

Each batch goes to the node the connection's ``ProduceOrder`` names (produce_order.py): the
partition's leader, unless an earlier batch of the same connection and partition is still in
flight elsewhere or failed and has not been retried yet - so that, as on a Kafka broker, no
batch overtakes an earlier one's retry.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable
from typing import Any

from services.common.errors import ErrorCode
from services.common.metadata_cache import INTERNAL_TOPICS
from services.common.protocol import ApiKey
from services.common.records.batch import HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, producer_fields
from services.common.storage_wire import PartitionAppend, append_request_parts
from services.common.topic_config import TOPIC_CONFIGS
from services.gateway import metrics
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.fence_check import check_fence
from services.gateway.handlers.base import ApiHandler, Body, as_error_code
from services.gateway.produce_order import ProduceOrder
from services.gateway.storage_errors import rpc_error_code
from services.gateway.txn_verification import verify_partitions

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_ATTRIBUTES_OFFSET = 21
_RECORD_COUNT_OFFSET = 57
_ZSTD = 4
_RPC_MARGIN_S = 5.0
_MAX_MESSAGE_BYTES = TOPIC_CONFIGS["max.message.bytes"]

_topic_bytes: dict[str, Any] = {}
_topic_messages: dict[str, Any] = {}


def _count_in(topic: str, nbytes: int, records: int) -> None:
    c = _topic_bytes.get(topic)
    if c is None:
        c = _topic_bytes[topic] = metrics.TOPIC_BYTES_IN.labels(topic)
        _topic_messages[topic] = metrics.TOPIC_MESSAGES_IN.labels(topic)
    c.inc(nbytes)
    _topic_messages[topic].inc(records)


def check_records(records: Any, version: int, max_bytes: int) -> tuple[ErrorCode, str, int]:
    """Header-only checks of one partition's record set; returns (error, message, records)."""
    if records is None or len(records) == 0:
        return (
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one record batch",
            0,
        )
    n = len(records)
    if n < HEADER_SIZE:
        return ErrorCode.CORRUPT_MESSAGE, "Record batch is shorter than its header", 0
    size = _INT32.unpack_from(records, 8)[0] + LOG_OVERHEAD
    if records[MAGIC_OFFSET] != 2:
        return (
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only "
            "allowed to contain record batches with magic version 2",
            0,
        )
    if size < HEADER_SIZE or size > n:
        return ErrorCode.CORRUPT_MESSAGE, "Record batch length does not match the data", 0
    if size < n:
        return (
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only "
            "allowed to contain exactly one record batch per partition",
            0,
        )
    if version < 7 and _INT16.unpack_from(records, _ATTRIBUTES_OFFSET)[0] & 0x07 == _ZSTD:
        return (
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
            0,
        )
    if size > max_bytes:
        return (
            ErrorCode.MESSAGE_TOO_LARGE,
            f"The record batch of {size} bytes exceeds the maximum of {max_bytes} bytes",
            0,
        )
    return ErrorCode.NONE, "", _INT32.unpack_from(records, _RECORD_COUNT_OFFSET)[0]


def _max_message_bytes(s: GatewayServices, overrides: Any) -> int:
    raw = overrides.get(_MAX_MESSAGE_BYTES.name)
    if raw is not None:
        try:
            return int(raw)
        except ValueError:
            pass
    return s.message_max_bytes


def _partition(index: int, code: ErrorCode, message: str | None = None) -> Body:
    return {
        "index": index,
        "error_code": int(code),
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
        "record_errors": [],
        "error_message": message if code != ErrorCode.NONE and message else None,
    }


async def handle(ctx: RequestContext, req: Body) -> Body | None:
    s = ctx.services
    v = ctx.api_version
    acks = req["acks"]
    if acks not in (0, 1, -1):
        return error_response(req, v, ErrorCode.INVALID_REQUIRED_ACKS)
    cache = s.cache
    order = ctx.produce_order
    responses: list[Body] = []
    by_node: dict[int, list[_Item]] = {}
    for td in req["topic_data"]:
        name = td["name"]
        topic = cache.topic(name)
        parts: list[Body] = []
        responses.append({"name": name, "partition_responses": parts})
        for pd in td["partition_data"]:
            index = pd["index"]
            info = topic.partitions.get(index) if topic is not None else None
            if topic is None or info is None:
                parts.append(_partition(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if name in INTERNAL_TOPICS:
                parts.append(
                    _partition(
                        index,
                        ErrorCode.INVALID_TOPIC_EXCEPTION,
                        f"Cannot append to internal topic {name}",
                    )
                )
                continue
            records = pd.get("records")
            code, message, count = check_records(records, v, _max_message_bytes(s, topic.config))
            if code != ErrorCode.NONE:
                parts.append(_partition(index, code, message))
                continue
            producer = producer_fields(records)
            node = order.route((name, index), info.leader, producer)
            if isinstance(node, ErrorCode):
                parts.append(
                    _partition(index, node, "An earlier batch of this partition failed: retry it")
                )
                fence = order.fence_to_check((name, index))
                if fence is not None and info.leader >= 0:
                    s.spawn(check_fence(s, order, (name, index), info.leader, fence), "fence")
                elif fence is not None:
                    order.fence_checked((name, index), fence, stale=False)
                continue
            if node < 0:
                parts.append(
                    _partition(
                        index, ErrorCode.NOT_LEADER_OR_FOLLOWER, "The partition has no leader"
                    )
                )
                order.failed((name, index), producer, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            _count_in(name, len(records), count)
            res = _partition(index, ErrorCode.NONE)
            parts.append(res)
            # records stay a view of the request frame until the Exchange stream's serializer copies them once
            by_node.setdefault(node, []).append(
                (PartitionAppend(name, index, records), res, producer)
            )
    if not by_node:
        if acks == 0:
            _close_on_error(ctx, responses)
            return None
        return {"responses": responses, "throttle_time": 0}
    timeout_ms = int(req.get("timeout", 30000))
    # The calls are started here, synchronously and in request order, so that appends from
    # one connection reach each storage node in the order the client sent them.
    txn = req.get("transactional_id")
    started = [
        call
        for node, items in by_node.items()
        if (call := _start_append(s, order, node, items, acks, timeout_ms, txn)) is not None
    ]
    if acks == 0:
        appends = s.spawn(_finish_appends(s, order, started), "produce_acks0")
        if not _close_on_error(ctx, responses):
            appends.add_done_callback(lambda _: _close_on_error(ctx, responses))
        return None
    unverified = await _finish_appends(s, order, started)
    if unverified and txn:
        await _verify_and_resend(ctx, unverified, acks, timeout_ms, txn)
    return {"responses": responses, "throttle_time": 0}


def _close_on_error(ctx: RequestContext, responses: list[Body]) -> bool:
    """acks=0 has no response to carry errors: as Kafka, close the connection instead, so the
    client notices (and refreshes its metadata). Returns whether it did."""
    failed = next((p for t in responses for p in t["partition_responses"] if p["error_code"]), None)
    if failed is None:
        return False
    ctx.close_connection(f"acks=0 produce failed: {as_error_code(failed['error_code']).name}")
    return True


# one partition's batch: what goes to storage, its response entry, its producer id/epoch/sequence
_Item = tuple[PartitionAppend, Body, tuple[int, int, int]]
_Started = tuple[int, list[_Item], Awaitable[Any]]
_Unverified = tuple[int, _Item, int]  # node, item, verification guard
_VERIFY_MESSAGES = {
    ErrorCode.INVALID_TXN_STATE: "The partition is not part of the producer's ongoing transaction",
}


def _fail(order: ProduceOrder, items: list[_Item], code: ErrorCode, message: str) -> None:
    for p, res, producer in items:
        res.update(_partition(res["index"], code, message))
        order.failed((p.topic, p.partition), producer, code)


def _start_append(
    s: GatewayServices,
    order: ProduceOrder,
    node: int,
    items: list[_Item],
    acks: int,
    timeout_ms: int,
    transactional_id: str | None,
) -> _Started | None:
    """Start one Append to ``node``: (node, items, its answer), or None when it could not be
    started (the responses in ``items`` then hold the error)."""
    stub = s.storage.stub(node)
    if stub is None:
        _fail(
            order, items, ErrorCode.NOT_LEADER_OR_FOLLOWER, f"Storage node {node} is not available"
        )
        return None
    request = append_request_parts(acks, timeout_ms, transactional_id, [p for p, _, _ in items])
    try:
        call = stub.Append(request, timeout=max(timeout_ms, 0) / 1000.0 + _RPC_MARGIN_S)
    except Exception as exc:  # noqa: BLE001 - any RPC failure becomes a partition error
        code = rpc_error_code("Append", exc)
        _fail(order, items, code, f"Storage node {node}: {code.name}")
        return None
    for p, _, _ in items:
        order.sent((p.topic, p.partition), node)
    return node, items, call


async def _finish_appends(
    s: GatewayServices, order: ProduceOrder, started: list[_Started]
) -> list[_Unverified]:
    """Await every started Append (the futures themselves: no task per call) and fill in the
    responses of their partitions; each answered batch is reported to ``order``. Returns the
    transactional batches storage holds back until the coordinator verifies them (KIP-890)."""
    answers: list[Any]
    if len(started) == 1:  # one node, as librdkafka's requests: no gather and its extra hop
        try:
            answers = [await started[0][2]]
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - as gather(return_exceptions=True) gives it
            answers = [exc]
    else:
        answers = await asyncio.gather(*(call for _, _, call in started), return_exceptions=True)
    unverified: list[_Unverified] = []
    for (node, items, _), answer in zip(started, answers, strict=True):
        guards = _apply_answer(s, node, items, answer)
        for item in items:
            p, res, producer = item
            guard = guards.get((p.topic, p.partition), 0)
            if guard:  # not a failure the client sees: resent once verified
                unverified.append((node, item, guard))
                order.answered((p.topic, p.partition), producer, ErrorCode.NONE)
            else:
                order.answered((p.topic, p.partition), producer, as_error_code(res["error_code"]))
    return unverified


def _apply_answer(
    s: GatewayServices, node: int, items: list[_Item], answer: Any
) -> dict[tuple[str, int], int]:
    """Fill in the responses; returns the verification guards storage handed out."""
    guards: dict[tuple[str, int], int] = {}
    if isinstance(answer, BaseException):  # any RPC failure becomes a partition error
        code = rpc_error_code("Append", answer)
        for _, res, _ in items:
            res.update(_partition(res["index"], code, f"Storage node {node}: {code.name}"))
        return guards
    by_key = {(r.topic, r.partition): r for r in answer.partitions}
    offsets = s.offsets
    for p, res, _ in items:
        r = by_key.get((p.topic, p.partition))
        if r is None:
            res.update(
                _partition(
                    res["index"],
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    "Storage returned no result for the partition",
                )
            )
            continue
        res["error_code"] = r.error_code
        if r.error_code == 0:
            res["base_offset"] = r.base_offset
            res["log_append_time"] = r.log_append_time_ms
            res["log_start_offset"] = r.log_start_offset
            offsets.update(p.topic, p.partition, log_start_offset=r.log_start_offset)
        else:
            res["log_start_offset"] = r.log_start_offset if r.log_start_offset >= 0 else -1
            res["error_message"] = r.error_message or None
            res["record_errors"] = [
                {"batch_index": e.batch_index, "batch_index_error_message": e.message or None}
                for e in r.record_errors
            ]
            if r.verification_guard:
                guards[(p.topic, p.partition)] = r.verification_guard
    return guards


async def _verify_and_resend(
    ctx: RequestContext, unverified: list[_Unverified], acks: int, timeout_ms: int, txn: str
) -> None:
    """KIP-890 part 1: ask the transaction coordinator whether the held-back batches'
    partitions are in the producer's transaction; resend the verified ones with storage's
    guard, answer the others with the coordinator's verdict (Produce <= v9 codes). Resends of
    one connection start in the order their first answers came back (``resend_turn``, taken
    before anything is awaited)."""
    s, order = ctx.services, ctx.produce_order
    previous, mine = order.resend_turn()
    try:
        codes = await verify_partitions(
            ctx, txn, [(p.topic, p.partition, producer) for _, (p, _, producer), _ in unverified]
        )
        if previous is not None:
            await asyncio.shield(previous)
        by_node: dict[int, list[_Item]] = {}
        for node, (p, res, producer), guard in unverified:
            code = codes.get((p.topic, p.partition), ErrorCode.NOT_ENOUGH_REPLICAS)
            if code != ErrorCode.NONE:
                res.update(_partition(res["index"], code, _VERIFY_MESSAGES.get(code)))
                order.failed((p.topic, p.partition), producer, code)
                continue
            by_node.setdefault(node, []).append(
                (p._replace(verification_guard=guard), res, producer)
            )
        started = [
            call
            for node, items in by_node.items()
            if (call := _start_append(s, order, node, items, acks, timeout_ms, txn)) is not None
        ]
    finally:
        if not mine.done():
            mine.set_result(None)
    await _finish_appends(s, order, started)


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {
        "throttle_time": 0,
        "responses": [
            {
                "name": td["name"],
                "partition_responses": [
                    _partition(pd["index"], code) for pd in td["partition_data"]
                ],
            }
            for td in req.get("topic_data") or []
        ],
    }


HANDLER = ApiHandler(ApiKey.PRODUCE, "Produce", handle, error_response)
