"""Process runtime shared by the services: uvloop, malloc tuning, signals, gRPC set-up."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import os
import resource
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

import grpc
import uvloop
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.common import internal_tls, loop_lag
from services.common.profiling import profiled
from services.common.settings import ConfigError
from services.common.zk.client import ZkConnectError

GRPC_OPTIONS = [
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # Servers accept the clients' keepalive pings (else idle channels get GOAWAY too_many_pings).
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.so_reuseport", 0),
]


# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Record batches pass through as buffers of 100 KiB to tens of MiB. With glibc's defaults each
# such buffer is a fresh mmap (or grows the heap just to be trimmed again), so every byte copied
# also pays a page fault and a page zeroing: measured, that doubles the CPU cost of a produced or
# fetched GB. Serving them from the heap, and keeping up to this much free heap, avoids it.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's maximum on 64-bit
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024


def tune_malloc() -> bool:
    """Apply the malloc thresholds above (glibc only); returns whether they were applied.

    Does nothing when the environment already sets them (``MALLOC_MMAP_THRESHOLD_``,
    ``MALLOC_TRIM_THRESHOLD_``), so an operator keeps the last word."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    return mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1 and ok


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (the JVM does this for a Kafka broker,
    ``-XX:+MaxFDLimit``); returns (soft before, soft after). A storage node holds 3 descriptors
    per replica (docs/operations.md) and container runtimes often start processes with a low soft
    limit under a high hard one. Unchanged when the hard limit is unlimited or refuses it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft, soft
    return soft, hard


def freeze_startup_heap() -> None:
    """Move every object alive now (modules, codecs, schemas, settings: a started service's
    hundreds of thousands of long-lived objects) out of the cyclic collector's reach.

    A full collection walks every tracked object while the event loop waits: in a gateway that
    has just started, 50-90 ms (storage nodes: 110-160 ms), measured. Without this every later
    full collection would stall requests that long; after it, a collection walks only what was
    allocated since. Call once, when the service has started."""
    gc.collect()
    gc.freeze()


def stop_event_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (graceful shutdown)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


class Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def serve_until_signalled(service: Service) -> int:
    """Start ``service``, wait for SIGTERM/SIGINT, stop it (also when starting failed).

    A signal that arrives while the service is still starting (say, waiting for ZooKeeper or
    for its previous registration to expire) cancels the start, so shutdown never waits on it.
    """
    stop = stop_event_on_signals()
    starting = asyncio.ensure_future(service.start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            return 0
        starting.result()  # a failed start raises here
        freeze_startup_heap()
        await stopping
    finally:
        if not starting.done():  # the serving coroutine itself was cancelled
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
        stopping.cancel()
        await service.stop()
    return 0


def new_grpc_server() -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
    server = grpc.aio.server(options=GRPC_OPTIONS)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    return server, health_servicer


async def set_serving(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    await health_servicer.set("", status)


def new_channel(target: str, options: Sequence[tuple[str, Any]] = GRPC_OPTIONS) -> grpc.aio.Channel:
    """An internal gRPC channel: mutual TLS when ``internal.ssl.enabled`` (internal_tls), else
    plaintext. Pools that keep channels re-create them when ``internal_tls.generation()``
    changes (a certificate rotation)."""
    tls = internal_tls.active()
    if tls is None:
        return grpc.aio.insecure_channel(target, options=options)
    tls.ensure_watching()
    return grpc.aio.secure_channel(target, tls.channel_credentials(), options=options)


def add_port(server: grpc.aio.Server, target: str) -> int:
    """Bind an internal gRPC server: requiring a client certificate when
    ``internal.ssl.enabled``, else plaintext. Returns the bound port."""
    tls = internal_tls.active()
    if tls is None:
        return server.add_insecure_port(target)
    return server.add_secure_port(target, tls.server_credentials())


async def _watching_loop_lag(main: Coroutine[Any, Any, int | None]) -> int | None:
    watcher = asyncio.get_running_loop().create_task(loop_lag.watch())
    try:
        return await main
    finally:
        watcher.cancel()


def run(main: Callable[[], Coroutine[Any, Any, int | None]]) -> None:
    """Run a service's async main under uvloop, with its event loop's lag measured
    (``loop_lag``); config errors exit 2 with one line, no ZooKeeper session at start 1."""
    tune_malloc()
    raise_open_file_limit()
    code: int | None
    try:
        with profiled():
            code = uvloop.run(_watching_loop_lag(main()))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except ZkConnectError as exc:  # as a Kafka broker that cannot reach ZooKeeper at start
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        code = 0
    sys.exit(code or 0)
