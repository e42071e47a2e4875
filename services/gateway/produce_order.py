"""Per connection and partition: no produce batch overtakes an earlier one that failed.

A Kafka client keeps one connection per broker and pipelines up to
``max.in.flight.requests.per.connection`` Produce requests on it. Against a Kafka broker, all
batches of one partition in flight on that connection go to the same broker, which handles a
connection's requests one at a time: when the leader moves, the batch that meets the moved
leader fails with NOT_LEADER_OR_FOLLOWER and so does every later batch of that partition. The
client refreshes its metadata and resends them in order to the new leader, which recognises
the ones it already holds (replicated from the old leader) by their producer sequence.

The gateway is one "broker" for the client but routes each batch to whichever storage node
leads the partition at that instant, and runs a connection's requests concurrently. Without
this module the batch after a failed one could reach the new leader before the failed batch's
retry: OUT_OF_ORDER_SEQUENCE_NUMBER, upon which an idempotent client bumps its epoch and
renumbers batches that were in fact stored - duplicates (issue 12 §0). Two rules restore what
a Kafka broker guarantees, per (connection, partition):

* **pinning** - while a batch is in flight to a storage node, later batches go to that same
  node even if the metadata has moved on; the old leader fails them as a Kafka broker would.
* **fencing after a failure** - once an idempotent batch failed with a retriable error, the
  later batches of the same producer id and epoch (higher sequence, sent before the client saw
  the failure) are answered NOT_LEADER_OR_FOLLOWER without being sent (truthfully "not
  persisted": the client refreshes its metadata and resends them in order), until the client's
  retry (a sequence at or below the failed one) or a new producer epoch arrives - or until
  the partition's leader shows the failed batch stored after all (``fence_to_check``,
  fence_check.py): the client may have resent it over another connection (a client keeps one
  per broker id, and several ids can name one gateway) or through another gateway, and would
  otherwise meet this fence on every later batch.

The state lives as long as the connection; it costs one dict entry per partition produced to.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from services.common.errors import RETRIABLE, ErrorCode
from services.common.records.batch import NO_PRODUCER_ID

_SEQ_SPACE = 1 << 31  # sequences wrap from int32 max to 0
_HALF = 1 << 30

TopicPartition = tuple[str, int]


def sequence_after(seq: int, other: int) -> bool:
    """Whether ``seq`` comes after ``other`` in the wrapping int32 sequence space."""
    return 0 < (seq - other) % _SEQ_SPACE < _HALF


@dataclass(slots=True)
class _Fence:
    producer_id: int
    producer_epoch: int
    sequence: int  # base sequence of the batch that failed
    checking: bool = False  # a look at the leader's producer state is under way


@dataclass(slots=True)
class _PartitionOrder:
    node: int = -1  # where the batches in flight went
    in_flight: int = 0
    fence: _Fence | None = None


class ProduceOrder:
    """The produce ordering state of one client connection."""

    __slots__ = ("_partitions", "_last_resend")

    def __init__(self) -> None:
        self._partitions: dict[TopicPartition, _PartitionOrder] = {}
        self._last_resend: asyncio.Future[None] | None = None

    def resend_turn(self) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """A place in line for resending KIP-890 held-back batches, taken (without awaiting)
        when their first answers come back: (the previous place, done once its resends
        started, or None; this one, which the caller must resolve once its resends started,
        also when it fails). Verifications of one connection run concurrently (and share
        coordinator requests); their resends start in the order the first answers came back."""
        previous = self._last_resend
        if previous is not None and previous.done():
            previous = None
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last_resend = mine
        return previous, mine

    def route(
        self, tp: TopicPartition, leader: int, producer: tuple[int, int, int]
    ) -> int | ErrorCode:
        """The storage node for a new batch of ``tp`` (``leader``: the metadata's leader;
        ``producer``: the batch's producer id, epoch and base sequence), or the error to
        answer it with, unsent."""
        state = self._partitions.get(tp)
        if state is None:
            return leader
        fence = state.fence
        if fence is not None:
            pid, epoch, seq = producer
            if (
                pid == fence.producer_id
                and epoch == fence.producer_epoch
                and sequence_after(seq, fence.sequence)
            ):
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            state.fence = None  # the retry, or a new producer (epoch): the failure was seen
        return state.node if state.in_flight else leader

    def fence_to_check(self, tp: TopicPartition) -> tuple[int, int, int] | None:
        """The fence of ``tp`` (producer id, epoch, failed base sequence) when a batch met it
        and no look at the leader is under way; marks it as being looked at."""
        state = self._partitions.get(tp)
        fence = state.fence if state is not None else None
        if fence is None or fence.checking:
            return None
        fence.checking = True
        return fence.producer_id, fence.producer_epoch, fence.sequence

    def fence_checked(self, tp: TopicPartition, fence: tuple[int, int, int], stale: bool) -> None:
        """The leader's answer for ``fence`` (from ``fence_to_check``): ``stale`` when the
        failed batch is in its log, which lifts the fence (if no newer failure replaced it)."""
        state = self._partitions.get(tp)
        current = state.fence if state is not None else None
        if state is None or current is None:
            return
        if (current.producer_id, current.producer_epoch, current.sequence) != fence:
            return
        current.checking = False
        if stale:
            state.fence = None
            if state.in_flight <= 0:
                del self._partitions[tp]

    def sent(self, tp: TopicPartition, node: int) -> None:
        """A batch of ``tp`` went to ``node``; ``answered`` must follow."""
        state = self._partitions.get(tp)
        if state is None:
            state = self._partitions[tp] = _PartitionOrder()
        state.node = node
        state.in_flight += 1

    def answered(
        self, tp: TopicPartition, producer: tuple[int, int, int], error: ErrorCode
    ) -> None:
        """A batch that ``sent`` counted has its answer."""
        state = self._partitions.get(tp)
        if state is None:
            return
        state.in_flight -= 1
        self.failed(tp, producer, error, state)
        if state.in_flight <= 0 and state.fence is None:
            del self._partitions[tp]

    def failed(
        self,
        tp: TopicPartition,
        producer: tuple[int, int, int],
        error: ErrorCode,
        state: _PartitionOrder | None = None,
    ) -> None:
        """Fence the later batches of an idempotent producer whose batch failed retriably
        (also for a batch that failed before it could be sent)."""
        pid, epoch, seq = producer
        if error == ErrorCode.NONE or error not in RETRIABLE or pid == NO_PRODUCER_ID:
            return
        if state is None:
            state = self._partitions.get(tp)
            if state is None:
                state = self._partitions[tp] = _PartitionOrder()
        fence = state.fence
        if (
            fence is None
            or fence.producer_id != pid
            or fence.producer_epoch != epoch
            or sequence_after(fence.sequence, seq)
        ):
            state.fence = _Fence(pid, epoch, seq)

    def __len__(self) -> int:
        return len(self._partitions)
