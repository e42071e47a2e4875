"""Fuzz: no malformed frame raises out of the connection handler.

Random bytes and mutations of valid requests are thrown at a real KafkaServer; after every
example the event loop has recorded no unhandled exception and a fresh connection is still
answered.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.protocol import ApiKey, decode_response, encode_request
from services.gateway.server import KafkaServer

from .test_server import HANDLERS, VERSIONS, api_versions_request, md, produce_acks0

VALID_FRAMES = [
    api_versions_request(1),
    api_versions_request(2, version=0),
    md(3, "a", "b"),
    md(4, "t", version=1),
    produce_acks0(5),
    encode_request(
        ApiKey.PRODUCE,
        9,
        6,
        "c",
        {
            "acks": 1,
            "timeout": 100,
            "topic_data": [
                {"name": "t", "partition_data": [{"index": 0, "records": b"\x00" * 70}]}
            ],
        },
    ),
]


class Harness:
    """A server on its own loop, reused by every example."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.errors: list[dict[str, Any]] = []
        self.loop.set_exception_handler(lambda _loop, ctx: self.errors.append(ctx))
        self.server = KafkaServer(
            None, HANDLERS, VERSIONS, max_request_bytes=10_000, max_inflight=4, idle_timeout_s=30
        )
        self.loop.run_until_complete(self.server.start("127.0.0.1", 0))

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 10))

    async def throw(self, data: bytes) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        writer.write(data)
        try:
            await writer.drain()
            writer.write_eof()
            # Read whatever comes back until the server closes or has nothing more to say.
            while await asyncio.wait_for(reader.read(65536), 0.5):
                pass
        except (ConnectionError, TimeoutError):
            pass
        finally:
            writer.close()

    async def still_serving(self) -> bool:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        writer.write(api_versions_request(99))
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        corr, body = decode_response(ApiKey.API_VERSIONS, 3, await reader.readexactly(size))
        writer.close()
        return corr == 99 and body["error_code"] == 0

    def close(self) -> None:
        self.loop.run_until_complete(self.server.close())
        self.loop.close()


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.close()


def mutate(frame: bytes, flips: list[tuple[int, int]], cut: int | None) -> bytes:
    data = bytearray(frame)
    for pos, value in flips:
        data[pos % len(data)] = value
    return bytes(data[:cut] if cut is not None else data)


frames = st.sampled_from(VALID_FRAMES)
flips = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6)
cuts = st.none() | st.integers(0, 200)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.one_of(
        st.binary(max_size=400),
        st.builds(mutate, frames, flips, cuts),
        st.builds(lambda f, g: f + g, frames, st.binary(max_size=100)),
    )
)
def test_malformed_frames_never_escape_the_handler(harness: Harness, data: bytes) -> None:
    harness.run(harness.throw(data))
    assert harness.errors == []
    assert harness.run(harness.still_serving())
