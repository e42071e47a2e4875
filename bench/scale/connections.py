"""Many connections on one gateway: memory per idle connection, the latency of active clients
with and without thousands of idle ones beside them, and the gateway's CPU at idle."""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from typing import Any

from bench.scale.procs import cpu_over, percentile, rss_bytes
from services.common.protocol import ApiKey
from services.common.protocol.messages import decode_response, encode_request

_ids = itertools.count(1)


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api: int, version: int, body: dict
) -> dict[str, Any]:
    correlation = next(_ids)
    writer.write(encode_request(api, version, correlation, "scale-bench", body))
    await writer.drain()
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    got, decoded = decode_response(api, version, await reader.readexactly(size))
    if got != correlation:
        raise RuntimeError(f"correlation {got} != {correlation}")
    return decoded


async def _open(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(host, port)
    answer = await _exchange(reader, writer, ApiKey.API_VERSIONS, 0, {})
    if answer["error_code"]:
        raise RuntimeError(f"ApiVersions error {answer['error_code']}")
    return reader, writer


async def _active_client(
    host: str, port: int, topic: str, until: float, latencies: list[float]
) -> int:
    reader, writer = await _open(host, port)
    body = {"topics": [{"name": topic}]}
    n = 0
    try:
        while time.perf_counter() < until:
            start = time.perf_counter()
            answer = await _exchange(reader, writer, ApiKey.METADATA, 1, body)
            latencies.append(time.perf_counter() - start)
            if answer["topics"][0]["error_code"]:
                raise RuntimeError(f"Metadata error {answer['topics'][0]['error_code']}")
            n += 1
    finally:
        writer.close()
    return n


async def _active_round(host: str, port: int, topic: str, clients: int, seconds: float) -> dict:
    latencies: list[float] = []
    until = time.perf_counter() + seconds
    counts = await asyncio.gather(
        *(_active_client(host, port, topic, until, latencies) for _ in range(clients))
    )
    return {
        "requests": sum(counts),
        "p50_ms": 1000 * percentile(latencies, 0.50),
        "p99_ms": 1000 * percentile(latencies, 0.99),
    }


async def _measure(
    host: str,
    port: int,
    gateway_pid: int,
    topic: str,
    idle: int,
    active: int,
    seconds: float,
    idle_seconds: float,
) -> dict[str, Any]:
    """Idle connections first, on a gateway that has served nothing else (memory the active
    clients' closed connections left behind would be reused by the idle ones and hide their
    cost); the active clients warm up, run beside the idle connections, then alone."""
    rss_before = rss_bytes([gateway_pid])
    idle_conns = []
    for start in range(0, idle, 200):  # opened in waves (the listen backlog)
        idle_conns += await asyncio.gather(
            *(_open(host, port) for _ in range(min(200, idle - start)))
        )
    await asyncio.sleep(1)
    rss_after = rss_bytes([gateway_pid])
    idle_cores = await asyncio.to_thread(cpu_over, [gateway_pid], idle_seconds)
    await _active_round(host, port, topic, active, min(1.0, seconds))  # warm-up
    beside = await _active_round(host, port, topic, active, seconds)
    # every idle connection still answers
    answered = 0
    for reader, writer in idle_conns:
        await _exchange(reader, writer, ApiKey.API_VERSIONS, 0, {})
        answered += 1
        writer.close()
    await asyncio.gather(*(w.wait_closed() for _r, w in idle_conns), return_exceptions=True)
    alone = await _active_round(host, port, topic, active, seconds)
    return {
        "idle_connections": idle,
        "active_clients": active,
        "rss_per_idle_connection_b": (rss_after - rss_before) / max(1, idle),
        "idle_cores_with_idle_connections": idle_cores,
        "active_p99_ms_alone": alone["p99_ms"],
        "active_p99_ms_beside_idle": beside["p99_ms"],
        "p99_beside_over_alone": beside["p99_ms"] / alone["p99_ms"],
        "active_requests_per_s_alone": alone["requests"] / seconds,
        "active_requests_per_s_beside_idle": beside["requests"] / seconds,
        "active_requests": alone["requests"] + beside["requests"],
        "idle_answered": answered,
    }


def measure(cluster: Any, topic: str, idle: int, **options: Any) -> dict[str, Any]:
    """One row on gateway 0 of ``cluster``; ``topic`` must exist (the active clients ask for
    its metadata). ``options``: ``measure_at``'s."""
    return measure_at(
        cluster.bootstrap.split(",")[0], cluster.pids()["gateway-0"], topic, idle, **options
    )


def measure_at(
    address: str,
    pid: int,
    topic: str,
    idle: int,
    active: int = 200,
    seconds: float = 5.0,
    idle_seconds: float = 5.0,
) -> dict[str, Any]:
    """One row on the broker process ``pid`` listening at ``address`` (host:port): a gateway,
    or the peer. ``seconds``: each active round; ``idle_seconds``: the CPU reading with only
    the idle connections open."""
    host, port = address.rsplit(":", 1)
    return asyncio.run(_measure(host, int(port), pid, topic, idle, active, seconds, idle_seconds))
