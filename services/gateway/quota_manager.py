"""Client quota enforcement of one gateway, as Kafka's ClientQuotaManager on one broker.

Usage is recorded per quota entity (the tags :meth:`QuotaConfigs.resolve` returns) in a rate
over ``quota.window.num`` samples of ``quota.window.size.seconds`` (Kafka's ``Rate`` on a
``SampledStat``). A record that takes the rate above the quota yields Kafka's throttle time,
``(rate - quota) / quota * window`` where window is the span the rate was measured over
(at least ``num - 1`` windows); the request quota's is capped at one window, as Kafka's.
Produce records the request's size, Fetch the response's record bytes (a throttled Fetch is
un-recorded and answered empty, as Kafka does), the request quota the time the gateway spent
on the request (as a percentage of one second). Entities without a quota record nothing.
Sensors idle for ``inactive_s`` (Kafka: one hour) are dropped with their metric series,
checked at most once a minute, so memory follows the active entities.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Gauge

from services.common.client_quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaConfigs,
)
from services.gateway import metrics
from services.gateway.mutation_quota import UNBOUNDED, MutationQuota, TokenBucket

INACTIVE_SENSOR_EXPIRATION_S = 3600.0  # Kafka's InactiveSensorExpirationTimeSeconds
_SWEEP_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class QuotaType:
    name: str  # Kafka's QuotaType (the MBean's type)
    key: str  # the quota config it is limited by
    rate_gauge: Gauge
    throttle_gauge: Gauge
    max_throttle: bool  # capped at one window (Kafka: the request quota only)


PRODUCE = QuotaType(
    "Produce",
    PRODUCER_BYTE_RATE,
    metrics.PRODUCE_BYTE_RATE,
    metrics.PRODUCE_THROTTLE_TIME,
    False,
)
FETCH = QuotaType(
    "Fetch", CONSUMER_BYTE_RATE, metrics.FETCH_BYTE_RATE, metrics.FETCH_THROTTLE_TIME, False
)
REQUEST = QuotaType(
    "Request", REQUEST_PERCENTAGE, metrics.REQUEST_TIME, metrics.REQUEST_THROTTLE_TIME, True
)


class SampledStat:
    """Kafka's SampledStat: ``num`` samples of ``window_ms``, each a sum and a count; the
    oldest is reused when a new window starts, samples older than ``num`` windows count 0."""

    __slots__ = ("_starts", "_values", "_counts", "_current", "num", "window_ms")

    def __init__(self, num: int, window_ms: float) -> None:
        self.num = num
        self.window_ms = window_ms
        self._starts: list[float] = []
        self._values: list[float] = []
        self._counts: list[int] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        if not self._starts:
            self._starts.append(now_ms)
            self._values.append(0.0)
            self._counts.append(0)
            self._current = 0
        elif now_ms - self._starts[self._current] >= self.window_ms:
            self._current = (self._current + 1) % self.num
            if self._current >= len(self._starts):
                self._starts.append(now_ms)
                self._values.append(0.0)
                self._counts.append(0)
            else:
                self._starts[self._current] = now_ms
                self._values[self._current] = 0.0
                self._counts[self._current] = 0
        self._values[self._current] += value
        self._counts[self._current] += 1

    def _purge(self, now_ms: float) -> None:
        expire = self.num * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire:
                self._starts[i] = now_ms
                self._values[i] = 0.0
                self._counts[i] = 0

    def total(self, now_ms: float) -> float:
        self._purge(now_ms)
        return sum(self._values)

    def average(self, now_ms: float) -> float:
        self._purge(now_ms)
        n = sum(self._counts)
        return sum(self._values) / n if n else 0.0

    def window_size_ms(self, now_ms: float) -> float:
        """Kafka's Rate.windowSize: the span measured, at least ``num - 1`` full windows."""
        self._purge(now_ms)
        oldest = min(self._starts) if self._starts else now_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def rate(self, now_ms: float) -> float:
        """Per second, as Kafka's Rate."""
        return self.total(now_ms) / (self.window_size_ms(now_ms) / 1000.0)


class _Sensor:
    __slots__ = ("usage", "throttles", "last_ms", "labels")

    def __init__(self, num: int, window_ms: float, labels: tuple[str, str]) -> None:
        self.usage = SampledStat(num, window_ms)
        self.throttles = SampledStat(num, window_ms)
        self.last_ms = 0.0
        self.labels = labels


