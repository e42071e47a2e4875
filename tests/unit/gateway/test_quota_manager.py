"""Kafka's ClientQuotaManager arithmetic: windowed rate, throttle time, un-record, expiry; the
controller mutation token bucket (KIP-599)."""

from __future__ import annotations

from services.common.client_quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaConfigs,
)
from services.gateway.metrics import PRODUCE_BYTE_RATE, PRODUCE_THROTTLE_TIME
from services.gateway.quota_manager import FETCH, PRODUCE, REQUEST, ClientQuotaManager


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _manager(**quotas: float) -> tuple[ClientQuotaManager, Clock]:
    configs = QuotaConfigs()
    configs.set((None, "c"), quotas)
    clock = Clock()
    return ClientQuotaManager(configs, 11, 1.0, inactive_s=10.0, clock=clock), clock


def test_no_quota_records_nothing() -> None:
    m, _ = _manager(**{CONSUMER_BYTE_RATE: 100.0})
    assert m.record(PRODUCE, "u", "c", 10**9) == 0
    assert m.record(FETCH, "u", "other", 10**9) == 0
    assert m.sensor_count == 0


def test_throttle_time_is_kafkas_formula() -> None:
    m, clock = _manager(**{PRODUCER_BYTE_RATE: 1000.0})
    # a fresh sensor measures over at least (11 - 1) windows = 10 s: 10,000 bytes is the bound
    assert m.record(PRODUCE, "u", "c", 10_000) == 0
    # 15,000 bytes over 10 s = 1,500 B/s: (1500 - 1000) / 1000 * 10,000 ms
    assert m.record(PRODUCE, "u", "c", 5_000) == 5_000
    assert PRODUCE_BYTE_RATE.labels("", "c")._value.get() == 1500.0
    assert PRODUCE_THROTTLE_TIME.labels("", "c")._value.get() == 5000.0
    # 20 s later every sample is older than 11 windows: back to nothing recorded
    clock.t += 20
    assert m.record(PRODUCE, "u", "c", 9_000) == 0


def test_sustained_rate_converges_to_the_quota() -> None:
    """A client that waits out every throttle time ends up at the quota's rate."""
    m, clock = _manager(**{PRODUCER_BYTE_RATE: 1_000_000.0})
    start, sent = clock.t, 0
    while clock.t - start < 60:
        sent += 100_000
        clock.t += 0.01 + m.record(PRODUCE, "u", "c", 100_000) / 1000.0
    rate = sent / (clock.t - start)
    assert 0.9e6 < rate < 1.25e6, rate


def test_fetch_unrecord_and_window_cap() -> None:
    m, _ = _manager(**{CONSUMER_BYTE_RATE: 1000.0})
    assert m.max_value_in_window(FETCH, "u", "c") == 10_000.0  # (11 - 1) windows of quota
    assert m.max_value_in_window(PRODUCE, "u", "c") is None
    assert m.record(FETCH, "u", "c", 20_000) > 0
    m.unrecord(FETCH, "u", "c", 20_000)
    assert m.record(FETCH, "u", "c", 10_000) == 0


def test_request_quota_throttle_capped_at_one_window() -> None:
    m, _ = _manager(**{REQUEST_PERCENTAGE: 1.0})
    # 5 s of handling = 500 percent-seconds over 10 s: 50 % against 1 %: capped at 1 window
    assert m.record(REQUEST, "u", "c", 500.0) == 1000


def test_idle_sensors_expire_with_their_series() -> None:
    m, clock = _manager(**{PRODUCER_BYTE_RATE: 1000.0})
    m.record(PRODUCE, "u", "c", 1)
    assert m.sensor_count == 1
    clock.t += 5
    assert m.expire() == 0
    clock.t += 6
    assert m.expire() == 1 and m.sensor_count == 0
    labels = {
        tuple(s.labels.values()) for metric in PRODUCE_BYTE_RATE.collect() for s in metric.samples
    }
    assert ("", "c") not in labels


def test_strict_mutation_quota_refuses_once_below_zero() -> None:
    m, clock = _manager(**{CONTROLLER_MUTATION_RATE: 2.0})
    assert m.mutation_quota("u", "other", strict=True).bounded is False  # no quota for it
    q = m.mutation_quota("u", "c", strict=True)
    # burst 2/s x 11 windows = 22: admitted while >= 0, even when the mutation overdraws it
    assert not q.exhausted()
    q.record(20)
    assert not q.exhausted()
    q.record(10)  # -8
    assert q.throttle_ms == 0  # strict: no throttle for what was admitted
    assert q.exhausted()
    assert q.throttle_ms == 4000  # 8 credits at 2/s
    clock.t += 1.5
    assert q.throttle_ms == 2500  # Kafka deducts the time since it was recorded
    # the next request shares the bucket: refilled 3 credits, still below zero
    q2 = m.mutation_quota("u", "c", strict=True)
    assert q2.exhausted() and q2.throttle_ms == 2500
    clock.t += 2.5
    assert not m.mutation_quota("u", "c", strict=True).exhausted()
    clock.t += 100
    full = m.mutation_quota("u", "c", strict=True)
    full.record(22)
    assert not full.exhausted()  # refilled to the burst, not beyond


def test_permissive_mutation_quota_throttles_and_expires() -> None:
    m, clock = _manager(**{CONTROLLER_MUTATION_RATE: 2.0})
    q = m.mutation_quota("u", "c", strict=False)
    q.record(22)
    assert q.throttle_ms == 0 and not q.exhausted()
    q.record(4)  # -4: permissive mutations are done, then throttled
    assert not q.exhausted() and q.throttle_ms == 2000
    clock.t += 20.0  # idle past inactive_s: the bucket goes with its series
    assert m.expire() == 1
    assert m.mutation_quota("u", "c", strict=True).exhausted() is False
