"""KIP-219 on a real listener: a throttled Produce is answered at once with its
throttle_time_ms, and nothing pipelined behind it is read until the throttle has passed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest

from services.common.client_quotas import PRODUCER_BYTE_RATE, QuotaConfigs
from services.common.protocol import ApiKey, encode_request
from services.gateway.context import RequestContext
from services.gateway.handlers import produce
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.quota_manager import ClientQuotaManager
from services.gateway.server import KafkaServer

from .test_server import HANDLERS, VERSIONS, Client, md


async def accept_produce(ctx: RequestContext, req: Body) -> Body:
    return {"responses": [], "throttle_time": 0}


def big_produce(corr: int, version: int = 9) -> bytes:
    partition = {"index": 0, "records": b"\0" * 12_000}
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout": 1000,
        "topic_data": [{"name": "t", "partition_data": [partition]}],
    }
    return encode_request(ApiKey.PRODUCE, version, corr, "quota-client", body)


@pytest.fixture
async def throttled() -> AsyncIterator[tuple[Client, float]]:
    """A listener where client id ``quota-client`` may produce len(frame) / 10.5 bytes/s: one
    frame on a fresh sensor measures 1.05 x the quota over the 10-window minimum: 500 ms."""
    quota = len(big_produce(1)) / 10.5
    configs = QuotaConfigs()
    configs.set((None, "quota-client"), {PRODUCER_BYTE_RATE: quota})
    services = SimpleNamespace(quotas=ClientQuotaManager(configs, 11, 1.0))
    handlers = dict(HANDLERS)
    handlers[ApiKey.PRODUCE] = ApiHandler(
        ApiKey.PRODUCE, "Produce", accept_produce, produce.error_response
    )
    srv = KafkaServer(services, handlers, VERSIONS, max_request_bytes=100_000, idle_timeout_s=30)
    await srv.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    yield Client(reader, writer), quota
    writer.close()
    await srv.close()


def expected_ms(frame: bytes, quota: float) -> int:
    """Kafka's throttle time for one frame on a fresh sensor (10 windows of 1 s measured)."""
    return round((len(frame) / 10.0 - quota) / quota * 10_000)


async def test_throttled_produce_answers_at_once_then_mutes(
    throttled: tuple[Client, float],
) -> None:
    client, quota = throttled
    frame = big_produce(1)
    expected = expected_ms(frame, quota)
    assert expected == 500
    sent = time.monotonic()
    client.send(frame, md(2, "after"))
    corr, body = await client.response(ApiKey.PRODUCE, 9)
    answered = time.monotonic() - sent
    assert corr == 1 and body["throttle_time"] == expected
    corr, _ = await client.response(ApiKey.METADATA, 12)
    second = time.monotonic() - sent
    assert corr == 2
    assert answered < expected / 1000.0 < second, (answered, second)


async def test_pre_kip219_produce_response_is_held_back(
    throttled: tuple[Client, float],
) -> None:
    client, quota = throttled
    frame = big_produce(1, version=5)
    expected = expected_ms(frame, quota)
    sent = time.monotonic()
    client.send(frame)
    corr, body = await client.response(ApiKey.PRODUCE, 5)
    assert corr == 1 and body["throttle_time"] == expected
    assert time.monotonic() - sent >= expected / 1000.0