class ClientQuotaManager:
    def __init__(
        self,
        configs: QuotaConfigs,
        window_num: int = 11,
        window_size_s: float = 1.0,
        *,
        inactive_s: float = INACTIVE_SENSOR_EXPIRATION_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.configs = configs
        self.window_num = window_num
        self.window_ms = window_size_s * 1000.0
        self.inactive_ms = inactive_s * 1000.0
        self._clock = clock
        self._sensors: dict[tuple[str, str, str], _Sensor] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}  # controller mutations
        self._last_sweep_ms = 0.0

    def _now_ms(self) -> float:
        return self._clock() * 1000.0

    @property
    def sensor_count(self) -> int:
        return len(self._sensors)

    def _sensor(self, qtype: QuotaType, user: str, client: str, now_ms: float) -> _Sensor:
        key = (qtype.name, user, client)
        sensor = self._sensors.get(key)
        if sensor is None:
            sensor = self._sensors[key] = _Sensor(self.window_num, self.window_ms, (user, client))
        sensor.last_ms = now_ms
        return sensor

    def record(self, qtype: QuotaType, user: str, client_id: str, value: float) -> int:
        """Record usage; the throttle time in ms (0: within the quota, or no quota)."""
        if not self.configs.enabled(qtype.key):
            return 0
        quota = self.configs.resolve(qtype.key, user, client_id)
        if quota is None:
            return 0
        now = self._now_ms()
        self._maybe_sweep(now)
        sensor = self._sensor(qtype, quota.user_tag, quota.client_tag, now)
        sensor.usage.record(value, now)
        rate = sensor.usage.rate(now)
        qtype.rate_gauge.labels(*sensor.labels).set(rate)
        throttle = 0
        if rate > quota.limit:
            window = sensor.usage.window_size_ms(now)
            throttle = round((rate - quota.limit) / quota.limit * window)
            if qtype.max_throttle:
                throttle = min(throttle, round(self.window_ms))
        if throttle > 0:
            sensor.throttles.record(throttle, now)
            metrics.QUOTA_THROTTLED.labels(qtype.name).inc()
        qtype.throttle_gauge.labels(*sensor.labels).set(sensor.throttles.average(now))
        return throttle

    def unrecord(self, qtype: QuotaType, user: str, client_id: str, value: float) -> None:
        """Take back a recorded value (a throttled Fetch answered without its records)."""
        quota = self.configs.resolve(qtype.key, user, client_id)
        if quota is None:
            return
        now = self._now_ms()
        self._sensor(qtype, quota.user_tag, quota.client_tag, now).usage.record(-value, now)

    def mutation_quota(self, user: str, client_id: str, *, strict: bool) -> MutationQuota:
        """The ``controller_mutation_rate`` bucket of this client's quota entity (KIP-599), as
        one request uses it; UNBOUNDED when no quota applies."""
        if not self.configs.enabled(CONTROLLER_MUTATION_RATE):
            return UNBOUNDED
        quota = self.configs.resolve(CONTROLLER_MUTATION_RATE, user, client_id)
        if quota is None:
            return UNBOUNDED
        now = self._now_ms()
        self._maybe_sweep(now)
        labels = (quota.user_tag, quota.client_tag)
        burst = quota.limit * self.window_num * self.window_ms / 1000.0
        bucket = self._buckets.get(labels)
        if bucket is None:
            bucket = self._buckets[labels] = TokenBucket(burst, now)
        return MutationQuota(bucket, quota.limit, burst, strict, labels, self._clock)

    def max_value_in_window(self, qtype: QuotaType, user: str, client_id: str) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: the most one response may carry without its
        rate alone exceeding the quota (None: no quota)."""
        if not self.configs.enabled(qtype.key):
            return None
        quota = self.configs.resolve(qtype.key, user, client_id)
        if quota is None:
            return None
        return quota.limit * (self.window_num - 1) * self.window_ms / 1000.0

    def _maybe_sweep(self, now_ms: float) -> None:
        if now_ms - self._last_sweep_ms < _SWEEP_EVERY_S * 1000.0:
            return
        self._last_sweep_ms = now_ms
        self.expire(now_ms)

    def expire(self, now_ms: float | None = None) -> int:
        """Drop sensors idle longer than ``inactive_s`` (and their series); how many."""
        now = self._now_ms() if now_ms is None else now_ms
        idle = [k for k, s in self._sensors.items() if now - s.last_ms > self.inactive_ms]
        by_name = {q.name: q for q in (PRODUCE, FETCH, REQUEST)}
        for key in idle:
            sensor = self._sensors.pop(key)
            qtype = by_name[key[0]]
            for gauge in (qtype.rate_gauge, qtype.throttle_gauge):
                try:
                    gauge.remove(*sensor.labels)
                except KeyError:
                    pass
        idle_buckets = [k for k, b in self._buckets.items() if now - b.last_ms > self.inactive_ms]
        for labels in idle_buckets:
            del self._buckets[labels]
            try:
                metrics.CONTROLLER_MUTATION_TOKENS.remove(*labels)
            except KeyError:
                pass
        return len(idle) + len(idle_buckets)


def principal_name(session: Any) -> str:
    """Kafka's quota user: the principal's name (``User:alice`` -> ``alice``;
    unauthenticated: ``ANONYMOUS``)."""
    principal = session.principal if session is not None else "User:ANONYMOUS"
    return principal.split(":", 1)[1] if ":" in principal else principal
