"""Storage.DescribeLogDirs: what Kafka's ``ReplicaManager.describeLogDirs`` answers for a broker.

Per log dir: its path, KAFKA_STORAGE_ERROR when it failed (KIP-112; no replicas and unknown
space then), total and usable bytes of its file system (KIP-827), and the replicas it holds that
the request asks for: size of the segments, offset lag and ``is_future`` (always false: there is
no AlterReplicaLogDirs). The offset lag of a follower is the leader's log end offset (from the
last fetch answer) minus its own, 0 on a leader, -1 while a follower has not heard from its
leader yet. Kafka computes ``max(HW - LEO, 0)``, which is always 0 on a follower whose high
watermark is clamped to its own LEO; the leader's LEO is what the lag means to an operator
watching a reassignment.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.partition import TopicPartition
from services.storage.replica_manager import ReplicaManager

log = get_logger("storage.log_dirs")

UNKNOWN_BYTES = -1  # Kafka's DescribeLogDirsResponse.UNKNOWN_VOLUME_BYTES
INVALID_OFFSET_LAG = -1


def wanted_filter(req: pb.DescribeLogDirsRequest) -> Callable[[TopicPartition], bool]:
    """Which replicas the request asks for (all of them, or the listed partitions)."""
    if req.all_topics:
        return lambda tp: True
    wanted = {(t.topic, p) for t in req.topics for p in t.partitions}
    return wanted.__contains__


def _disk_space(d: Path) -> tuple[int, int]:
    usage = shutil.disk_usage(d)
    return usage.total, usage.free


async def describe_log_dirs(
    rm: ReplicaManager, req: pb.DescribeLogDirsRequest
) -> pb.DescribeLogDirsResponse:
    wanted = wanted_filter(req)
    out = pb.DescribeLogDirsResponse(broker_id=rm.broker_id)
    for d in rm.log_dirs.all:
        info = out.log_dirs.add(path=str(d))
        if d in rm.log_dirs.offline:
            info.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
            info.total_bytes = info.usable_bytes = UNKNOWN_BYTES
            continue
        try:
            info.total_bytes, info.usable_bytes = await asyncio.to_thread(_disk_space, d)
        except OSError as exc:  # the dir vanished under us: it goes offline
            log.warning("cannot read the log dir's disk space", log_dir=str(d), error=repr(exc))
            info.total_bytes = info.usable_bytes = UNKNOWN_BYTES
        for tp in rm.log_dirs.partitions_in(d):
            hosted = rm.hosted.get(tp)
            if hosted is None or not wanted(tp):
                continue
            try:
                size = rm.backend.size(hosted.log)
            except Exception:  # noqa: BLE001 - a log being deleted meanwhile
                continue
            info.replicas.add(
                topic=tp[0],
                partition=tp[1],
                size=size,
                offset_lag=offset_lag(rm, tp),
                is_future=False,
            )
    return out


def offset_lag(rm: ReplicaManager, tp: TopicPartition) -> int:
    p = rm.get(*tp)
    if p is None:
        return INVALID_OFFSET_LAG
    if p.is_leader:
        return 0
    if rm.fetchers is None:
        return INVALID_OFFSET_LAG
    leader_leo = rm.fetchers.leader_log_end_offset(tp)
    if leader_leo < 0:
        return INVALID_OFFSET_LAG
    return max(leader_leo - p.log.log_end_offset, 0)
