"""The admin HTTP server: its endpoints, its Date header, and that it neither polls nor takes
the service's signals."""

from __future__ import annotations

import asyncio
import email.utils
import signal
import time
import urllib.error
import urllib.request

import pytest
import uvloop

from services.common import admin_http


def _get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_endpoints_answer_with_a_current_date_and_stop_promptly() -> None:
    ready = False

    async def scenario() -> None:
        server = admin_http.AdminServer("127.0.0.1", 0, lambda: ready)
        server.start()
        await asyncio.sleep(0.2)
        status, _, body = await asyncio.to_thread(_get, server.port, "/readyz")
        assert (status, body) == (503, b'{"status":"not ready"}')

        nonlocal ready
        ready = True
        status, headers, _ = await asyncio.to_thread(_get, server.port, "/readyz")
        assert status == 200
        stamped = email.utils.parsedate_to_datetime(headers["date"]).timestamp()
        assert abs(stamped - time.time()) < 5

        status, _, body = await asyncio.to_thread(_get, server.port, "/healthz")
        assert (status, body) == (200, b'{"status":"ok"}')
        status, headers, body = await asyncio.to_thread(_get, server.port, "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        assert b"python_info" in body

        started = time.monotonic()
        await server.stop()
        assert time.monotonic() - started < 1.0

    uvloop.run(scenario())


def test_the_server_does_not_wake_up_while_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn's own main loop ticks ten times a second; this one ticks once, at start."""
    ticks = 0
    on_tick = admin_http.QuietServer.on_tick

    async def counting(self: admin_http.QuietServer, counter: int) -> bool:
        nonlocal ticks
        ticks += 1
        return await on_tick(self, counter)

    monkeypatch.setattr(admin_http.QuietServer, "on_tick", counting)

    async def scenario() -> None:
        server = admin_http.AdminServer("127.0.0.1", 0, lambda: True)
        server.start()
        await asyncio.sleep(0.6)
        assert (await asyncio.to_thread(_get, server.port, "/healthz"))[0] == 200
        await server.stop()

    uvloop.run(scenario())
    assert ticks == 1


def test_signals_stay_with_the_service() -> None:
    async def scenario() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        server = admin_http.AdminServer("127.0.0.1", 0, lambda: True)
        server.start()
        await asyncio.sleep(0.2)
        signal.raise_signal(signal.SIGTERM)
        await asyncio.wait_for(stop.wait(), 2)
        assert (await asyncio.to_thread(_get, server.port, "/healthz"))[0] == 200
        await server.stop()
        asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)

    uvloop.run(scenario())
