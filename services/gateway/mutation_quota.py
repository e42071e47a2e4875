"""Controller mutation quotas (KIP-599): ``controller_mutation_rate`` partitions per second.

Kafka meters CreateTopics (partitions created), CreatePartitions (partitions added) and
DeleteTopics (partitions deleted) with a token bucket per quota entity: credits refill at the
quota's rate up to a burst of ``quota.window.num`` windows of it, each mutation takes its
partitions' worth and may take the bucket below zero. Requests of a version that knows the
error (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) are *strict*: once the bucket is
below zero, each further topic is refused with THROTTLING_QUOTA_EXCEEDED and the response
carries the time until it is back at zero. Older versions are *permissive*: everything is done,
and the response is throttled by that time. Only mutations that happen count (a topic the
controller refuses, and ``validate_only``, take nothing).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from services.gateway import metrics

THROTTLING_MESSAGE = "The throttling quota has been exceeded."


class TokenBucket:
    """Kafka's TokenBucket stat: starts full at ``burst`` credits."""

    __slots__ = ("tokens", "last_ms")

    def __init__(self, burst: float, now_ms: float) -> None:
        self.tokens = burst
        self.last_ms = now_ms

    def measure(self, rate: float, burst: float, now_ms: float) -> float:
        self.tokens = min(burst, self.tokens + rate * max(now_ms - self.last_ms, 0.0) / 1000.0)
        self.last_ms = now_ms
        return self.tokens

    def record(self, value: float, rate: float, burst: float, now_ms: float) -> float:
        self.tokens = min(burst, self.measure(rate, burst, now_ms) - value)
        return self.tokens


class MutationQuota:
    """One request's view of its entity's bucket (Kafka's Strict/Permissive
    ControllerMutationQuota); ``bucket`` None: no quota applies."""

    def __init__(
        self,
        bucket: TokenBucket | None,
        rate: float,
        burst: float,
        strict: bool,
        labels: tuple[str, str] = ("", ""),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bucket = bucket
        self.rate = rate
        self.burst = burst
        self.strict = strict
        self.labels = labels
        self._clock = clock
        self._throttle_ms = 0
        self._throttled_at_ms = 0.0

    @property
    def bounded(self) -> bool:
        return self.bucket is not None

    def _now_ms(self) -> float:
        return self._clock() * 1000.0

    def _violated(self, tokens: float, now_ms: float) -> None:
        self._throttle_ms = round(-tokens / self.rate * 1000.0)
        self._throttled_at_ms = now_ms
        metrics.QUOTA_THROTTLED.labels("ControllerMutation").inc()

    def exhausted(self) -> bool:
        """Strict: whether the next mutation is refused (the bucket is below zero); the refusal
        sets the throttle time. Permissive quotas never refuse."""
        if self.bucket is None or not self.strict:
            return False
        now = self._now_ms()
        tokens = self.bucket.measure(self.rate, self.burst, now)
        if tokens < 0:
            self._violated(tokens, now)
            return True
        return False

    def record(self, permits: float) -> None:
        """Mutations done; a permissive quota taken below zero throttles the response."""
        if self.bucket is None or permits <= 0:
            return
        now = self._now_ms()
        tokens = self.bucket.record(permits, self.rate, self.burst, now)
        metrics.CONTROLLER_MUTATION_TOKENS.labels(*self.labels).set(tokens)
        if tokens < 0 and not self.strict:
            self._violated(tokens, now)

    @property
    def throttle_ms(self) -> int:
        """The throttle time still due (Kafka deducts the time since it was recorded)."""
        if self._throttle_ms <= 0:
            return 0
        return max(0, round(self._throttle_ms - (self._now_ms() - self._throttled_at_ms)))


UNBOUNDED = MutationQuota(None, 1.0, 1.0, strict=False)
