"""A gateway listener's certificates reloaded under handshakes (services/gateway/tls.py): every
handshake gets one whole certificate/key pair, a rotation is served from the next handshakes
on, and a bad new file leaves the old pair serving (it used to leave a half-loaded context)."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path

from structlog.testing import capture_logs

from services.gateway.tls import ReloadingContext, TlsConfig
from tests.integration.tls_support import make_pki


def _serial(der: bytes) -> str:
    out = subprocess.run(
        ["openssl", "x509", "-inform", "DER", "-noout", "-serial"],
        input=der,
        capture_output=True,
        check=True,
    )
    return out.stdout.decode().strip()


async def _handshake(port: int, client: ssl.SSLContext) -> str:
    _, w = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
    der = w.get_extra_info("ssl_object").getpeercert(binary_form=True)
    w.close()
    return _serial(der)


async def test_rotations_and_a_bad_file_under_constant_handshakes(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    keystore = tmp_path / "server.pem"
    keystore.write_bytes(pki.server.read_bytes())
    tls = ReloadingContext(TlsConfig(str(keystore), None, None, "none"), "SSL")
    client = ssl.create_default_context(cafile=str(pki.ca))
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=tls.context)
    port = server.sockets[0].getsockname()[1]
    watcher = asyncio.create_task(tls.watch(0.005))
    seen: list[str] = []
    stop = asyncio.Event()

    async def hammer() -> None:  # handshakes all the time, across every reload below
        while not stop.is_set():
            seen.append(await _handshake(port, client))

    async def served(serial: str) -> None:
        while await _handshake(port, client) != serial:  # noqa: ASYNC110 - asks the server
            await asyncio.sleep(0.01)

    def replace(content: bytes) -> None:
        tmp = keystore.with_suffix(".new")
        tmp.write_bytes(content)
        tmp.replace(keystore)

    try:
        with capture_logs() as logs:
            first = await _handshake(port, client)
            load = [asyncio.create_task(hammer()) for _ in range(4)]
            serials = [first]
            for i in range(5):
                cert, key = pki.server_like(f"rotated{i}")
                replace(cert.read_bytes() + key.read_bytes())
                serials.append(_serial(ssl.PEM_cert_to_DER_cert(cert.read_text())))
                await asyncio.wait_for(served(serials[-1]), 10)
            # a certificate with another certificate's key: refused, the last pair still served
            other, _ = pki.server_like("mismatched")
            _, wrong_key = pki.server_like("unrelated")
            replace(other.read_bytes() + wrong_key.read_bytes())
            await asyncio.sleep(0.2)
            assert await _handshake(port, client) == serials[-1]
            stop.set()
            await asyncio.gather(*load)  # a failed handshake would raise here
    finally:
        watcher.cancel()
        server.close()
    assert set(seen) <= set(serials) and len(seen) > 20
    assert [e for e in logs if e["event"] == "tls_reload_failed"]
