"""The bare gRPC floor of a Produce request (issue 19 §3), measured in the benchmark's run.

The gateway hands each Produce request to a storage node as one message on a bidirectional
gRPC stream (``Storage.Exchange``) and gets one message back. This measures that transport
alone, between two processes: one message of the requests' size out, a 64-byte answer back,
one at a time at the rate the 100 B produce run made its requests, with the services' gRPC
options under uvloop (services/common/runtime.py) and no kafka-py code. Client + server CPU
per round trip is the floor kafka-py's broker CPU per Produce request is compared with.

``python -m bench.grpc_floor serve``: an echo server on a free loopback port (prints it).
``python -m bench.grpc_floor call --target T --size N --rate R --count C``: warms the stream
up, says ``warm``, waits for a line on stdin, makes the measured calls and prints one JSON
line with its own CPU seconds. ``measure()`` runs both and adds the server's CPU from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import uvloop

from bench.cpu import cpu_seconds
from services.common.runtime import GRPC_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
METHOD = "/kafkapy.bench.Floor/Exchange"
ANSWER = bytes(64)  # about an append's answer on the Exchange stream
WARM_UP_CALLS = 200


async def _echo(requests: AsyncIterator[bytes], _context: Any) -> AsyncIterator[bytes]:
    async for _ in requests:
        yield ANSWER


async def serve() -> None:
    server = grpc.aio.server(options=GRPC_OPTIONS)
    handler = grpc.stream_stream_rpc_method_handler(_echo)  # raw bytes both ways
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("kafkapy.bench.Floor", {"Exchange": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


async def call(target: str, size: int, rate: float, count: int) -> dict[str, float]:
    payload = os.urandom(size)
    async with grpc.aio.insecure_channel(target, options=GRPC_OPTIONS) as channel:
        stream = channel.stream_stream(METHOD)()
        for _ in range(WARM_UP_CALLS):
            await stream.write(payload)
            await stream.read()
        print("warm", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        cpu0, start = time.process_time(), time.perf_counter()
        for i in range(count):
            ahead = start + i / rate - time.perf_counter()
            if ahead > 0:
                await asyncio.sleep(ahead)
            await stream.write(payload)
            await stream.read()
        cpu, elapsed = time.process_time() - cpu0, time.perf_counter() - start
        await stream.done_writing()
    return {"client_cpu_s": cpu, "seconds": elapsed, "calls": count}


def measure(size: int, rate: float, count: int) -> dict[str, float]:
    """Client + server CPU per round trip (µs) of ``count`` calls of ``size`` bytes at
    ``rate`` a second, with the rate reached and each side's share."""
    py = [sys.executable, "-m", "bench.grpc_floor"]
    server = subprocess.Popen([*py, "serve"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        client = subprocess.Popen(
            [*py, "call", "--target", f"127.0.0.1:{port}", "--size", str(size)]
            + ["--rate", str(rate), "--count", str(count)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert client.stdin is not None and client.stdout is not None
        if client.stdout.readline().strip() != "warm":
            raise RuntimeError("the gRPC floor client did not warm up")
        server_cpu0 = cpu_seconds([server.pid])
        client.stdin.write("go\n")
        client.stdin.flush()
        out, _ = client.communicate(timeout=300)
        server_cpu = cpu_seconds([server.pid]) - server_cpu0
        if client.returncode != 0:
            raise RuntimeError(f"the gRPC floor client failed ({client.returncode})")
    finally:
        server.terminate()
        server.wait(10)
    got = json.loads(out.strip().splitlines()[-1])
    calls = got["calls"]
    return {
        "cpu_us_per_request": (got["client_cpu_s"] + server_cpu) / calls * 1e6,
        "client_cpu_us_per_request": got["client_cpu_s"] / calls * 1e6,
        "server_cpu_us_per_request": server_cpu / calls * 1e6,
        "requests_per_s": calls / got["seconds"],
        "request_bytes": float(size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc_floor")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("serve")
    c = sub.add_parser("call")
    c.add_argument("--target", required=True)
    c.add_argument("--size", type=int, required=True)
    c.add_argument("--rate", type=float, required=True)
    c.add_argument("--count", type=int, required=True)
    args = parser.parse_args()
    if args.cmd == "serve":
        uvloop.run(serve())
    else:
        print(json.dumps(uvloop.run(call(args.target, args.size, args.rate, args.count))))


if __name__ == "__main__":
    main()
