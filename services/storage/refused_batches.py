"""Idempotent batches a leader refused before appending them, per producer, so that the batch
right behind one of them is answered with the same refusal instead of
OUT_OF_ORDER_SEQUENCE_NUMBER.

A client pipelines up to 5 batches of a partition. When R1 is refused with a retriable error
(NOT_ENOUGH_REPLICAS while the ISR is below min.insync.replicas, NOT_LEADER_OR_FOLLOWER while
this node's LeaderAndIsr order is on its way) and the condition clears before the pipelined R2
arrives, R2's sequence no longer follows what the log holds: Kafka answers
OUT_OF_ORDER_SEQUENCE_NUMBER. librdkafka (2.16) takes that, on a batch that is not first in
line, for "skipped sequence numbers": it bumps the producer epoch and renumbers every
unacknowledged batch of *every* partition from 0, so a batch elsewhere that was stored but not
acknowledged (NOT_ENOUGH_REPLICAS_AFTER_APPEND, a timeout) is stored a second time
(librdkafka issue 4953; kafka-py checker seed 540026937). The gap in R2's sequence is exactly
the batch refused here, so R2 gets R1's answer: retriable, not persisted, and the client resends
both in order. Any other gap is still OUT_OF_ORDER_SEQUENCE_NUMBER. (The log's end sequence is
not consulted: should an older gap lie before R1 as well, R1's retry, now first in line, meets it
and gets the out-of-order answer Kafka would give.)

A refusal is forgotten once that producer appends, and after ``TTL_MS`` (a client that gave R1
up has bumped its epoch or failed by then: librdkafka's default ``message.timeout.ms`` is 300 s,
its request timeout 30 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.common.errors import ErrorCode
from services.common.records.batch import NO_PRODUCER_ID, BatchHeader

TTL_MS = 30_000


@dataclass(slots=True)
class _Refused:
    epoch: int
    first_seq: int
    last_seq: int
    code: ErrorCode
    at_ms: int


def _idempotent(headers: Sequence[BatchHeader]) -> tuple[int, int, int, int] | None:
    """(producer id, epoch, first sequence, last sequence) of an append's idempotent batches."""
    first = next((h for h in headers if h.producer_id != NO_PRODUCER_ID), None)
    if first is None or first.base_sequence < 0 or first.is_control:
        return None
    last = headers[-1]
    return first.producer_id, first.producer_epoch, first.base_sequence, last.last_sequence


class RefusedBatches:
    """The refused-but-retriable idempotent batches of one partition."""

    __slots__ = ("_by_producer",)

    def __init__(self) -> None:
        self._by_producer: dict[int, _Refused] = {}

    def __len__(self) -> int:
        return len(self._by_producer)

    def refused(self, headers: Sequence[BatchHeader], code: ErrorCode, now_ms: int) -> None:
        """The append of ``headers`` was refused with ``code`` before anything was written."""
        batch = _idempotent(headers)
        if batch is None:
            return
        pid, epoch, first, last = batch
        prior = self._by_producer.get(pid)
        if prior is not None and prior.epoch == epoch and first == prior.last_seq + 1:
            prior.last_seq, prior.code, prior.at_ms = last, code, now_ms  # R2 behind R1: one gap
            return
        if (
            prior is not None
            and prior.epoch == epoch
            and prior.first_seq <= first <= prior.last_seq
        ):
            prior.code, prior.at_ms = code, now_ms  # a retry refused again
            return
        self._forget_expired(now_ms)
        self._by_producer[pid] = _Refused(epoch, first, last, code, now_ms)

    def _forget_expired(self, now_ms: int) -> None:
        """Drop refusals older than TTL_MS (a follower refuses producers that never append
        here: without this they would pile up)."""
        expired = [pid for pid, r in self._by_producer.items() if now_ms - r.at_ms > TTL_MS]
        for pid in expired:
            del self._by_producer[pid]

    def appended(self, headers: Sequence[BatchHeader]) -> None:
        """``headers`` were written (or recognised as duplicates): the producer moved on."""
        if self._by_producer:
            for h in headers:
                self._by_producer.pop(h.producer_id, None)

    def explains(self, headers: Sequence[BatchHeader], now_ms: int) -> _Refused | None:
        """The refusal whose batches are exactly the gap before ``headers`` (which the log
        answered OUT_OF_ORDER_SEQUENCE_NUMBER), if any."""
        batch = _idempotent(headers)
        if batch is None:
            return None
        pid, epoch, first, _ = batch
        prior = self._by_producer.get(pid)
        if prior is None:
            return None
        if now_ms - prior.at_ms > TTL_MS:
            del self._by_producer[pid]
            return None
        if prior.epoch == epoch and prior.first_seq < first <= prior.last_seq + 1:
            return prior
        return None
