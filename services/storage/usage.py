"""Disk use of this storage node, published for the controller's rebalancer and autoscaler.

Every ``kafkapy.usage.report.interval.ms`` the node writes the ephemeral
``/kafka-py/storage-usage/<id>`` (services.common.zk.elastic): the bytes of its replicas in
total, how many they are, the node's capacity (``kafkapy.storage.capacity.bytes``, or the size of
the file system of its first log dir) and the client bytes appended so far. Totals only: the
controller asks each replica's size (Storage.DescribeLogDirs) when it plans moves.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from kazoo.exceptions import NodeExistsError, NoNodeError
from prometheus_client import Counter

from services.common.logging import get_logger
from services.common.zk import elastic
from services.common.zk.client import AsyncZk
from services.storage.replica_manager import ReplicaManager

log = get_logger("storage.usage")


def counter_total(counter: Counter | None) -> int:
    """Sum of a labelled prometheus Counter over its labels."""
    if counter is None:
        return 0
    return int(
        sum(s.value for m in counter.collect() for s in m.samples if s.name.endswith("_total"))
    )


def capacity_of(configured: int, log_dirs: list[Path]) -> int:
    if configured > 0:
        return configured
    return sum(shutil.disk_usage(d).total for d in log_dirs[:1])


class UsageReporter:
    def __init__(
        self,
        zk: AsyncZk,
        broker_id: int,
        rm: ReplicaManager,
        capacity_bytes: int,
        bytes_in: Callable[[], int],
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.rm = rm
        self.capacity_bytes = capacity_bytes
        self.bytes_in = bytes_in
        self.path = elastic.usage_path(broker_id)

    def snapshot(self) -> elastic.StorageUsage:
        return elastic.StorageUsage(
            self.broker_id,
            self.rm.usage_bytes(),  # only the logs changed since the last report are measured
            self.capacity_bytes,
            self.bytes_in(),
            int(time.time() * 1000),
            len(self.rm.hosted),
        )

    async def report(self) -> None:
        data = self.snapshot().to_json()
        try:
            await self.zk.set(self.path, data)
        except NoNodeError:
            try:
                await self.zk.ensure_path(elastic.STORAGE_USAGE)
                await self.zk.create(self.path, data, ephemeral=True)
            except NodeExistsError:  # a previous session's node, not expired yet
                await self.zk.set(self.path, data)
