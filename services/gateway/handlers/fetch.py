"""Fetch (v4-12), sessionless: one Storage.Fetch per leader node, answered on combined min_bytes.

Sessions: a full request (session epoch 0 or -1) is answered sessionless (session_id 0, which
clients accept as "no session"); an incremental one (any other epoch) gets
FETCH_SESSION_ID_NOT_FOUND, as Kafka answers for a session it does not have.

Waiting, in two phases. First every node reads what it has now (max_wait 0), and all of those
answers are used: a node that is still reading when the others already hold min_bytes is given
until max_wait, so records read are not thrown away. This phase is skipped when the last known
offsets say the consumer is caught up on every partition. When it falls short of min_bytes,
each node is asked to long-poll for its share of min_bytes for the rest of max_wait; as soon
as the completed nodes hold min_bytes in total, the still-waiting calls are cancelled and their
partitions keep the first phase's answer (or no records and the last known offsets). A node
error answers at once. Record bytes are passed through untouched; partitions beyond the
request's max_bytes (after the first one with data) are answered without records and fetched
again.

Fetch from a zone-local broker (KIP-392): a consumer whose rack_id (client.rack) names another
zone than this gateway's is answered, for each partition with an in-sync replica whose broker
(``routing.broker_endpoints``) is in its zone, no records and that replica's id as
preferred_read_replica; it then fetches from a gateway in its own zone. Partitions without one
are served here.

Long polls still running when a Fetch answers are parked on the connection (fetch_park.py):
the next Fetch takes over a node's call when it asks that node the same thing. A call that
answered in between is used at once by either phase; a running one only by phase 2 (phase 1
leaves it parked), and when it ends empty before this request's max_wait, the node is asked
again for the rest.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Any

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.gateway import metrics
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.fetch_park import FetchKey, FetchPark, ParkedPolls, fetch_key
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.handlers.metadata import client_brokers
from services.gateway.routing import preferred_read_replica
from services.gateway.storage_errors import rpc_error_code

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
READ_COMMITTED = 1
_RPC_MARGIN_S = 5.0

_topic_bytes: dict[str, Any] = {}


def _count_out(topic: str, nbytes: int) -> None:
    c = _topic_bytes.get(topic)
    if c is None:
        c = _topic_bytes[topic] = metrics.TOPIC_BYTES_OUT.labels(topic)
    c.inc(nbytes)


def _rack_readers(
    ctx: RequestContext, rack_id: str | None
) -> Callable[[Sequence[int]], int] | None:
    """When a consumer in another zone than this gateway's asks (Fetch v11+ rack_id): the
    preferred read replica among a partition's in-sync replicas (-1: none)."""
    own = ctx.services.endpoint.rack
    if not rack_id or rack_id == own:
        return None
    brokers = client_brokers(ctx)
    return lambda isr: preferred_read_replica(rack_id, own, isr, brokers)


