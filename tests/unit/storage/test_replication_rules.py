"""Replication rules as pure decisions: follower truncation (KIP-101/279), the leader's ISR
expand/shrink conditions and high-watermark advancement (Kafka's Partition)."""

from __future__ import annotations

from typing import Any

import pytest

from services.common.errors import ErrorCode
from services.common.records.batch import iter_headers
from services.common.records.record import Record, build_batch
from services.storage.partition import Partition, PartitionOrder
from services.storage.replication.batches import follower_batches
from services.storage.replication.fetcher import backoff_s
from services.storage.replication.truncation import Truncation, decide_truncation

ME = 1
LAG_MS = 10_000


# ---- truncation decision --------------------------------------------------------------------
def local_cache(entries: list[tuple[int, int]], leo: int) -> Any:
    """The follower's epoch cache lookup (same rules as LeaderEpochCache.end_offset_for)."""

    def end_offset_for(epoch: int) -> tuple[int, int]:
        if epoch == -1 or not entries:
            return -1, -1
        if entries[-1][0] == epoch:
            return epoch, leo
        higher = [e for e in entries if e[0] > epoch]
        if not higher:
            return -1, -1
        lower = [e for e in entries if e[0] <= epoch]
        return (lower[-1][0] if lower else epoch), higher[0][1]

    return end_offset_for


def decide(
    leader_epoch: int, leader_end: int, entries: list[tuple[int, int]], leo: int, hw: int = 0
) -> Truncation:
    return decide_truncation(
        leader_epoch,
        leader_end,
        log_end_offset=leo,
        high_watermark=hw,
        local_end_offset_for=local_cache(entries, leo),
    )


def test_truncation_same_epoch_cuts_to_the_smaller_end() -> None:
    # follower wrote epoch 1 up to 120, the leader's epoch 1 ended at 100 (its epoch 2 starts)
    assert decide(1, 100, [(0, 0), (1, 50)], leo=120) == Truncation(100, True)
    # leader has more of epoch 1 than we do: nothing to cut
    assert decide(1, 150, [(0, 0), (1, 50)], leo=120) == Truncation(120, True)


def test_truncation_follower_ahead_in_an_epoch_the_leader_never_saw() -> None:
    # we led epoch 2 (offsets 100..130) but the new leader only knows epochs 0 and 1: asked for
    # our latest epoch 2, it answers epoch 1 ending at 110; our epoch 1 ends at 100 (where our
    # epoch 2 starts): final, cut at 100
    assert decide(1, 110, [(0, 0), (1, 50), (2, 100)], leo=130) == Truncation(100, True)


def test_truncation_answer_with_an_epoch_we_never_had_is_not_final() -> None:
    # we have epochs 0 and 2, the leader answers epoch 1 (which we never saw): cut where our
    # largest epoch below it (0) ends and ask again with epoch 0 (KIP-279)
    assert decide(1, 110, [(0, 0), (2, 100)], leo=130) == Truncation(100, False)
    assert decide(0, 90, [(0, 0)], leo=100) == Truncation(90, True)


def test_truncation_undefined_answer_falls_back_to_high_watermark() -> None:
    assert decide(-1, -1, [(0, 0), (3, 40)], leo=90, hw=70) == Truncation(70, True)
    assert decide(-1, -1, [(0, 0)], leo=20, hw=70) == Truncation(20, True)


def test_truncation_epoch_older_than_anything_local() -> None:
    # the leader answers with an epoch below all of ours: our lookup returns the start of our
    # first epoch as its end (requested epoch echoed), and the smaller offset wins
    assert decide(2, 60, [(5, 40), (6, 80)], leo=100) == Truncation(40, True)


def test_truncation_answer_without_epoch_uses_leader_offset() -> None:
    assert decide(-1, 55, [(0, 0)], leo=80) == Truncation(55, True)


