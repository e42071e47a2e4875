"""Admin HTTP endpoints every service serves: /metrics, /healthz, /readyz."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator
from email.utils import formatdate

import uvicorn
from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest


def build_app(ready: Callable[[], bool], registry: CollectorRegistry = REGISTRY) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def date_header(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        response.headers["date"] = formatdate(usegmt=True)
        return response

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz(response: Response) -> dict[str, str]:
        if ready():
            return {"status": "ready"}
        response.status_code = 503
        return {"status": "not ready"}

    return app


class QuietServer(uvicorn.Server):
    """uvicorn that sleeps until it is stopped.

    uvicorn's own main loop wakes every 100 ms to poll ``should_exit`` and refresh its Date
    header. On an idle service those ten wake-ups a second were most of the process's CPU
    (docs/performance.md, "Idle"), so this server waits on an event instead, and the Date
    header is stamped on each response (``build_app``). Signals stay with the service
    (``runtime.stop_event_on_signals``), which stops this server through ``request_exit``.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        await self.on_tick(0)  # sets the default headers
        await self._exit.wait()

    def request_exit(self) -> None:
        self.should_exit = True
        self._exit.set()


class AdminServer:
    """uvicorn running inside the service's own event loop."""

    def __init__(self, host: str, port: int, ready: Callable[[], bool]) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(128)
        self.port: int = self._sock.getsockname()[1]
        config = uvicorn.Config(
            build_app(ready),
            log_level="warning",
            access_log=False,
            lifespan="off",
            date_header=False,
        )
        self._server = QuietServer(config)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))

    async def stop(self) -> None:
        self._server.request_exit()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
