"""Replication throttles (Kafka's ``ReplicationQuotaManager``, KIP-73): a byte rate per node for
the replicas an operator marked throttled, so a reassignment's catch-up cannot starve the rest.

- The rates are the dynamic broker configs ``leader.replication.throttled.rate`` (what this
  node sends, as leader, for throttled replicas) and ``follower.replication.throttled.rate``
  (what its replica fetchers fetch for them); Long.MAX_VALUE (the default) is unlimited.
- Which replicas: the topic configs ``leader.replication.throttled.replicas`` and
  ``follower.replication.throttled.replicas``, ``*`` or ``partition:broker`` pairs; a node
  applies the pairs naming itself (Kafka's ``TopicConfigHandler.parseThrottledPartitions``).
- As Kafka: bytes of throttled partitions are recorded after they are sent or fetched; while the
  quota is exceeded a throttled partition whose follower is out of the ISR is left out of the
  fetch (the leader answers it without records; the follower does not ask for it). A replica in
  the ISR is never held back, and partitions that are not throttled are never touched.

The bucket: ``rate`` tokens a second, at most one second's worth saved up; a send takes its size
(the balance may go below zero: a fetch is recorded after it happened, as Kafka's quotas are);
the quota is exceeded while the balance is below zero. No library fits this "record, then
check" use: ``aiolimiter`` and ``pyrate-limiter`` acquire before the work and wait, and neither
is installed; Kafka's windowed rate sensor is the same idea with more state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from prometheus_client import Counter

from services.common.topic_config import LONG_MAX

LEADER = "leader"
FOLLOWER = "follower"
REPLICAS_CONFIG = {
    LEADER: "leader.replication.throttled.replicas",
    FOLLOWER: "follower.replication.throttled.replicas",
}
ALL_REPLICAS = "*"


class TokenBucket:
    def __init__(self, rate: float = LONG_MAX, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.rate = float(rate)
        self._tokens = self.rate
        self._at = clock()

    @property
    def unlimited(self) -> bool:
        return self.rate >= LONG_MAX

    def set_rate(self, rate: float) -> None:
        """A new rate, in force at once (the balance is kept, capped at one second of it)."""
        self._refill()
        self.rate = float(rate)
        self._tokens = min(self._tokens, self.rate)

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def record(self, n: int) -> None:
        if self.unlimited:
            return
        self._refill()
        self._tokens -= n

    def exceeded(self) -> bool:
        if self.unlimited:
            return False
        self._refill()
        return self._tokens < 0

    def wait_s(self) -> float:
        """Seconds until the quota is no longer exceeded (0 when it is not)."""
        if not self.exceeded():
            return 0.0
        return -self._tokens / self.rate if self.rate > 0 else 1.0


def throttled_partitions(items: Sequence[str], broker_id: int) -> frozenset[int] | None:
    """The partitions of a ``*.replication.throttled.replicas`` value that ``broker_id``
    throttles; None for ``*`` (all of them)."""
    out = set()
    for item in items:
        if item == ALL_REPLICAS:
            return None
        partition, _, broker = item.partition(":")
        if broker.strip() == str(broker_id):
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    """One side's (leader or follower) throttle of a storage node."""

    def __init__(
        self,
        role: str,
        broker_id: int,
        bytes_counter: Counter,
        held_counter: Counter,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.role = role
        self.config_name = REPLICAS_CONFIG[role]
        self.broker_id = broker_id
        self.bucket = TokenBucket(LONG_MAX, clock)
        self._bytes = bytes_counter
        self._held = held_counter.labels(role)
        # topic -> (the config list it was computed from, its throttled partitions)
        self._parsed: dict[str, tuple[object, frozenset[int] | None]] = {}

    def is_throttled(self, topic: str, partition: int, config: dict[str, object]) -> bool:
        items = config.get(self.config_name)
        if not items:
            return False
        cached = self._parsed.get(topic)
        if cached is None or cached[0] is not items:
            assert isinstance(items, list)
            cached = self._parsed[topic] = (items, throttled_partitions(items, self.broker_id))
        return cached[1] is None or partition in cached[1]

    def record(self, topic: str, n: int) -> None:
        """``n`` bytes of a throttled partition were sent or fetched."""
        if n:
            self.bucket.record(n)
            self._bytes.labels(self.role, topic).inc(n)

    def hold_back(self) -> bool:
        """Whether a throttled, out-of-ISR replica must wait now (counted when it must)."""
        if self.bucket.exceeded():
            self._held.inc()
            return True
        return False


class ReplicationQuotas:
    """The leader-side and follower-side throttles of a storage node; ``bytes_counter`` and
    ``held_counter`` are its StorageMetrics' ``replication_throttled_bytes`` / ``_holds``."""

    def __init__(
        self,
        broker_id: int,
        bytes_counter: Counter,
        held_counter: Counter,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.leader = ReplicationQuota(LEADER, broker_id, bytes_counter, held_counter, clock)
        self.follower = ReplicationQuota(FOLLOWER, broker_id, bytes_counter, held_counter, clock)

    def set_rates(self, leader_rate: float, follower_rate: float) -> None:
        self.leader.bucket.set_rate(leader_rate)
        self.follower.bucket.set_rate(follower_rate)
