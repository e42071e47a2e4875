"""Long polls a connection keeps from one Fetch request to the next ("parked").

A caught-up consumer sends Fetch after Fetch. Each one long-polls every storage node that leads
one of its partitions. When one node answers, the others' long polls used to be cancelled, only
for the next Fetch to ask the same nodes the same thing a moment later (same partitions,
offsets, limits and isolation level), at the cost of a cancel and a new call per node. Now a
Fetch that answers with long polls still running leaves them here. The connection's next Fetch
takes over the one for a node when it asks that node exactly the same thing; one that finished
in between answers at once. The next Fetch cancels whatever it does not take over, and closing
the connection cancels the rest.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.gateway import metrics

_PARKED = metrics.FETCH_PARKED_CALLS.labels("parked")
_TAKEN = metrics.FETCH_PARKED_CALLS.labels("taken")
_CANCELLED = metrics.FETCH_PARKED_CALLS.labels("cancelled")

FetchKey = tuple[int, int, tuple[tuple[str, int, int, int, int], ...]]


def fetch_key(request: pb.FetchRequest, max_bytes: int) -> FetchKey:
    """What a node is asked, apart from how long to wait and for how many bytes; ``max_bytes``
    is the Fetch's (the node's share of it follows the offsets, and the gateway applies the
    Fetch's own limit to whatever the node answers). The partitions are in no particular order:
    librdkafka starts each Fetch's partition list one partition further on (fairness), and
    answers are matched by topic and partition."""
    return (
        request.isolation_level,
        max_bytes,
        tuple(
            sorted(
                (
                    p.topic,
                    p.partition,
                    p.fetch_offset,
                    p.partition_max_bytes,
                    p.current_leader_epoch,
                )
                for p in request.partitions
            )
        ),
    )


def _answered(task: asyncio.Future[Any]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None


def _cancel(task: asyncio.Future[Any]) -> None:
    """Cancel a parked call nobody took over (counted, whether or not it had answered)."""
    _CANCELLED.inc()
    task.cancel()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a parked call's failure as seen (nobody may await it any more)."""
    if not task.cancelled():
        task.exception()


_Entry = tuple[FetchKey, asyncio.Future[Any]]  # (what it asked, the call)


class ParkedPolls:
    """The long polls one Fetch took from the park, by node: each is taken over or cancelled."""

    def __init__(self, entries: dict[int, _Entry]) -> None:
        self._entries = entries

    def take(self, node: int, key: FetchKey, *, running_ok: bool) -> asyncio.Future[Any] | None:
        """The parked call to ``node`` if it asked for ``key`` and either answered or, when
        ``running_ok``, is still waiting. A call for ``key`` still waiting is otherwise left
        for a later round; a call parked for anything else is cancelled."""
        entry = self._entries.get(node)
        if entry is None:
            return None
        parked_key, task = entry
        if parked_key == key and not task.done() and not running_ok:
            return None
        del self._entries[node]
        if parked_key == key and (_answered(task) or not task.done()):
            _TAKEN.inc()
            return task
        _cancel(task)
        return None

    def give_back(self, park: FetchPark | None) -> None:
        """Park again what was not taken and still waits (unless the node got a newer call),
        cancel the rest."""
        for node, (key, task) in self._entries.items():
            if park is not None and not task.done() and not park.has(node):
                park.park(node, key, task, again=True)
            else:
                _cancel(task)
        self._entries.clear()


class FetchPark:
    """One connection's parked long polls, at most one per storage node."""

    def __init__(self) -> None:
        self._parked: dict[int, _Entry] = {}

    def __len__(self) -> int:
        return len(self._parked)

    def has(self, node: int) -> bool:
        return node in self._parked

    def take_all(self) -> ParkedPolls:
        parked, self._parked = self._parked, {}
        return ParkedPolls(parked)

    def park(
        self, node: int, key: FetchKey, task: asyncio.Future[Any], *, again: bool = False
    ) -> None:
        """Keep ``task`` (a long poll that asked ``key``; ``again``: one a Fetch took from the
        park and did not use) for the connection's next Fetch, in place of anything parked for
        ``node``."""
        old = self._parked.pop(node, None)
        if old is not None and old[1] is not task:
            _cancel(old[1])
        if task.done() and not _answered(task):
            return
        if not again:
            _PARKED.inc()
            task.add_done_callback(_retrieve)
        self._parked[node] = (key, task)

    def clear(self) -> None:
        """Cancel everything (the connection is closing)."""
        for _, task in self._parked.values():
            _cancel(task)
        self._parked.clear()
