"""KIP-890 verifications batched per coordinator (``txn_verify_batch``), answered by the real
transaction coordinator state machine (``api.handle`` over an in-memory store)."""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.coordinator.clients import ForwardError
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.gateway.txn_verify_batch import VerificationBatcher
from tests.unit.gateway.fakes import FakeCoordinators
from tests.unit.transaction_coordinator.test_transactions import Env

E = ErrorCode


def _batcher(env: Env, gate: asyncio.Event | None = None) -> tuple[VerificationBatcher, Any]:
    async def answer(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if gate is not None:
            await gate.wait()
        return await env.call(api_key, version, **body)

    clients = FakeCoordinators(answer)
    return VerificationBatcher(clients, 5.0), clients  # type: ignore[arg-type]


async def test_verifications_asked_while_one_is_in_flight_share_the_next_request() -> None:
    env = Env()
    await env.init()
    await env.init(txn="other")
    await env.add(4000, 0, {"a": [0, 1, 2]})
    await env.add(4001, 0, {"b": [0]}, txn="other")
    gate = asyncio.Event()
    batcher, clients = _batcher(env, gate)
    first = asyncio.ensure_future(batcher.verify(0, "tx", 4000, 0, [("a", 0)]))
    await asyncio.sleep(0)
    later = [
        asyncio.ensure_future(batcher.verify(0, "tx", 4000, 0, [("a", 1)])),
        asyncio.ensure_future(batcher.verify(0, "tx", 4000, 0, [("a", 2), ("a", 3)])),
        asyncio.ensure_future(batcher.verify(0, "other", 4001, 0, [("b", 0)])),
        asyncio.ensure_future(batcher.verify(0, "tx", 4000, 1, [("a", 1)])),  # fenced epoch
    ]
    await asyncio.sleep(0)
    gate.set()
    assert await first == {("a", 0): E.NONE}
    assert await later[0] == {("a", 1): E.NONE}
    assert await later[1] == {("a", 2): E.NONE, ("a", 3): E.INVALID_TXN_STATE}
    assert await later[2] == {("b", 0): E.NONE}
    assert await later[3] == {("a", 1): E.PRODUCER_FENCED}
    # one request for the first, one for the three that waited with it, one for the other
    # producer epoch of "tx" (a transactional id appears once per request)
    bodies = [call[3] for call in clients.calls]
    assert [call[1:3] for call in clients.calls] == [(ApiKey.ADD_PARTITIONS_TO_TXN, 4)] * 3
    assert [[t["transactional_id"] for t in b["transactions"]] for b in bodies] == [
        ["tx"], ["tx", "other"], ["tx"]
    ]  # fmt: skip
    assert bodies[1]["transactions"][0]["topics"] == [{"name": "a", "partitions": [1, 2, 3]}]
    assert all(t["verify_only"] for b in bodies for t in b["transactions"])


async def test_an_unreachable_coordinator_answers_every_waiter() -> None:
    async def unreachable(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        raise ForwardError(E.NOT_COORDINATOR, "gone")

    batcher = VerificationBatcher(FakeCoordinators(unreachable), 5.0)  # type: ignore[arg-type]
    answers = await asyncio.gather(
        batcher.verify(0, "tx", 1, 0, [("a", 0)]), batcher.verify(0, "tx", 1, 0, [("a", 1)])
    )
    assert answers == [{("a", 0): E.NOT_COORDINATOR}, {("a", 1): E.NOT_COORDINATOR}]
    # nothing left behind: the next verification starts a new request
    assert await batcher.verify(0, "tx", 1, 0, [("a", 2)]) == {("a", 2): E.NOT_COORDINATOR}
