"""The Kafka listener: pipelining order, acks=0, framing limits, protocol-violation closes."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey, decode_response, encode_request
from services.gateway.context import RequestContext
from services.gateway.handlers import api_versions, describe_cluster, metadata, produce
from services.gateway.handlers.base import ApiHandler, Body
from services.gateway.server import KafkaServer

finished: list[int] = []


async def slow_metadata(ctx: RequestContext, req: Body) -> Body:
    """Sleeps as long as the first topic name says (``sleep-0.2``), then echoes the topics."""
    names = [t["name"] for t in req["topics"] or []]
    if names and names[0].startswith("sleep-"):
        await asyncio.sleep(float(names[0][6:]))
    finished.append(ctx.correlation_id)
    return {
        "throttle_time": 0,
        "brokers": [],
        "cluster_id": None,
        "controller_id": 1,
        "topics": [{"error_code": 0, "name": n, "topic_id": None, "partitions": []} for n in names],
    }


async def slow_acks0_produce(ctx: RequestContext, req: Body) -> Body | None:
    await asyncio.sleep(0.4)
    finished.append(ctx.correlation_id)
    return None


async def failing(ctx: RequestContext, req: Body) -> Body:
    raise RuntimeError("boom")


HANDLERS = {
    ApiKey.API_VERSIONS: api_versions.HANDLER,
    ApiKey.METADATA: ApiHandler(
        ApiKey.METADATA, "Metadata", slow_metadata, metadata.error_response
    ),
    ApiKey.PRODUCE: ApiHandler(
        ApiKey.PRODUCE, "Produce", slow_acks0_produce, produce.error_response
    ),
    ApiKey.DESCRIBE_CLUSTER: ApiHandler(
        ApiKey.DESCRIBE_CLUSTER, "DescribeCluster", failing, describe_cluster.error_response
    ),
}
VERSIONS = {
    int(ApiKey.API_VERSIONS): (0, 3),
    int(ApiKey.METADATA): (1, 12),
    int(ApiKey.PRODUCE): (3, 9),
    int(ApiKey.DESCRIBE_CLUSTER): (0, 1),
}


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def send(self, *frames: bytes) -> None:
        self.writer.write(b"".join(frames))

    async def read_frame(self, within_s: float = 2.0) -> bytes:
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), within_s))[0]
        return await asyncio.wait_for(self.reader.readexactly(size), within_s)

    async def response(self, api_key: int, version: int) -> tuple[int, dict[str, Any]]:
        return decode_response(api_key, version, await self.read_frame())

    async def closed(self, within_s: float = 2.0) -> bool:
        data = await asyncio.wait_for(self.reader.read(), within_s)
        return data == b""


@pytest.fixture
async def server() -> AsyncIterator[KafkaServer]:
    finished.clear()
    srv = KafkaServer(
        None, HANDLERS, VERSIONS, max_request_bytes=10_000, max_inflight=4, idle_timeout_s=30
    )
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close()


@pytest.fixture
async def client(server: KafkaServer) -> AsyncIterator[Client]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    yield Client(reader, writer)
    writer.close()


def md(corr: int, *topics: str, version: int = 12) -> bytes:
    return encode_request(
        ApiKey.METADATA, version, corr, "t", {"topics": [{"name": t} for t in topics]}
    )


def api_versions_request(corr: int, version: int = 3) -> bytes:
    return encode_request(
        ApiKey.API_VERSIONS,
        version,
        corr,
        "t",
        {"client_software_name": "test", "client_software_version": "1"},
    )


def produce_acks0(corr: int) -> bytes:
    return encode_request(
        ApiKey.PRODUCE, 9, corr, "t", {"acks": 0, "timeout": 1000, "topic_data": []}
    )


async def test_responses_keep_request_order(client: Client) -> None:
    client.send(
        md(1, "sleep-0.3"),
        md(2, "fast"),
        produce_acks0(3),
        md(4, "sleep-0.1"),
        api_versions_request(5),
    )
    got = [(await client.response(ApiKey.METADATA, 12))[0] for _ in range(3)]
    corr, body = await client.response(ApiKey.API_VERSIONS, 3)
    assert got + [corr] == [1, 2, 4, 5]
    assert body["error_code"] == 0
    # the handlers really finished out of order (acks=0 produce still running, unanswered)
    assert finished[:3] == [2, 4, 1]


async def test_acks0_produce_gets_no_response_and_blocks_nothing(client: Client) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    client.send(produce_acks0(1), api_versions_request(2))
    corr, _ = await client.response(ApiKey.API_VERSIONS, 3)
    assert corr == 2 and loop.time() - start < 0.3
    await asyncio.sleep(0.5)
    assert finished == [1]  # it ran, and no frame was sent for it
    client.send(api_versions_request(3))
    assert (await client.response(ApiKey.API_VERSIONS, 3))[0] == 3


async def test_backpressure_keeps_everything(client: Client) -> None:
    client.send(*(md(i, "sleep-0.05") for i in range(1, 13)))
    assert [(await client.response(ApiKey.METADATA, 12))[0] for _ in range(12)] == list(
        range(1, 13)
    )


@pytest.mark.parametrize("size", [10_001, -1])
async def test_frame_size_out_of_bounds_closes(client: Client, size: int) -> None:
    client.send(struct.pack(">i", size) + b"\x00" * 16)
    assert await client.closed()


async def test_unknown_api_key_closes(client: Client) -> None:
    client.send(struct.pack(">ihhih", 10, 999, 0, 1, -1))
    assert await client.closed()


async def test_known_key_without_handler_closes(client: Client) -> None:
    client.send(encode_request(ApiKey.FIND_COORDINATOR, 1, 1, "t", {"key": "g", "key_type": 0}))
    assert await client.closed()


async def test_api_versions_fallback_kip511(client: Client) -> None:
    frame = bytearray(api_versions_request(9))
    struct.pack_into(">h", frame, 6, 77)  # a version from the future, body unreadable to us
    client.send(bytes(frame))
    corr, body = await client.response(ApiKey.API_VERSIONS, 0)
    assert corr == 9
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    table = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert table == VERSIONS


async def test_unsupported_version_error_response(client: Client) -> None:
    client.send(md(4, "x", version=0))  # Metadata v0: known to the codec, not served
    corr, body = await client.response(ApiKey.METADATA, 0)
    assert corr == 4
    assert body["topics"][0]["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    client.send(api_versions_request(5))  # the connection stays usable
    assert (await client.response(ApiKey.API_VERSIONS, 3))[0] == 5


async def test_unsupported_version_without_schema_closes(client: Client) -> None:
    frame = bytearray(produce_acks0(1))
    struct.pack_into(">h", frame, 6, 2)  # Produce v2: no schema (magic 2 only from v3)
    client.send(bytes(frame))
    assert await client.closed()


async def test_malformed_body_closes(client: Client) -> None:
    header = struct.pack(">hhih", ApiKey.METADATA, 12, 1, 1) + b"t" + b"\x00"
    body = b"\xff\xff\xff\xff\xff\xff"  # a varint longer than 5 bytes
    frame = header + body
    client.send(struct.pack(">i", len(frame)) + frame)
    assert await client.closed()


async def test_handler_exception_becomes_error_response(client: Client) -> None:
    client.send(encode_request(ApiKey.DESCRIBE_CLUSTER, 1, 3, "t", {}), api_versions_request(4))
    corr, body = await client.response(ApiKey.DESCRIBE_CLUSTER, 1)
    assert corr == 3 and body["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR
    assert (await client.response(ApiKey.API_VERSIONS, 3))[0] == 4


async def test_idle_connection_closed() -> None:
    srv = KafkaServer(None, HANDLERS, VERSIONS, max_request_bytes=10_000, idle_timeout_s=0.2)
    await srv.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        assert await Client(reader, writer).closed(within_s=2.0)
        writer.close()
    finally:
        await srv.close()


async def test_drain_finishes_running_requests(server: KafkaServer, client: Client) -> None:
    client.send(md(1, "sleep-0.2"))
    await asyncio.sleep(0.05)
    await server.drain(2.0)
    corr, _ = await client.response(ApiKey.METADATA, 12)
    assert corr == 1
    assert await client.closed()
