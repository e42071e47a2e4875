"""Producer id blocks claimed from ``/latest_producer_id_block``, as Kafka's ZkProducerIdManager.

The znode holds the last block handed out,
``{"version":1,"broker":<id>,"block_start":"<first>","block_end":"<last>"}``. Claiming the next
block is a conditional set on the znode version (retried on BadVersion), so two claimers never
get the same block. The first block starts at 0 (znode absent or empty).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError

from services.common.errors import ErrorCode, KafkaError
from services.common.zk import layout
from services.common.zk.client import AsyncZk

LONG_MAX = 2**63 - 1
DEFAULT_BLOCK_SIZE = 1000


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    broker_id: int
    first: int
    last: int

    @property
    def size(self) -> int:
        return self.last - self.first + 1


def parse_block(data: bytes | None) -> ProducerIdBlock | None:
    """The block stored in the znode (None when empty)."""
    if not data:
        return None
    d = json.loads(data)
    return ProducerIdBlock(int(d["broker"]), int(d["block_start"]), int(d["block_end"]))


async def claim_block(
    zk: AsyncZk, broker_id: int, block_size: int = DEFAULT_BLOCK_SIZE, max_attempts: int = 100
) -> ProducerIdBlock:
    """Claim the next block of ``block_size`` producer ids for ``broker_id``."""
    if block_size <= 0:
        raise ValueError("block_size must be > 0")
    path = layout.LATEST_PRODUCER_ID_BLOCK
    for _ in range(max_attempts):
        current = await zk.get_or_none(path)
        prev = parse_block(current[0]) if current is not None else None
        if prev is None:
            start = 0
        else:
            if prev.last > LONG_MAX - block_size:
                raise KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    "exhausted all producer ids: the next block would exceed int64",
                )
            start = prev.last + 1
        block = ProducerIdBlock(broker_id, start, start + block_size - 1)
        data = layout.producer_id_block_json(broker_id, block.first, block.last)
        try:
            if current is None:
                await zk.create(path, data, makepath=True)
            else:
                await zk.set(path, data, version=current[1].version)
        except (BadVersionError, NodeExistsError):
            continue  # another claimer won this round; read again
        return block
    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "could not claim a producer id block")


class ProducerIdManager:
    """Hands out producer ids one by one, claiming a new block when the current one runs out."""

    def __init__(self, zk: AsyncZk, broker_id: int, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._block_size = block_size
        self._block: ProducerIdBlock | None = None
        self._next = 0
        self._lock = asyncio.Lock()

    @property
    def current_block(self) -> ProducerIdBlock | None:
        return self._block

    async def next_id(self) -> int:
        block = self._block
        if block is not None and self._next <= block.last:
            pid = self._next
            self._next += 1
            return pid
        async with self._lock:
            block = self._block
            if block is None or self._next > block.last:
                block = await claim_block(self._zk, self._broker_id, self._block_size)
                self._block = block
                self._next = block.first
            pid = self._next
            self._next += 1
            return pid
