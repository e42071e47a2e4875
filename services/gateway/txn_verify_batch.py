"""KIP-890 verifications batched per transaction coordinator, as Kafka's
AddPartitionsToTxnManager does: at most one AddPartitionsToTxn v4 (verify-only) request in
flight per coordinator; verifications asked meanwhile wait and go together in the next one.

A transactional producer pipelines one Produce request per partition, and each partition's
first batch of a transaction needs a verification: without batching that is one coordinator
round trip (and its gRPC cost on both sides) per partition and transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from services.common.coordinator.clients import CoordinatorClients, ForwardError
from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.protocol import ApiKey

log = get_logger("gateway.txn_verification")

VERIFY_VERSION = 4  # AddPartitionsToTxn with verify_only
TopicPartition = tuple[str, int]
Codes = dict[TopicPartition, ErrorCode]
_Producer = tuple[str, int, int]  # transactional id, producer id, epoch


@dataclass(slots=True)
class _Ask:
    producer: _Producer
    partitions: list[TopicPartition]
    answer: asyncio.Future[Codes]


@dataclass(slots=True)
class _Queue:
    waiting: list[_Ask] = field(default_factory=list)
    sender: asyncio.Task[None] | None = None


class VerificationBatcher:
    def __init__(self, clients: CoordinatorClients, timeout_s: float) -> None:
        self._clients = clients
        self._timeout_s = timeout_s
        self._queues: dict[int, _Queue] = {}

    async def verify(
        self,
        coordinator: int,
        txn_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> Codes:
        """The coordinator's code per partition (an unreachable coordinator: its ForwardError
        code for every partition)."""
        ask = _Ask(
            (txn_id, producer_id, epoch),
            list(dict.fromkeys(partitions)),
            asyncio.get_running_loop().create_future(),
        )
        queue = self._queues.setdefault(coordinator, _Queue())
        queue.waiting.append(ask)
        if queue.sender is None:
            queue.sender = asyncio.ensure_future(self._send_all(coordinator, queue))
        return await asyncio.shield(ask.answer)

    async def _send_all(self, coordinator: int, queue: _Queue) -> None:
        try:
            while queue.waiting:
                batch, queue.waiting = _one_request(queue.waiting)
                await self._send(coordinator, batch)
        finally:
            queue.sender = None
            for ask in queue.waiting:  # only if this task was cancelled
                if not ask.answer.done():
                    ask.answer.set_result(dict.fromkeys(ask.partitions, ErrorCode.NOT_COORDINATOR))
            queue.waiting = []
            if self._queues.get(coordinator) is queue:
                del self._queues[coordinator]

    async def _send(self, coordinator: int, batch: list[_Ask]) -> None:
        merged: dict[_Producer, dict[str, list[int]]] = {}
        for ask in batch:
            topics = merged.setdefault(ask.producer, {})
            for topic, partition in ask.partitions:
                parts = topics.setdefault(topic, [])
                if partition not in parts:
                    parts.append(partition)
        body = {
            "transactions": [
                {
                    "transactional_id": txn_id,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "verify_only": True,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                }
                for (txn_id, pid, epoch), topics in merged.items()
            ]
        }
        by_txn: dict[str, Codes] = {}
        try:
            reply = await self._clients.forward(
                coordinator,
                ApiKey.ADD_PARTITIONS_TO_TXN,
                VERIFY_VERSION,
                body,
                client_id="gateway",
                client_host="",
                timeout_s=self._timeout_s,
            )
        except ForwardError as exc:
            log.info("txn_verification_failed", coordinator=coordinator, error=exc.code.name)
            failed = exc.code
        except Exception as exc:  # noqa: BLE001 - answered retriably, never left hanging
            log.warning("txn_verification_failed", coordinator=coordinator, error=repr(exc))
            failed = ErrorCode.NOT_COORDINATOR
        else:
            failed = ErrorCode.NONE
            top = _code(reply.get("error_code") or 0)
            for result in reply.get("results_by_transaction") or ():
                codes = by_txn.setdefault(result.get("transactional_id") or "", {})
                for topic in result.get("topic_results") or ():
                    for r in topic.get("results_by_partition") or ():
                        tp = (topic.get("name") or "", int(r.get("partition_index", -1)))
                        codes[tp] = top or _code(r.get("partition_error_code") or 0)
        for ask in batch:
            if ask.answer.done():
                continue
            if failed != ErrorCode.NONE:
                ask.answer.set_result(dict.fromkeys(ask.partitions, failed))
                continue
            codes = by_txn.get(ask.producer[0], {})
            ask.answer.set_result(
                {tp: codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in ask.partitions}
            )


def _one_request(waiting: list[_Ask]) -> tuple[list[_Ask], list[_Ask]]:
    """What fits in one request (a transactional id appears once, with one producer id and
    epoch; another producer of the same id waits for the next request), and the rest."""
    taken: dict[str, _Producer] = {}
    batch: list[_Ask] = []
    rest: list[_Ask] = []
    for ask in waiting:
        if taken.setdefault(ask.producer[0], ask.producer) == ask.producer:
            batch.append(ask)
        else:
            rest.append(ask)
    return batch, rest


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(int(value))
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
