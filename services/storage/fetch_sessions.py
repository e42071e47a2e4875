"""Fetch sessions of follower fetches, leader side (KIP-227), and what makes an idle one free.

A follower opens a session with a full fetch (session id 0, epoch 0: every followed partition
listed); the leader keeps, per partition, what the follower told it (fetch offset, log start,
leader epoch) and what it last answered (high watermark, log start). Later fetches are
incremental (the session's id and next epoch): they list only the partitions that were added or
whose fetch offset, log start or leader epoch changed, and ``forgotten`` the removed ones. An
unknown id answers FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH; the
follower then opens a new session with a full fetch. A session unused for SESSION_EVICT_MS goes
(Kafka's fetch session cache eviction), as does a follower's previous session when it opens a
new one (it keeps one per leader). A request repeating the session's last epoch is a replay: the
follower abandoned that request (its partition set grew) without knowing whether the leader saw
it, so the leader answers again what that answer held (``FetchSession.begin``).

Unlike Kafka, which visits every session partition at each fetch, the leader here visits only a
session's *dirty* partitions: those the follower listed, those marked since (the replica
manager marks a partition whenever its log end, high watermark, log start or leadership may have
moved: ``mark``), and those not yet settled (the follower lags, is outside the ISR, or its last
answer was not everything). A settled partition is *quiet*: the follower was at the leader's log
end with nothing more to learn. An idle session's fetch therefore costs O(1) on both sides.

The ISR catch: a quiet partition's follower state (``RemoteReplica``) is not updated at each
fetch, so its last caught-up time would go stale while the follower keeps fetching. When a quiet
partition is marked, ``on_quiet_marked`` (the replica manager) first records it as fetched at
the session's last fetch time at the log end offset the leader had then, which is the fetch
offset the follower last sent (nothing moved the log end while it was quiet), before the change
is counted. A follower whose fetches stopped keeps the time of its last one and leaves the ISR
replica.lag.time.max.ms after it, as before.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from services.common.errors import ErrorCode, KafkaError

TopicPartition = tuple[str, int]

SESSION_EVICT_MS = 120_000  # Kafka's FetchSessionCache eviction of unused sessions
INITIAL_EPOCH = 0
MAX_SESSION_ID = (1 << 31) - 1


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``: 1, 2, ... wrapping to 1 after INT32_MAX."""
    return 1 if epoch >= MAX_SESSION_ID else epoch + 1


class SessionPartition:
    """One partition of a session: what the follower said, and what the leader last answered."""

    __slots__ = (
        "key",
        "fetch_offset",
        "log_start_offset",
        "current_leader_epoch",
        "max_bytes",
        "sent_high_watermark",
        "sent_log_start_offset",
        "quiet",
    )

    def __init__(self, key: TopicPartition) -> None:
        self.key = key
        self.fetch_offset = 0
        self.log_start_offset = 0
        self.current_leader_epoch = -1
        self.max_bytes = 0
        self.sent_high_watermark = -2  # never answered: the next visit answers it
        self.sent_log_start_offset = -2
        self.quiet = False

    def answered(self, high_watermark: int, log_start_offset: int) -> None:
        self.sent_high_watermark = high_watermark
        self.sent_log_start_offset = log_start_offset


class FetchSession:
    __slots__ = (
        "id",
        "replica_id",
        "epoch",
        "partitions",
        "dirty",
        "answering",
        "generation",
        "last_fetch_ms",
        "_waiter",
    )

    def __init__(self, session_id: int, replica_id: int, now_ms: int) -> None:
        self.id = session_id
        self.replica_id = replica_id
        self.epoch = INITIAL_EPOCH  # of the last request handled
        self.partitions: dict[TopicPartition, SessionPartition] = {}
        self.dirty: set[TopicPartition] = set()  # to visit at the next fetch (or wake-up)
        # answered by the last request: unanswered again if the follower replays it
        self.answering: set[TopicPartition] = set()
        self.generation = 0  # requests handled: a parked one stops when a newer one comes
        self.last_fetch_ms = now_ms  # when the last fetch of this session arrived
        self._waiter: asyncio.Future[None] | None = None

    def begin(self, epoch: int, now_ms: int) -> int:
        """A request of the session arrives (``epoch`` checked by ``lookup``): a replay of the
        last one (its answer was lost: the follower abandoned it) makes the leader answer again
        what that answer held. A fetch still parked on the session ends. Returns the request's
        generation."""
        if epoch == self.epoch and epoch != INITIAL_EPOCH:
            for key in self.answering:
                sp = self.partitions.get(key)
                if sp is not None:
                    sp.answered(-2, -2)
                    sp.quiet = False
                    self.dirty.add(key)
        self.answering = set()
        self.epoch = epoch
        self.last_fetch_ms = now_ms
        self.generation += 1
        self.wake()
        return self.generation

    def wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def wait(self, timeout_s: float) -> bool:
        """Until a partition of the session is marked (True) or ``timeout_s`` passed."""
        if timeout_s <= 0:
            return False
        w = self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout_s):
                await w
            return True
        except TimeoutError:
            return False
        finally:
            if self._waiter is w:
                self._waiter = None


