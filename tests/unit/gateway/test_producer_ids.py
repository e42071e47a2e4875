"""Producer id blocks from /latest_producer_id_block and the InitProducerId handler."""

from __future__ import annotations

import asyncio
import json

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.common.zk.producer_ids import ProducerIdManager, claim_block
from services.gateway.handlers import init_producer_id

from .fakes import context, services


async def test_blocks_are_claimed_in_sequence_and_never_twice(zk_connect: str) -> None:
    zks = [AsyncZk(zk_connect) for _ in range(3)]
    for zk in zks:
        await zk.start()
    try:
        first = await claim_block(zks[0], broker_id=7, block_size=10)
        assert (first.first, first.last, first.broker_id) == (0, 9, 7)
        data, _ = await zks[0].get(layout.LATEST_PRODUCER_ID_BLOCK)
        assert json.loads(data) == {"version": 1, "broker": 7, "block_start": "0", "block_end": "9"}
        # concurrent claimers (conditional sets on the znode version) get disjoint blocks
        blocks = await asyncio.gather(*(claim_block(zk, i, 10) for i, zk in enumerate(zks * 4)))
        starts = sorted(b.first for b in blocks)
        assert starts == list(range(10, 130, 10))
    finally:
        for zk in zks:
            await zk.stop()


async def test_manager_hands_out_ids_across_blocks(zk_connect: str) -> None:
    zk = AsyncZk(zk_connect)
    await zk.start()
    try:
        await zk.create(layout.LATEST_PRODUCER_ID_BLOCK, b"", makepath=True)  # empty: start at 0
        a = ProducerIdManager(zk, 1, block_size=3)
        b = ProducerIdManager(zk, 2, block_size=3)
        ids = await asyncio.gather(
            *(a.next_id() for _ in range(5)), *(b.next_id() for _ in range(2))
        )
        assert len(set(ids)) == 7
        assert sorted(ids[:5]) == ids[:5]
        assert a.current_block is not None and a.current_block.broker_id == 1
    finally:
        await zk.stop()


class _Ids:
    def __init__(self) -> None:
        self.next = 41

    async def next_id(self) -> int:
        self.next += 1
        return self.next


async def test_init_producer_id_handler() -> None:
    svc = services()
    svc.producer_ids = _Ids()  # type: ignore[assignment]
    ctx = context(svc, ApiKey.INIT_PRODUCER_ID, 4)
    base = {"transactional_id": None, "transaction_timeout": 60000}
    resp = await init_producer_id.handle(ctx, base)
    assert (resp["error_code"], resp["producer_id"], resp["producer_epoch"]) == (0, 42, 0)
    # KIP-360 re-init of an idempotent producer: a fresh id, as Kafka does
    resp = await init_producer_id.handle(ctx, {**base, "producer_id": 42, "producer_epoch": 0})
    assert (resp["producer_id"], resp["producer_epoch"]) == (43, 0)
    resp = await init_producer_id.handle(ctx, {**base, "producer_id": 42, "producer_epoch": -1})
    assert resp["error_code"] == ErrorCode.INVALID_REQUEST
    # a transactional id goes to its transaction coordinator: none is known here (retriable)
    resp = await init_producer_id.handle(ctx, {**base, "transactional_id": "tx"})
    assert resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert resp["producer_id"] == -1
    resp = await init_producer_id.handle(ctx, {**base, "transactional_id": ""})
    assert resp["error_code"] == ErrorCode.INVALID_REQUEST
