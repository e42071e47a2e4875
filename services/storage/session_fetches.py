"""Storage.Fetch of a follower in a fetch session (KIP-227; the sessions: fetch_sessions.py).

The request updates the session (listed partitions, forgotten ones, the epoch); then the leader
visits the session's dirty partitions only: each is read (``fetches.read_partition``; the
follower's position is recorded once per request) and answered when it has something for the
follower: records, an error, or a high watermark or log start offset other than last answered.
A partition whose follower is at the log end, in the ISR, with nothing to learn, turns quiet
and is not visited again until it is marked or listed. With fewer than min_bytes read and no
error, the fetch parks on the session (not on each partition) until a partition of it is marked
or max_wait_ms passes, visiting the marked ones as they come; it then answers whatever it
gathered (high watermark moves too). An idle session's fetch visits nothing.
"""

from __future__ import annotations

import asyncio

from services.common.errors import ErrorCode, KafkaError
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage import fetches
from services.storage.fetch_sessions import FetchSession, SessionPartition
from services.storage.replica_manager import ReplicaManager
from services.storage.wire import FetchReply, FetchResult

TopicPartition = tuple[str, int]


class _Gathered:
    """What one request answers so far, and its byte budget (KIP-74 as in fetches)."""

    __slots__ = ("results", "bytes_left", "total_bytes", "errored", "reported")

    def __init__(self, max_bytes: int) -> None:
        self.results: dict[TopicPartition, FetchResult] = {}
        self.bytes_left = max_bytes
        self.total_bytes = 0
        self.errored = False
        self.reported: set[TopicPartition] = set()  # follower positions recorded


async def session_fetch(rm: ReplicaManager, req: pb.FetchRequest) -> FetchReply:
    sessions = rm.fetch_sessions
    now = rm.clock()
    sessions.evict_idle(now)
    try:
        if req.session_id == 0:
            if req.session_epoch != 0:
                raise KafkaError(
                    ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                    "a full fetch opening a session has epoch 0",
                )
            s = sessions.open(req.replica_id, now)
        else:
            s = sessions.lookup(req.session_id, req.session_epoch, req.replica_id)
    except KafkaError as exc:
        return FetchReply([], error_code=exc.code)
    generation = s.begin(req.session_epoch, now)
    for pf in req.partitions:
        sessions.put(
            s,
            (pf.topic, pf.partition),
            pf.fetch_offset,
            pf.log_start_offset,
            pf.current_leader_epoch,
            pf.partition_max_bytes,
        )
    for fp in req.forgotten:
        sessions.forget(s, (fp.topic, fp.partition))
    got = _Gathered(req.max_bytes)
    _visit(rm, s, got)
    if req.max_wait_ms > 0 and got.total_bytes < req.min_bytes and not got.errored:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + req.max_wait_ms / 1000.0
        while await s.wait(deadline - loop.time()):
            if sessions.by_id.get(s.id) is not s or s.generation != generation:
                break  # closed (a newer session of the follower, or evicted), or replayed
            _visit(rm, s, got)
            if got.total_bytes >= req.min_bytes or got.errored:
                break
    results = list(got.results.values())
    fetches.count_bytes_out(rm, results, True)
    return FetchReply(results, session_id=s.id)


def _visit(rm: ReplicaManager, s: FetchSession, got: _Gathered) -> None:
    """Read the session's dirty partitions; those settled turn quiet."""
    keys, s.dirty = s.dirty, set()
    for key in keys:
        sp = s.partitions.get(key)
        if sp is not None:
            _visit_one(rm, s, sp, got)


def _visit_one(rm: ReplicaManager, s: FetchSession, sp: SessionPartition, got: _Gathered) -> None:
    key = sp.key
    previous = got.results.get(key)
    if previous is not None and previous.records:
        s.dirty.add(key)  # read once per request: what moved since comes with the next one
        return
    first = key not in got.reported
    got.reported.add(key)
    limit = max(0, min(sp.max_bytes, got.bytes_left))
    r, p = fetches.read_partition(
        rm, _Position(sp), s.replica_id, False, limit, got.total_bytes == 0, first=first
    )
    size = len(r.records)
    if r.error_code:
        got.errored = True
        got.results[key] = r
        sp.answered(-2, -2)
        s.answering.add(key)
        s.dirty.discard(key)  # the follower backs it off or re-lists it; a mark brings it back
        return
    if (
        size
        or r.high_watermark != sp.sent_high_watermark
        or r.log_start_offset != sp.sent_log_start_offset
    ):
        got.results[key] = r  # replaces an earlier visit's answer (it had no records)
        sp.answered(r.high_watermark, r.log_start_offset)
        s.answering.add(key)
        if size:
            got.bytes_left = max(0, got.bytes_left - size)
            got.total_bytes += size
    if (
        p is not None
        and sp.fetch_offset == p.log.log_end_offset
        and s.replica_id in p.isr
        and sp.sent_high_watermark == p.high_watermark
        and sp.sent_log_start_offset == p.log.log_start_offset
    ):
        sp.quiet = True
        s.dirty.discard(key)  # marked while visited: already answered
    else:
        s.dirty.add(key)  # lagging, outside the ISR or not all answered: visit again


class _Position:
    """A session partition as ``read_partition`` reads a ``PartitionFetch``."""

    __slots__ = (
        "topic",
        "partition",
        "fetch_offset",
        "log_start_offset",
        "current_leader_epoch",
        "partition_max_bytes",
    )

    def __init__(self, sp: SessionPartition) -> None:
        self.topic, self.partition = sp.key
        self.fetch_offset = sp.fetch_offset
        self.log_start_offset = sp.log_start_offset
        self.current_leader_epoch = sp.current_leader_epoch
        self.partition_max_bytes = sp.max_bytes
