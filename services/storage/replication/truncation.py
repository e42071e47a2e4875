"""Where a follower truncates its log before fetching from a (new) leader.

Kafka's ``AbstractFetcherThread.getOffsetTruncationState`` (KIP-101, KIP-279): the follower asks
the leader for the end offset of its own latest epoch (OffsetForLeaderEpoch) and truncates to
the smaller of that and its log end offset. When the leader answers with an older epoch than
asked, the follower first truncates to where *that* epoch ends in its own log and asks again
(the answer is not final). An UNDEFINED answer falls back to the high watermark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1

EndOffsetFor = Callable[[int], tuple[int, int]]
"""The follower's own epoch cache lookup: epoch -> (largest epoch <= it, its end offset)."""


@dataclass(frozen=True, slots=True)
class Truncation:
    offset: int  # truncate the log to this offset (nothing to do if >= the LEO)
    completed: bool  # False: an intermediate point; ask the leader again


def decide_truncation(
    leader_epoch: int,
    leader_end_offset: int,
    *,
    log_end_offset: int,
    high_watermark: int,
    local_end_offset_for: EndOffsetFor,
) -> Truncation:
    """The truncation point given the leader's answer ``(leader_epoch, leader_end_offset)``."""
    if leader_end_offset == UNDEFINED_OFFSET:
        # the leader knows nothing of our epochs: keep only what was committed
        return Truncation(min(high_watermark, log_end_offset), True)
    if leader_epoch == UNDEFINED_EPOCH:
        # an answer without an epoch: the leader's end offset is all there is to go by
        return Truncation(min(leader_end_offset, log_end_offset), True)
    local_epoch, local_end = local_end_offset_for(leader_epoch)
    if local_end == UNDEFINED_OFFSET:
        # we have no epoch <= the leader's: its offset is the safe point
        return Truncation(min(leader_end_offset, log_end_offset), True)
    if local_epoch != leader_epoch:
        # we never saw the epoch the leader answered with: cut to where our largest epoch
        # below it ends and ask again with that one
        return Truncation(min(local_end, log_end_offset), False)
    return Truncation(min(local_end, leader_end_offset, log_end_offset), True)
