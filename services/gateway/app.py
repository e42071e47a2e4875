"""The gateway process: ZooKeeper, metadata cache, Kafka listener, admin HTTP, registration.

Start order: admin HTTP (so /healthz answers at once), ZooKeeper session, metadata cache
(first snapshot), Kafka listener, then the ephemeral ``/kafka-py/gateways/<id>`` registration
(so no client is sent here before the listener is up). Ready = ZooKeeper connected, cache
loaded, listener bound. SIGTERM: not ready, deregister, stop accepting, let running requests
finish (bounded by kafkapy.shutdown.timeout.ms), close, exit 0.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from services.common import protocol
from services.common.admin_http import AdminServer
from services.common.logging import configure_logging, get_logger
from services.common.metadata_cache import MetadataCache, ZkMetadataSync
from services.common.runtime import run, stop_event_on_signals
from services.common.storage_client import StorageClients
from services.common.zk import layout
from services.common.zk.client import AsyncZk, NodeExistsError, NoNodeError
from services.common.zk.producer_ids import ProducerIdManager
from services.gateway.context import GatewayServices
from services.gateway.controller_client import ControllerClient
from services.gateway.handlers import HANDLERS, advertised_versions
from services.gateway.offsets_cache import OffsetsCache
from services.gateway.server import KafkaServer
from services.gateway.settings import GatewaySettings

log = get_logger("gateway")


class Gateway:
    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.zk = AsyncZk(settings.zookeeper_connect, settings.zookeeper_session_timeout_ms)
        self.cache = MetadataCache()
        self.sync = ZkMetadataSync(self.zk, self.cache)
        listener = settings.listener
        self.services = GatewayServices(
            settings=settings,
            endpoint=layout.Endpoint(settings.node_id, listener.host, listener.port,
                                     settings.broker_rack),
            cache=self.cache,
            storage=StorageClients(self.cache),
            controller=ControllerClient(self.cache),
            offsets=OffsetsCache(),
            producer_ids=ProducerIdManager(self.zk, settings.node_id,
                                           settings.producer_id_block_size),
            zk=self.zk,
        )
        self.cache.on_topic_removed(self.services.offsets.forget_topic)
        self.server = KafkaServer(
            self.services, HANDLERS, advertised_versions(), max_request_bytes=settings.socket_request_max_bytes,
            max_inflight=settings.max_inflight_requests,
            idle_timeout_s=settings.connections_max_idle_ms / 1000.0)
        self.admin: AdminServer | None = None
        self._stopping = False
        self._session_lost = False
        self._tasks: set[asyncio.Task[Any]] = set()

    def ready(self) -> bool:
        return (not self._stopping and self.zk.connected and self.cache.loaded
                and self.server.bound)

    async def start(self) -> None:
        st = self.settings
        self.admin = AdminServer(st.admin_host, st.admin_port, self.ready)
        self.admin.start()
        protocol.precompile()
        await self.zk.start()
        await self.zk.ensure_layout()
        self.zk.on_state(self._on_zk_state)
        await self.sync.start()
        listener = st.listener
        port = await self.server.start(listener.host, listener.port)
        adv = st.advertised(port)
        self.services.endpoint = layout.Endpoint(st.node_id, adv.host, adv.port, st.broker_rack)
        await self._register()
        log.info("gateway_started", listener=f"{listener.host}:{port}",
                 advertised=f"{adv.host}:{adv.port}", rack=st.broker_rack,
                 admin_port=self.admin.port)

    async def _register(self) -> None:
        """Create our ephemeral znode; wait out a previous incarnation's session if needed."""
        path = layout.gateway_path(self.settings.node_id)
        data = self.services.endpoint.to_json()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.zookeeper_session_timeout_ms / 1000.0 * 1.5 + 5.0
        while True:
            try:
                await self.zk.create(path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                existing = await self.zk.get_or_none(path)
                if existing is not None and existing[1].ephemeralOwner == self.zk.session_id:
                    await self.zk.set(path, data)
                    return
            if loop.time() > deadline:
                raise RuntimeError(f"{path} is held by another session: is node.id "
                                   f"{self.settings.node_id} used twice?")
            log.info("waiting_for_old_registration", path=path)
            await asyncio.sleep(0.5)

    def _on_zk_state(self, state: str) -> None:
        if self._stopping:
            return
        if state == "LOST":
            self._session_lost = True
            log.warning("zookeeper_session_lost")
        elif state == "CONNECTED" and self._session_lost:
            self._session_lost = False
            task = asyncio.get_running_loop().create_task(self._register())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        self._stopping = True
        log.info("gateway_stopping")
        try:
            await self.zk.delete(layout.gateway_path(self.settings.node_id))
        except NoNodeError:
            pass
        except Exception as exc:  # noqa: BLE001 - ZooKeeper gone: the ephemeral goes with it
            log.warning("deregister_failed", error=repr(exc))
        await self.server.drain(self.settings.shutdown_timeout_ms / 1000.0)
        await self.services.wait_background(2.0)
        for task in list(self._tasks):
            task.cancel()
        self.sync.stop()
        await self.services.storage.close()
        await self.services.controller.close()
        try:
            await self.zk.stop()
        except Exception as exc:  # noqa: BLE001 - closing anyway
            log.warning("zookeeper_close_failed", error=repr(exc))
        if self.admin is not None:
            await self.admin.stop()
        log.info("gateway_stopped")


async def main(argv: Sequence[str] | None = None) -> int:
    settings = GatewaySettings.load(sys.argv[1:] if argv is None else argv)
    configure_logging("gateway", settings.node_id, settings.log_format, settings.log_level)
    stop = stop_event_on_signals()
    gateway = Gateway(settings)
    try:
        await gateway.start()
        await stop.wait()
    finally:
        await gateway.stop()
    return 0


def cli() -> None:
    run(main)