class FetchSessions:
    """The leader's sessions, indexed by id, by follower and by partition (for ``mark``)."""

    def __init__(
        self,
        on_quiet_marked: Callable[[FetchSession, SessionPartition], None],
        evict_ms: int = SESSION_EVICT_MS,
    ) -> None:
        self.on_quiet_marked = on_quiet_marked
        self.evict_ms = evict_ms
        self.by_id: dict[int, FetchSession] = {}
        self._by_replica: dict[int, FetchSession] = {}
        self._of_key: dict[TopicPartition, list[FetchSession]] = {}

    def __len__(self) -> int:
        return len(self.by_id)

    # ---- sessions -----------------------------------------------------------------------
    def open(self, replica_id: int, now_ms: int) -> FetchSession:
        """A new session for a full fetch; the follower's previous one is closed."""
        old = self._by_replica.get(replica_id)
        if old is not None:
            self.close(old)
        session_id = 0
        while session_id == 0 or session_id in self.by_id:
            session_id = random.randint(1, MAX_SESSION_ID)
        s = FetchSession(session_id, replica_id, now_ms)
        self.by_id[session_id] = s
        self._by_replica[replica_id] = s
        return s

    def of_replica(self, replica_id: int) -> FetchSession | None:
        """The follower's open session, if any."""
        return self._by_replica.get(replica_id)

    def lookup(self, session_id: int, epoch: int, replica_id: int) -> FetchSession:
        """The session an incremental fetch continues (Kafka's errors when it cannot): its next
        epoch, or its last one again (a replay: see ``FetchSession.begin``)."""
        s = self.by_id.get(session_id)
        if s is None or s.replica_id != replica_id:
            raise KafkaError(
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND, f"fetch session {session_id} not found"
            )
        if epoch != next_epoch(s.epoch) and (epoch != s.epoch or epoch == INITIAL_EPOCH):
            raise KafkaError(
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                f"fetch session {session_id} expected epoch {next_epoch(s.epoch)}, got {epoch}",
            )
        return s

    def close(self, s: FetchSession) -> None:
        if self.by_id.get(s.id) is not s:
            return
        del self.by_id[s.id]
        if self._by_replica.get(s.replica_id) is s:
            del self._by_replica[s.replica_id]
        for key in s.partitions:
            self._unindex(key, s)
        s.partitions = {}
        s.dirty = set()
        s.wake()  # a fetch parked on it answers now

    def evict_idle(self, now_ms: int) -> None:
        """Close sessions unused for ``evict_ms`` (O(sessions): one per follower broker)."""
        for s in [s for s in self.by_id.values() if now_ms - s.last_fetch_ms > self.evict_ms]:
            self.close(s)

    # ---- partitions of a session ----------------------------------------------------------
    def put(
        self,
        s: FetchSession,
        key: TopicPartition,
        fetch_offset: int,
        log_start_offset: int,
        current_leader_epoch: int,
        max_bytes: int,
    ) -> None:
        """A partition listed by a fetch: added, or its follower's position updated; either
        way the answer to this fetch carries it."""
        sp = s.partitions.get(key)
        if sp is None:
            sp = s.partitions[key] = SessionPartition(key)
            self._of_key.setdefault(key, []).append(s)
        else:
            # listed: answered whatever moved (the follower's state for it may be new: a
            # re-follow, a new leadership; its position moved, so the HW usually did too)
            sp.answered(-2, -2)
        sp.fetch_offset = fetch_offset
        sp.log_start_offset = log_start_offset
        sp.current_leader_epoch = current_leader_epoch
        sp.max_bytes = max_bytes
        sp.quiet = False
        s.dirty.add(key)

    def forget(self, s: FetchSession, key: TopicPartition) -> None:
        if s.partitions.pop(key, None) is not None:
            self._unindex(key, s)
        s.dirty.discard(key)

    def _unindex(self, key: TopicPartition, s: FetchSession) -> None:
        sessions = self._of_key.get(key)
        if sessions is None:
            return
        if s in sessions:
            sessions.remove(s)
        if not sessions:
            del self._of_key[key]

    # ---- marks ----------------------------------------------------------------------------
    def mark(self, key: TopicPartition) -> None:
        """``key``'s log end, high watermark, log start or leadership may have moved: each
        session holding it visits it at its next fetch (a parked fetch wakes up). A quiet
        partition's follower state is first brought up to the session's last fetch."""
        sessions = self._of_key.get(key)
        if not sessions:
            return
        for s in sessions:
            sp = s.partitions[key]
            if sp.quiet:
                sp.quiet = False
                self.on_quiet_marked(s, sp)
            s.dirty.add(key)
            s.wake()