def _partition(
    index: int, code: ErrorCode, hw: int = -1, lso: int = -1, log_start: int = -1
) -> Body:
    return {
        "partition_index": index,
        "error_code": int(code),
        "high_watermark": hw,
        "last_stable_offset": lso,
        "log_start_offset": log_start,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    v = ctx.api_version
    if v >= 7 and req.get("session_epoch", FINAL_EPOCH) not in (FINAL_EPOCH, INITIAL_EPOCH):
        return _top_level_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    cache = s.cache
    isolation = int(req.get("isolation_level", 0))
    readers = _rack_readers(ctx, req.get("rack_id"))
    responses: list[Body] = []
    order: list[tuple[str, Body]] = []  # (topic, partition response) in request order
    by_node: dict[int, list[tuple[Any, Body]]] = {}
    immediate = False
    for ft in req["topics"]:
        name = ft["topic"]
        topic = cache.topic(name)
        parts: list[Body] = []
        responses.append({"topic": name, "partitions": parts})
        for fp in ft["partitions"]:
            index = fp["partition"]
            info = topic.partitions.get(index) if topic is not None else None
            if info is None:
                res = _partition(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif info.leader < 0 or s.storage.stub(info.leader) is None:
                res = _partition(index, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                immediate = True
            elif readers is not None and (pref := readers(info.isr)) >= 0:
                # KIP-392: no records here; the consumer fetches from a gateway in its zone
                res = _partition(index, ErrorCode.NONE, *s.offsets.get(name, index))
                res["preferred_read_replica"] = pref
            else:
                res = _partition(index, ErrorCode.NONE, *s.offsets.get(name, index))
                by_node.setdefault(info.leader, []).append(
                    (
                        pb.PartitionFetch(
                            topic=name,
                            partition=index,
                            fetch_offset=fp["fetch_offset"],
                            partition_max_bytes=fp["partition_max_bytes"],
                            current_leader_epoch=fp.get("current_leader_epoch", -1),
                            log_start_offset=-1,
                        ),
                        res,
                    )
                )
            parts.append(res)
            order.append((name, res))
    if by_node:
        park = ctx.fetch_park
        parked = park.take_all() if park is not None else ParkedPolls({})
        try:
            await _fetch_nodes(s, req, by_node, isolation, immediate, parked, park)
        finally:
            parked.give_back(park)
        _apply_max_bytes(order, int(req.get("max_bytes", 0x7FFFFFFF)))
        for name, res in order:
            if res["records"]:
                _count_out(name, len(res["records"]))
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}


async def _fetch_nodes(
    s: GatewayServices,
    req: Body,
    by_node: dict[int, list[tuple[Any, Body]]],
    isolation: int,
    immediate: bool,
    parked: ParkedPolls,
    park: FetchPark | None,
) -> None:
    loop = asyncio.get_running_loop()
    max_wait_ms = 0 if immediate else max(int(req.get("max_wait", 0)), 0)
    deadline = loop.time() + max_wait_ms / 1000.0
    min_bytes = max(int(req.get("min_bytes", 0)), 0)
    nodes: dict[int, tuple[Any, list[tuple[Any, Body]]]] = {}
    for node, items in by_node.items():
        stub = s.storage.stub(node)
        if stub is None:  # deregistered since the request was read
            for _, res in items:
                res.update(_partition(res["partition_index"], ErrorCode.NOT_LEADER_OR_FOLLOWER))
        else:
            nodes[node] = (stub, items)
    if not nodes:
        return
    got: dict[int, int] = {}  # record bytes of each node's latest answer
    if max_wait_ms == 0 or _may_have_data(nodes, isolation):
        # Phase 1: what every node holds now. Every answer is awaited (once min_bytes are in,
        # until max_wait at most): cancelling a node that is still reading would throw its
        # records away and have the consumer fetch them again.
        if await _round(
            s,
            req,
            nodes,
            isolation,
            got,
            wait_ms=0,
            min_bytes=min_bytes,
            until=deadline if max_wait_ms else None,
            parked=parked,
        ):
            return
        wait_ms = int((deadline - loop.time()) * 1000)
        if sum(got.values()) >= min_bytes or wait_ms <= 0:
            return
    else:
        wait_ms = max_wait_ms
    # Phase 2: long poll on every node; answer as soon as min_bytes are in (or a node fails).
    await _round(
        s,
        req,
        nodes,
        isolation,
        got,
        wait_ms=wait_ms,
        min_bytes=min_bytes,
        until=loop.time(),
        parked=parked,
        park=park,
    )


def _with_data(items: list[tuple[Any, Body]], isolation: int) -> int:
    """How many of ``items`` have records at their fetch offset by the last known offsets (or
    unknown offsets)."""
    key = "last_stable_offset" if isolation == READ_COMMITTED else "high_watermark"
    n = 0
    for p, res in items:
        end = res[key]
        if end < 0 or p.fetch_offset < end:
            n += 1
    return n


def _may_have_data(nodes: dict[int, tuple[Any, list[tuple[Any, Body]]]], isolation: int) -> bool:
    """Whether, by the last known offsets, some partition has records at its fetch offset (or
    its offsets are unknown). When none has, the consumer is caught up and phase 1 is skipped."""
    return any(_with_data(items, isolation) for _, items in nodes.values())


def _node_max_bytes(
    nodes: dict[int, tuple[Any, list[tuple[Any, Body]]]],
    max_bytes: int,
    isolation: int,
    node_cap: int = 0,
) -> dict[int, int]:
    """Each node's share of the response's max_bytes, in proportion to its partitions that have
    records by the last known offsets (evenly when none has), and at most ``node_cap``
    (``kafkapy.fetch.node.max.bytes``; 0: no limit).

    The nodes read in parallel, and records past max_bytes are dropped here
    (``_apply_max_bytes``): asking every node for all of max_bytes had a consumer that is behind
    on partitions of several nodes read, send and drop up to (nodes - 1) x max_bytes per Fetch
    (measured: storage nodes sent 2.3x the bytes 8 consumers received). A node's share is a
    limit of bytes, not of batches: the first batch it has is still returned whole (KIP-74).

    The cap keeps one answer small enough to reach the consumer soon: a node's read, its trip
    through gRPC and the gateway, and the consumer's parsing all grow with the bytes, and the
    consumer has no record before the whole answer is in (a consumer's first 48 MiB answer took
    54 ms to arrive, 23.7 MiB at 8 MiB per node 28 ms; docs/performance.md, "Consume, third
    pass")."""
    weights = {node: _with_data(items, isolation) for node, (_, items) in nodes.items()}
    total = sum(weights.values())
    if not total:
        weights = dict.fromkeys(nodes, 1)
        total = len(nodes)
    cap = node_cap or max_bytes
    return {node: min(cap, -(-max_bytes * w // total)) for node, w in weights.items()}


async def _round(
    s: GatewayServices,
    req: Body,
    nodes: dict[int, tuple[Any, list[tuple[Any, Body]]]],
    isolation: int,
    got: dict[int, int],
    *,
    wait_ms: int,
    min_bytes: int,
    until: float | None,
    parked: ParkedPolls,
    park: FetchPark | None = None,
) -> bool:
    """One Storage.Fetch per node, each asked for its share of min_bytes within ``wait_ms``
    (or the call parked for that node, when it asked the same thing).

    Every call is awaited, except that once the answers in hold min_bytes the others are given
    until ``until`` (None: no limit, the RPC timeout bounds them). A node error ends the round at
    once. Calls still running are then parked in ``park`` (long polls of a round that ended
    normally) or cancelled; their partitions keep what an earlier round filled in. ``got`` is
    updated per node; returns whether a node reported an error."""
    loop = asyncio.get_running_loop()
    share = math.ceil(min_bytes / len(nodes)) if min_bytes > 0 else 0
    rpc_margin = min(_RPC_MARGIN_S, s.request_timeout_s)
    max_bytes = int(req.get("max_bytes", 0x7FFFFFFF))
    shares = _node_max_bytes(nodes, max_bytes, isolation, s.settings.fetch_node_max_bytes)
    end = loop.time() + wait_ms / 1000.0
    tasks: dict[asyncio.Future[Any], tuple[int, list[tuple[Any, Body]], FetchKey]] = {}
    adopted: set[asyncio.Future[Any]] = set()

    def call(
        node: int, stub: Any, items: list[tuple[Any, Body]], wait: int, key: FetchKey | None = None
    ) -> asyncio.Future[Any]:
        request = pb.FetchRequest(
            replica_id=-1,
            max_wait_ms=wait,
            min_bytes=share,
            max_bytes=shares[node],
            isolation_level=isolation,
            partitions=[p for p, _ in items],
        )
        key = key or fetch_key(request, max_bytes)
        task = parked.take(node, key, running_ok=wait_ms > 0)
        if task is not None:
            adopted.add(task)
        else:
            task = asyncio.ensure_future(stub.Fetch(request, timeout=wait / 1000.0 + rpc_margin))
        tasks[task] = (node, items, key)
        return task

    for node, (stub, items) in nodes.items():
        call(node, stub, items, wait_ms)
    pending: set[asyncio.Future[Any]] = set(tasks)
    ended = False
    try:
        while pending:
            limit = None
            if until is not None and sum(got.values()) >= min_bytes:
                limit = until - loop.time()
                if limit <= 0:
                    break
            done, pending = await asyncio.wait(
                pending, timeout=limit, return_when=asyncio.FIRST_COMPLETED
            )
            failed = False
            for task in done:
                node, items, key = tasks[task]
                got[node], node_failed = _apply_result(s, node, task, items, isolation)
                failed = failed or node_failed
                left_ms = int((end - loop.time()) * 1000)
                if task in adopted and not got[node] and not node_failed and left_ms > 0:
                    # a parked long poll that ended (empty) before this request's max_wait
                    pending.add(call(node, nodes[node][0], items, left_ms, key))
            if failed:
                ended = True
                return True
        ended = True
        return False
    finally:
        for task in pending:
            if ended and park is not None and wait_ms > 0:
                node, _, key = tasks[task]
                park.park(node, key, task, again=task in adopted)
            else:
                task.cancel()


def _apply_result(
    s: GatewayServices,
    node: int,
    task: asyncio.Future[Any],
    items: list[tuple[Any, Body]],
    isolation: int,
) -> tuple[int, bool]:
    """Fill the responses of one node; returns (record bytes, whether an error was reported)."""
    exc = task.exception()
    if exc is not None:
        # A Kafka broker never times a Fetch partition out, and the Java consumer throws
        # IllegalStateException on a partition error it does not expect there,
        # REQUEST_TIMED_OUT included. A storage node that did not answer in
        # time is one the client should look up again: NOT_LEADER_OR_FOLLOWER, which every
        # client retries after a metadata refresh, as for a node whose connection broke.
        code = rpc_error_code("Fetch", exc, timed_out=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for _, res in items:
            res.update(_partition(res["partition_index"], code))
        return 0, True
    by_key = {(r.topic, r.partition): r for r in task.result().partitions}
    got = 0
    failed = False
    offsets = s.offsets
    for p, res in items:
        r = by_key.get((p.topic, p.partition))
        if r is None:
            res.update(_partition(res["partition_index"], ErrorCode.UNKNOWN_SERVER_ERROR))
            failed = True
            continue
        res["error_code"] = r.error_code
        res["high_watermark"] = r.high_watermark
        res["last_stable_offset"] = r.last_stable_offset
        res["log_start_offset"] = r.log_start_offset
        if r.error_code:
            failed = True
            continue
        offsets.update(
            p.topic,
            p.partition,
            high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable_offset,
            log_start_offset=r.log_start_offset,
        )
        if isolation == READ_COMMITTED:
            res["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in r.aborted_transactions
            ]
        records = r.records  # a view of the storage response (a copy if it is a message)
        if records:
            res["records"] = records
            got += len(records)
    return got, failed


def _apply_max_bytes(order: list[tuple[str, Body]], max_bytes: int) -> None:
    """Drop records past the response's max_bytes (the first non-empty partition always stays)."""
    total = 0
    for _, res in order:
        n = len(res["records"])
        if not n:
            continue
        if total and total + n > max_bytes:
            res["records"] = b""
            res["aborted_transactions"] = [] if res["aborted_transactions"] is not None else None
            continue
        total += n


def _top_level_error(code: ErrorCode) -> Body:
    return {"throttle_time": 0, "error_code": int(code), "session_id": 0, "responses": []}


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {
        "throttle_time": 0,
        "error_code": int(code),
        "session_id": 0,
        "responses": [
            {
                "topic": ft["topic"],
                "partitions": [_partition(fp["partition"], code) for fp in ft["partitions"]],
            }
            for ft in req.get("topics") or []
        ],
    }


HANDLER = ApiHandler(ApiKey.FETCH, "FetchConsumer", handle, error_response)