# ---- ISR rules and the high watermark --------------------------------------------------------
class EpochCache:
    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        if not self.entries or epoch > self.entries[-1][0]:
            self.entries.append((epoch, start_offset))

    def assign_unwritten(self, epoch: int, start_offset: int) -> bool:
        before = len(self.entries)
        self.assign(epoch, start_offset)
        return len(self.entries) != before

    def write(self) -> None:
        pass

    def epoch_for_offset(self, offset: int) -> int | None:
        return None

    def end_offset_for(self, epoch: int, leo: int | None = None) -> tuple[int, int]:
        return -1, -1


class MiniLog:
    def __init__(self, leo: int) -> None:
        self.log_start_offset = 0
        self.log_end_offset = leo
        self._hw = 0
        self.recovery_point = 0
        self.leader_epoch_cache = EpochCache()

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, v: int) -> None:
        self._hw = min(max(v, self.log_start_offset), self.log_end_offset)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def leader(
    leo: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (ME, 2, 3), epoch: int = 1
) -> tuple[Partition, Clock]:
    clock = Clock()
    p = Partition("t", 0, MiniLog(leo), ME, {}, replica_lag_time_max_ms=LAG_MS, clock=clock)  # type: ignore[arg-type]
    p.make_leader(PartitionOrder(ME, epoch, isr, replicas, partition_epoch=4), clock.now)
    return p, clock


def fetch_at(p: Partition, replica: int, offset: int, clock: Clock) -> bool:
    return p.update_follower_fetch(replica, offset, 0, clock.now)


def test_hw_is_min_leo_over_isr_and_waits_for_unknown_positions() -> None:
    p, clock = leader(100, (ME, 2, 3))
    assert p.leader_epoch_start_offset == 100
    assert p.high_watermark == 0
    assert not fetch_at(p, 2, 100, clock)  # replica 3's position is still unknown
    assert fetch_at(p, 3, 60, clock)
    assert p.high_watermark == 60
    assert fetch_at(p, 3, 100, clock) and p.high_watermark == 100
    p.log.log_end_offset = 130  # type: ignore[misc]
    assert not fetch_at(p, 2, 80, clock)  # a follower going back never moves the HW back
    assert p.high_watermark == 100


def test_hw_counts_followers_caught_up_recently_even_outside_the_isr() -> None:
    p, clock = leader(100, (ME, 2))
    assert fetch_at(p, 3, 100, clock) is False  # caught up, not in the ISR; 2 unknown
    fetch_at(p, 2, 100, clock)
    assert p.high_watermark == 100
    p.log.log_end_offset = 150  # type: ignore[misc]
    clock.now += 100
    fetch_at(p, 2, 150, clock)
    # replica 3 caught up 100 ms ago (within the lag time) at 100: it holds the HW there
    assert p.high_watermark == 100
    clock.now += LAG_MS + 1
    fetch_at(p, 2, 150, clock)
    assert p.high_watermark == 150  # 3 fell out of "recently caught up"


def test_maximal_isr_holds_the_hw_while_an_expansion_is_written() -> None:
    p, clock = leader(100, (ME,), replicas=(ME, 2))
    assert p.high_watermark == 100  # alone in the ISR
    p.log.log_end_offset = 120  # type: ignore[misc]
    clock.now += LAG_MS + 1
    p.begin_isr_change((ME, 2))
    assert p.maximal_isr == (ME, 2)
    fetch_at(p, 2, 100, clock)
    assert p.high_watermark == 100  # 2 is pending: the HW waits for it
    assert p.complete_isr_change(1, 4, (ME, 2), 5)
    assert (p.isr, p.partition_epoch, p.pending_isr) == ((ME, 2), 5, None)


def test_expand_needs_hw_and_epoch_start_offset() -> None:
    p, clock = leader(100, (ME, 2), replicas=(ME, 2, 3))
    fetch_at(p, 2, 100, clock)
    assert p.high_watermark == 100
    fetch_at(p, 3, 90, clock)
    assert p.isr_to_expand(3) is None  # below the HW
    fetch_at(p, 3, 100, clock)
    assert p.isr_to_expand(3) == (ME, 2, 3)
    assert p.isr_to_expand(2) is None  # already in
    assert p.isr_to_expand(9) is None  # not a replica
    p.begin_isr_change((ME, 2, 3))
    assert p.isr_to_expand(3) is None  # one change at a time


