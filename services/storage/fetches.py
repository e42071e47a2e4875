"""Storage.Fetch: reads for consumers (up to the high watermark) and followers (up to the LEO).

Byte limits follow KIP-74: each partition reads at most min(partition_max_bytes, what is left of
max_bytes), and until some partition returned data, a read returns at least one whole batch even
if it is larger than the limits. A follower's ``fetch_offset`` is its log end offset: the leader
records it and may move the high watermark.

Long poll (Kafka's DelayedFetch): when fewer than min_bytes were read, no partition failed and
max_wait_ms > 0, the request parks in the fetch purgatory until one of its partitions gets new
visible data (an append for followers, a high watermark move for consumers) or changes
leadership, then reads again; at max_wait_ms it answers with what there is.

Followers (replica_id >= 0) also get the leader's log end offset, and on OFFSET_OUT_OF_RANGE
the leader's log start / end offsets, so they can resolve it without another round trip.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage import session_fetches
from services.storage.log.transactions import next_offset_after
from services.storage.partition import Partition, TopicPartition
from services.storage.replica_manager import ReplicaManager
from services.storage.wire import FetchReply, FetchResult

log = get_logger("storage.fetch")

READ_COMMITTED = 1


@dataclass(slots=True)
class _Seen:
    """What one partition looked like at the last read (to detect progress)."""

    key: TopicPartition
    partition: Partition | None
    leader_epoch: int
    end: int


@dataclass(slots=True)
class _Read:
    results: list[FetchResult]
    total_bytes: int
    errored: bool
    seen: list[_Seen]


def _visible_end(p: Partition, follower: bool, committed: bool) -> int:
    """Followers read to the log end, read_committed consumers to the last stable offset,
    the others to the high watermark."""
    if follower:
        return p.log.log_end_offset
    return p.log.last_stable_offset if committed else p.high_watermark


async def fetch(rm: ReplicaManager, req: pb.FetchRequest) -> FetchReply:
    follower = req.replica_id >= 0
    if follower and req.use_session:
        return await session_fetches.session_fetch(rm, req)
    committed = not follower and req.isolation_level == READ_COMMITTED
    read = _read_all(rm, req, follower, committed, first=True)
    if (
        req.max_wait_ms > 0
        and req.partitions
        and read.total_bytes < req.min_bytes
        and not read.errored
    ):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + req.max_wait_ms / 1000.0
        keys = [s.key for s in read.seen]
        while (remaining := deadline - loop.time()) > 0:
            moved = await rm.fetch_waiters.wait_until(
                keys, functools.partial(_progressed, rm, read.seen, follower, committed), remaining
            )
            read = _read_all(rm, req, follower, committed, first=False)
            if not moved or read.total_bytes >= req.min_bytes or read.errored:
                break
    count_bytes_out(rm, read.results, follower)
    # written by wire.fetch_response_bytes: each record set copied once (FetchResponse(...)
    # would deep-copy them, and SerializeToString copy them again)
    return FetchReply(read.results)


def _progressed(rm: ReplicaManager, seen: list[_Seen], follower: bool, committed: bool) -> bool:
    for s in seen:
        p = rm.get(*s.key)
        if p is not s.partition:
            return True
        if p is None:
            continue
        if (
            p.leader_epoch != s.leader_epoch
            or not p.is_leader
            or _visible_end(p, follower, committed) != s.end
        ):
            return True
    return False


def _read_all(
    rm: ReplicaManager, req: pb.FetchRequest, follower: bool, committed: bool, *, first: bool
) -> _Read:
    out = _Read([], 0, False, [])
    bytes_left = req.max_bytes
    min_one_batch = True
    for pf in req.partitions:
        limit = max(0, min(pf.partition_max_bytes, bytes_left))
        result, p = read_partition(
            rm, pf, req.replica_id, committed, limit, min_one_batch, first=first
        )
        out.results.append(result)
        size = len(result.records)
        if size:
            min_one_batch = False
            bytes_left = max(0, bytes_left - size)
            out.total_bytes += size
        if result.error_code:
            out.errored = True
        out.seen.append(
            _Seen(
                (pf.topic, pf.partition),
                p,
                p.leader_epoch if p else -1,
                _visible_end(p, follower, committed) if p else -1,
            )
        )
    return out


def read_partition(
    rm: ReplicaManager,
    pf: Any,
    replica_id: int,
    committed: bool,
    limit: int,
    min_one_batch: bool,
    *,
    first: bool,
) -> tuple[FetchResult, Partition | None]:
    """One partition of a fetch (``pf``: a ``pb.PartitionFetch`` or alike) read up to ``limit``
    bytes; on ``first`` a follower's fetch position is recorded. Errors are in the result."""
    follower = replica_id >= 0
    result = FetchResult(pf.topic, pf.partition)
    p: Partition | None = None
    try:
        p = rm.leader_or_error(pf.topic, pf.partition, pf.current_leader_epoch)
        if first:
            rm.metrics.topic(pf.topic).fetch_requests.inc()
        if follower:
            p.check_follower(replica_id)
        lso = p.log.last_stable_offset
        if follower and pf.fetch_offset == p.log.log_end_offset:
            # caught up (most partitions of a follower's fetch, each time any one of them
            # gets an append): what the read would answer, without taking the log's lock
            records: Any = b""
        elif follower and _leader_throttled(rm, p, replica_id):
            records = b""  # Kafka's shouldLeaderThrottle: no records this time
        else:
            records = p.log.read(
                pf.fetch_offset,
                limit,
                max_offset=None if follower else (lso if committed else p.high_watermark),
                min_one_batch=min_one_batch,
            ).records
        if follower and first:
            rm.on_follower_fetch(p, replica_id, pf.fetch_offset, pf.log_start_offset)
        size = len(records)
        result.records = records
        result.error_code = ErrorCode.NONE
        result.high_watermark = p.high_watermark
        result.last_stable_offset = lso
        if committed and size:
            upper = next_offset_after(records, lso)
            result.aborted_transactions = p.log.aborted_transactions(pf.fetch_offset, upper)
        result.log_start_offset = p.log.log_start_offset
        if follower:
            result.log_end_offset = p.log.log_end_offset
    except KafkaError as exc:
        result.error_code = exc.code
        if follower and p is not None and exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
            # what the follower needs to resolve it (Kafka's fetchOffsetAndTruncate)
            result.log_start_offset = p.log.log_start_offset
            result.log_end_offset = p.log.log_end_offset
            result.high_watermark = p.high_watermark
    except OSError as exc:  # the disk under this log failed: its whole dir goes offline
        log.error("fetch I/O error", topic=pf.topic, partition=pf.partition, error=repr(exc))
        rm.report_io_error(pf.topic, pf.partition, exc)
        result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
    except Exception:
        log.exception("fetch failed", topic=pf.topic, partition=pf.partition)
        rm.metrics.failed_fetch_requests.labels(pf.topic).inc()
        result.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
    return result, p


def _leader_throttled(rm: ReplicaManager, p: Partition, replica_id: int) -> bool:
    """A throttled partition's follower out of the ISR waits while the leader's quota is
    exceeded; one in the ISR never does."""
    quota = rm.quotas.leader
    return (
        quota.is_throttled(p.topic, p.partition, p.config)
        and replica_id not in p.isr
        and quota.hold_back()
    )


def count_bytes_out(rm: ReplicaManager, results: list[FetchResult], follower: bool) -> None:
    """Metrics of what is sent, and the leader's throttle (bytes of throttled partitions, in
    or out of the ISR, count against it, as Kafka's ``sizeOfThrottledPartitions``)."""
    for r in results:
        if r.records:
            if follower:
                rm.metrics.replication_bytes_out.labels(r.topic).inc(len(r.records))
                p = rm.get(r.topic, r.partition)
                if p is not None and rm.quotas.leader.is_throttled(p.topic, p.partition, p.config):
                    rm.quotas.leader.record(r.topic, len(r.records))
            else:
                rm.metrics.topic(r.topic).bytes_out.inc(len(r.records))
