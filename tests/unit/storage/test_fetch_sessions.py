"""The leader's fetch session store (KIP-227): ids, epochs, errors, eviction and marks.

Sessions driven by real followers and leaders (full -> incremental, add/remove, errors and the
ISR catch-up) are in test_replication_fetcher.py."""

from __future__ import annotations

import asyncio

import pytest

from services.common.errors import ErrorCode, KafkaError
from services.storage.fetch_sessions import (
    MAX_SESSION_ID,
    FetchSession,
    FetchSessions,
    SessionPartition,
    next_epoch,
)

A, B, C = ("a", 0), ("a", 1), ("b", 0)


def store() -> tuple[FetchSessions, list[tuple[int, tuple[str, int]]]]:
    caught_up: list[tuple[int, tuple[str, int]]] = []

    def on_quiet(s: FetchSession, sp: SessionPartition) -> None:
        caught_up.append((s.replica_id, sp.key))

    return FetchSessions(on_quiet, evict_ms=1000), caught_up


def test_epochs_wrap_to_one() -> None:
    assert [next_epoch(e) for e in (0, 1, 41)] == [1, 2, 42]
    assert next_epoch(MAX_SESSION_ID) == 1


def test_lookup_checks_id_follower_and_epoch() -> None:
    sessions, _ = store()
    s = sessions.open(replica_id=2, now_ms=0)
    assert s.id > 0 and s.epoch == 0
    assert sessions.lookup(s.id, 1, 2) is s
    with pytest.raises(KafkaError):  # epoch 0 opens a session: never incremental
        sessions.lookup(s.id, 0, 2)
    s.epoch = 1
    for session_id, epoch, replica, code in [
        (s.id, 0, 2, ErrorCode.INVALID_FETCH_SESSION_EPOCH),  # only a full fetch has epoch 0
        (s.id, 3, 2, ErrorCode.INVALID_FETCH_SESSION_EPOCH),  # one skipped
        (s.id + 1, 2, 2, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
        (s.id, 2, 3, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),  # another follower's session
    ]:
        with pytest.raises(KafkaError) as err:
            sessions.lookup(session_id, epoch, replica)
        assert err.value.code == code
    assert sessions.lookup(s.id, 2, 2) is s
    assert sessions.lookup(s.id, 1, 2) is s  # the last epoch again: a replay (begin)


def test_a_replayed_request_answers_again_what_the_lost_answer_held() -> None:
    sessions, _ = store()
    s = sessions.open(2, now_ms=0)
    for key in (A, B):
        sessions.put(s, key, 5, 0, 1, 1024)
        s.partitions[key].answered(9, 0)
        s.partitions[key].quiet = True
    s.dirty.clear()
    assert s.begin(1, now_ms=10) == 1
    s.answering.add(A)  # the answer to epoch 1 held A; it was abandoned by the follower
    assert s.begin(1, now_ms=20) == 2  # replayed
    assert s.dirty == {A} and not s.partitions[A].quiet and s.partitions[B].quiet
    assert s.partitions[A].sent_high_watermark == -2 and s.partitions[B].sent_high_watermark == 9
    assert s.last_fetch_ms == 20 and not s.answering
    s.dirty.clear()
    s.answering.add(B)
    s.begin(2, now_ms=30)  # the next epoch: the answer to 1 arrived
    assert not s.dirty and s.partitions[B].sent_high_watermark == 9


def test_new_session_replaces_the_followers_old_one_and_idle_ones_are_evicted() -> None:
    sessions, _ = store()
    old = sessions.open(2, now_ms=0)
    sessions.put(old, A, 5, 0, 1, 1024)
    other = sessions.open(3, now_ms=0)
    sessions.put(other, A, 5, 0, 1, 1024)
    new = sessions.open(2, now_ms=10)
    assert set(sessions.by_id) == {other.id, new.id} and not old.partitions
    sessions.mark(A)  # only sessions still open are marked
    assert other.dirty == {A} and not old.dirty and not new.dirty
    other.last_fetch_ms = 500
    new.last_fetch_ms = 1200
    sessions.evict_idle(now_ms=1600)  # other unused for 1,100 ms > 1,000
    assert set(sessions.by_id) == {new.id}
    with pytest.raises(KafkaError):
        sessions.lookup(other.id, 1, 3)


async def test_marks_wake_the_sessions_holding_the_partition_and_catch_up_quiet_ones() -> None:
    sessions, caught_up = store()
    s2, s3 = sessions.open(2, 0), sessions.open(3, 0)
    for s in (s2, s3):
        sessions.put(s, A, 5, 0, 1, 1024)
        sessions.put(s, B, 7, 0, 1, 1024)
        s.dirty.clear()
    s2.partitions[A].quiet = True  # s3's A is not quiet: it is visited anyway
    sessions.put(s3, C, 0, 0, 1, 1024)
    s3.dirty.clear()
    parked = asyncio.create_task(s2.wait(5.0))
    await asyncio.sleep(0)
    sessions.mark(A)
    assert await asyncio.wait_for(parked, 1.0) is True
    assert caught_up == [(2, A)]  # once, for the quiet one, before its visit
    assert s2.dirty == {A} and s3.dirty == {A} and not s2.partitions[A].quiet
    sessions.mark(A)
    assert caught_up == [(2, A)]
    sessions.mark(C)
    assert s2.dirty == {A} and s3.dirty == {A, C}
    sessions.forget(s3, C)
    assert C not in s3.dirty and C not in s3.partitions
    sessions.mark(C)  # held by no session any more
    assert C not in s3.dirty
    assert await s2.wait(0.01) is False  # nothing marked: the timeout


def test_a_listed_partition_is_answered_whatever_moved() -> None:
    """Listing is the follower's say that its state for the partition moved (or is new: a
    re-follow in the same leader epoch); the leader's next answer carries it."""
    sessions, _ = store()
    s = sessions.open(2, now_ms=0)
    sessions.put(s, A, 5, 0, 1, 1024)
    sp = s.partitions[A]
    sp.answered(9, 0)
    sp.quiet = True
    s.dirty.clear()
    sessions.put(s, A, 5, 0, 1, 1024)  # the same position and epoch, listed again
    assert (sp.sent_high_watermark, sp.sent_log_start_offset) == (-2, -2)
    assert not sp.quiet and s.dirty == {A}