def test_expand_refuses_a_follower_behind_the_epoch_start() -> None:
    # HW (from the checkpoint) is below the start of this leader's epoch: a follower at the HW
    # but below the epoch start has not truncated against this leader yet
    p, clock = leader(100, (ME,), replicas=(ME, 2))
    p.log.high_watermark = 80
    p.leader_epoch_start_offset = 100
    p.remote[2].log_end_offset = 90
    assert p.isr_to_expand(2) is None
    p.remote[2].log_end_offset = 100
    assert p.isr_to_expand(2) == (ME, 2)


def test_shrink_after_lag_time_not_before() -> None:
    p, clock = leader(100, (ME, 2, 3))
    fetch_at(p, 2, 100, clock)
    fetch_at(p, 3, 100, clock)
    p.log.log_end_offset = 200  # type: ignore[misc]
    clock.now += LAG_MS // 2
    fetch_at(p, 2, 200, clock)  # 2 keeps up, 3 stops fetching
    assert p.isr_to_shrink(clock.now) is None
    clock.now += LAG_MS // 2 + 1
    assert p.out_of_sync_replicas(clock.now) == [3]
    assert p.isr_to_shrink(clock.now) == (ME, 2)


def test_shrink_keeps_a_follower_that_is_at_the_leo_even_if_idle() -> None:
    p, clock = leader(100, (ME, 2))
    fetch_at(p, 2, 100, clock)
    clock.now += 10 * LAG_MS  # nothing produced: the follower is at the LEO
    assert p.isr_to_shrink(clock.now) is None


def test_new_epoch_of_the_same_leader_keeps_positions() -> None:
    p, clock = leader(100, (ME, 2, 3))
    fetch_at(p, 2, 100, clock)
    fetch_at(p, 3, 100, clock)
    p.make_leader(PartitionOrder(ME, 2, (ME, 2), (ME, 2, 3), partition_epoch=6), clock.now)
    assert p.remote[2].log_end_offset == 100  # still known: the HW need not wait for it
    assert p.remote[3].last_caught_up_time_ms == 0  # out of the ISR: not "recently caught up"
    assert p.leader_epoch_start_offset == 100
    assert p.log.leader_epoch_cache.entries == [(1, 100), (2, 100)]  # type: ignore[attr-defined]


def test_acks_all_after_append_sees_the_isr_shrink() -> None:
    p, clock = leader(100, (ME, 2), replicas=(ME, 2))
    p.config["min.insync.replicas"] = 2
    fetch_at(p, 2, 100, clock)
    p.log.log_end_offset = 110  # type: ignore[misc]
    assert p.replication_error(110) is None  # waiting
    assert p.complete_isr_change(1, 4, (ME,), 5)
    p.maybe_increment_high_watermark(clock.now + LAG_MS + 1)
    assert p.replication_error(110) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_stale_isr_completion_is_ignored_after_a_new_order() -> None:
    p, clock = leader(100, (ME, 2))
    p.begin_isr_change((ME, 2, 3))
    p.make_leader(PartitionOrder(ME, 2, (ME, 2), (ME, 2, 3), partition_epoch=7), clock.now)
    assert p.pending_isr is None
    assert not p.complete_isr_change(1, 4, (ME, 2, 3), 5)
    assert p.isr == (ME, 2) and p.partition_epoch == 7


# ---- small helpers ----------------------------------------------------------------------------
def test_follower_batches_checks_crc_and_drops_a_partial_tail() -> None:
    data = build_batch([Record(timestamp=1, value=b"a")]) + build_batch(
        [Record(timestamp=2, value=b"b")]
    )
    assert [h.position for h in follower_batches(data)] == [h.position for h in iter_headers(data)]
    assert len(follower_batches(data[:-5])) == 1
    broken = bytearray(data)
    broken[-1] ^= 0xFF
    with pytest.raises(Exception, match="CRC"):
        follower_batches(broken)


def test_backoff_grows_to_the_cap_with_jitter() -> None:
    assert 0.04 <= backoff_s(1, 1000) <= 0.06
    assert 0.8 <= backoff_s(10, 1000) <= 1.2
