"""The console process: the REST API and the page on ``console.port``, /metrics, /healthz and
/readyz on ``admin.port`` like every service."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from services.cli.common import CliError, read_properties
from services.common.admin_http import AdminServer, QuietServer
from services.common.logging import configure_logging, get_logger
from services.common.runtime import run, serve_until_signalled
from services.common.settings import ConfigError
from services.console.api import ConsoleState, install_error_handler, router
from services.console.cluster_admin import ConsoleAdmin
from services.console.lag_history import LagHistory
from services.console.records import RecordReader, TestProducer
from services.console.settings import ConsoleSettings

log = get_logger(__name__)
STATIC = resources.files("services.console") / "static"


def client_conf(settings: ConsoleSettings) -> dict[str, Any]:
    conf: dict[str, Any] = {}
    if settings.console_client_config:
        try:
            conf.update(read_properties(settings.console_client_config))
        except CliError as exc:
            raise ConfigError(f"console.client.config: {exc}") from None
    conf["bootstrap.servers"] = settings.bootstrap_servers
    return conf


def build_state(settings: ConsoleSettings) -> ConsoleState:
    conf = client_conf(settings)
    timeout = settings.request_timeout_ms / 1000
    admin = ConsoleAdmin(conf, settings.zookeeper_connect, timeout)
    return ConsoleState(
        admin=admin,
        reader=RecordReader(conf, admin.groups, timeout),
        producer=TestProducer(conf, admin.groups, timeout),
        lag=LagHistory(
            admin.total_lag,
            settings.console_lag_sample_interval_ms / 1000,
            settings.console_lag_history_points,
            settings.console_lag_watch_ms / 1000,
            settings.console_lag_max_groups,
        ),
        read_only=settings.console_read_only,
        bootstrap=settings.bootstrap_servers,
        records_max=settings.console_records_max,
    )


def create_app(console: ConsoleState) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        sampler = asyncio.create_task(console.lag.run())
        try:
            yield
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            await asyncio.to_thread(console.producer.close)
            await asyncio.to_thread(console.admin.close)

    app = FastAPI(
        title="kafka-py console",
        description="REST admin API of a kafka-py cluster (the web console uses it).",
        version="1",
        lifespan=lifespan,
        docs_url="/api/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.console = console
    install_error_handler(app)
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"))

    @app.get("/index.html", include_in_schema=False)
    async def index_html() -> RedirectResponse:
        return RedirectResponse("/")

    return app


class ConsoleService:
    """The console's two HTTP servers, started and stopped like every service."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self._task: asyncio.Task[None] | None = None
        self._server: QuietServer | None = None
        self._admin: AdminServer | None = None

    async def start(self) -> None:
        s = self.settings
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((s.console_host, s.console_port))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"console.port {s.console_port}: cannot bind {s.console_host}: {exc.strerror}"
            ) from None
        sock.listen(128)
        # signals stay with the service (serve_until_signalled), as for every admin server
        server = QuietServer(
            uvicorn.Config(create_app(build_state(s)), log_level="warning", access_log=False)
        )
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]))
        self._admin = AdminServer(s.admin_host, s.admin_port, lambda: server.started)
        self._admin.start()
        host, port = sock.getsockname()[:2]
        log.info("console serving", url=f"http://{host}:{port}/", admin_port=self._admin.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.request_exit()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        if self._admin is not None:
            await self._admin.stop()


async def main(argv: list[str] | None = None) -> int:
    settings = ConsoleSettings.load(sys.argv[1:] if argv is None else argv)
    configure_logging("console", None, settings.log_format, settings.log_level)
    return await serve_until_signalled(ConsoleService(settings))


def cli(argv: list[str] | None = None) -> None:
    run(lambda: main(argv))
