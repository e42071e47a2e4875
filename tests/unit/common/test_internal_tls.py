"""Internal mutual TLS on a real grpc.aio server and channels: certificate checks both ways and
rotation of the server's certificates without a restart (services/common/internal_tls.py)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.cli.certs import init_certs, service_files
from services.common.internal_tls import InternalTls, TlsFiles, read_material, tool_channel
from services.common.settings import ConfigError


def tls_of(directory: Path, service: str) -> InternalTls:
    files = service_files(directory, service)
    return InternalTls(TlsFiles(str(files.certificate), str(files.key), str(directory / "ca.pem")))


async def check(port: int, creds: grpc.ChannelCredentials | None) -> None:
    target = f"127.0.0.1:{port}"
    channel = (
        grpc.aio.insecure_channel(target)
        if creds is None
        else grpc.aio.secure_channel(target, creds)
    )
    async with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        resp = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING


@pytest.fixture
def cluster_ca(tmp_path: Path) -> Path:
    init_certs(tmp_path / "ca1", ["storage", "gateway"])
    return tmp_path / "ca1"


async def test_mutual_tls_refuses_plain_and_foreign_clients_and_follows_rotation(
    tmp_path: Path, cluster_ca: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the server reads its own copy of the files, so they can be swapped under it
    served = tmp_path / "served"
    shutil.copytree(cluster_ca, served)
    server_tls = tls_of(served, "storage")
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_secure_port("127.0.0.1:0", server_tls.server_credentials())
    await server.start()
    try:
        member = tls_of(cluster_ca, "gateway")
        await check(port, member.channel_credentials())

        # command-line tools: the same settings from the environment
        gateway = service_files(cluster_ca, "gateway")
        for name, value in (
            ("ENABLED", "true"),
            ("KEYSTORE_LOCATION", str(gateway.certificate)),
            ("KEY_LOCATION", str(gateway.key)),
            ("TRUSTSTORE_LOCATION", str(cluster_ca / "ca.pem")),
        ):
            monkeypatch.setenv(f"KAFKAPY_INTERNAL_SSL_{name}", value)

        def tool_check() -> int:
            with tool_channel(f"127.0.0.1:{port}") as channel:
                req = health_pb2.HealthCheckRequest()
                return int(health_pb2_grpc.HealthStub(channel).Check(req, timeout=5).status)

        assert await asyncio.to_thread(tool_check) == health_pb2.HealthCheckResponse.SERVING

        with pytest.raises(grpc.aio.AioRpcError) as plain:
            await check(port, None)
        assert plain.value.code() == grpc.StatusCode.UNAVAILABLE

        init_certs(tmp_path / "other", ["gateway"])  # a certificate from another CA
        with pytest.raises(grpc.aio.AioRpcError) as foreign:
            await check(port, tls_of(tmp_path / "other", "gateway").channel_credentials())
        assert foreign.value.code() == grpc.StatusCode.UNAVAILABLE

        # without a client certificate, though trusting the server
        no_cert = grpc.ssl_channel_credentials(root_certificates=member.material.root_certificates)
        with pytest.raises(grpc.aio.AioRpcError):
            await check(port, no_cert)

        # rotation: new leaf certificates from the same CA, the server keeps serving
        init_certs(served, ["storage"])
        await check(port, member.channel_credentials())
        assert server_tls.generation == 1

        # the whole set replaced by another CA's: only clients of that CA get in from now on,
        # which proves the running server took the new certificate and trust store
        for name in ("ca.pem", "ca-key.pem"):
            shutil.copy(tmp_path / "other" / name, served / name)
        init_certs(served, ["storage"])  # issued by the other CA, now the one in `served`
        await check(port, tls_of(tmp_path / "other", "gateway").channel_credentials())
        with pytest.raises(grpc.aio.AioRpcError):
            await check(port, member.channel_credentials())
    finally:
        await server.stop(None)


def test_client_generation_changes_on_rotation_only(cluster_ca: Path) -> None:
    tls = tls_of(cluster_ca, "gateway")
    before = tls.material
    assert not tls.reload_if_changed()
    init_certs(cluster_ca, ["gateway"])
    assert tls.reload_if_changed()
    assert tls.generation == 1 and tls.material != before
    assert tls.material.root_certificates == before.root_certificates


def test_bad_files_are_one_line_config_errors(tmp_path: Path, cluster_ca: Path) -> None:
    storage, gateway = service_files(cluster_ca, "storage"), service_files(cluster_ca, "gateway")
    ca = str(cluster_ca / "ca.pem")
    with pytest.raises(ConfigError, match="internal.ssl.keystore.location"):
        read_material(TlsFiles(str(storage.certificate), str(gateway.key), ca))  # wrong key
    with pytest.raises(ConfigError, match="no such file|No such file"):
        read_material(TlsFiles(str(tmp_path / "missing.pem"), None, ca))
    with pytest.raises(ConfigError, match="no PEM private key"):
        read_material(TlsFiles(str(storage.certificate), None, ca))
    with pytest.raises(ConfigError, match="truststore"):
        read_material(TlsFiles(str(storage.certificate), str(storage.key), str(storage.key)))


async def test_channel_pool_recreates_channels_after_a_rotation(
    cluster_ca: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.common import internal_tls
    from services.common.storage_client import ChannelPool

    tls = tls_of(cluster_ca, "gateway")
    monkeypatch.setattr(internal_tls, "_active", tls)
    pool: ChannelPool[object] = ChannelPool(lambda _node: "127.0.0.1:1", lambda ch: object())
    try:
        first = pool.stub(1)
        assert pool.stub(1) is first  # long-lived while nothing changes
        init_certs(cluster_ca, ["gateway"])
        assert tls.reload_if_changed()
        second = pool.stub(1)
        assert second is not first  # a new channel, with the new certificate
        assert pool.stub(1) is second
    finally:
        await pool.close()
        if tls._watcher is not None:  # new_channel started the file watch
            tls._watcher.cancel()
