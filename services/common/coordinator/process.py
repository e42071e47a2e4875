"""A coordinator process (group or transaction): ZooKeeper, metadata cache, gRPC, registration,
shards.

Start order: admin HTTP (so /healthz answers at once), ZooKeeper session, metadata cache (first
snapshot), the gRPC ``Forward`` service + grpc.health.v1, then the ephemeral
``<kind root>/ids/<node.id>`` registration (the controller places shards on registered
coordinators only), then the shard manager follows the shard map. Ready = registered and every
shard placed here loaded. A lost ZooKeeper session resigns every shard (the controller may
already have moved them); they are taken again from the map once the session is back.
SIGTERM: deregister (the controller moves the shards away at once), stop taking requests,
resign (parked requests answer NOT_COORDINATOR), let in-flight requests finish (bounded by
kafkapy.shutdown.timeout.ms), close, exit 0.

A subclass builds ``shards`` and ``service`` (after this ``__init__``: they may use ``zk``,
``cache``, ``storage`` and ``registrar``) and names how its servicer is added to the server.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health

from services.common import internal_tls
from services.common.admin_http import AdminServer
from services.common.coordinator.forward import ForwardService
from services.common.coordinator.settings import CoordinatorSettings
from services.common.coordinator.shard_manager import ShardManager
from services.common.logging import configure_logging, get_logger
from services.common.metadata_cache import MetadataCache, ZkMetadataSync
from services.common.node_ids import with_generated_id
from services.common.runtime import add_port, new_grpc_server, serve_until_signalled, set_serving
from services.common.storage_client import StorageClients
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.common.zk.registration import EphemeralRegistrar
from services.common.zone import with_discovered_rack

log = get_logger("coordinator.process")


class CoordinatorProcess:
    shards: ShardManager[Any, Any]
    service: ForwardService

    def __init__(self, kind: layout.CoordinatorKind, settings: CoordinatorSettings) -> None:
        self.kind = kind
        self.settings = settings
        self.zk = AsyncZk.for_service(settings)
        self.cache = MetadataCache()
        self.sync = ZkMetadataSync(self.zk, self.cache)
        self.storage = StorageClients(self.cache)
        self.endpoint = layout.Endpoint(settings.node_id, "", 0, settings.broker_rack)
        self.registrar = EphemeralRegistrar(
            self.zk,
            kind.path(settings.node_id),
            lambda: self.endpoint.to_json(),
            settings.zookeeper_session_timeout_ms,
            f"{kind.name} coordinator node.id {settings.node_id}",
            on_registered=lambda: self.shards.reconcile(),
        )
        self.admin: AdminServer | None = None
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._shard_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._session_lost = False

    def add_servicer(self, server: grpc.aio.Server) -> None:
        raise NotImplementedError

    async def on_started(self) -> None:
        """After registration, with the shard manager running."""

    async def on_stopping(self) -> None:
        """Before the shards are resigned."""

    def ready(self) -> bool:
        return (
            not self._stopping
            and self.zk.connected
            and self.registrar.registered
            and len(self.shards.loaded_shards()) == len(self.shards.owned)
        )

    async def start(self) -> None:
        st = self.settings
        self.admin = AdminServer(st.admin_host, st.admin_port, self.ready)
        self.admin.start()
        await self.zk.start()
        self.zk.on_state(self._on_zk_state)
        await self.zk.ensure_layout()
        await self.sync.start()
        self._server, self._health = new_grpc_server()
        self.add_servicer(self._server)
        port = add_port(self._server, st.listener.bind_target)
        await self._server.start()
        await set_serving(self._health, True)
        adv = st.advertised(port)
        self.endpoint = layout.Endpoint(st.node_id, adv.host, adv.port, st.broker_rack)
        await self.registrar.register()
        self._shard_task = asyncio.create_task(self.shards.run(), name="shards")
        await self.on_started()
        log.info(
            f"{self.kind.name}_coordinator_started",
            grpc=f"{st.listener.host}:{port}",
            advertised=f"{adv.host}:{adv.port}",
            rack=st.broker_rack,
            admin_port=self.admin.port,
        )

    def _on_zk_state(self, state: str) -> None:
        if self._stopping:
            return
        if state == "LOST":
            self._session_lost = True
            self.shards.suspend()
        elif state == "CONNECTED" and self._session_lost:
            self._session_lost = False
            self.shards.resume()

    async def stop(self) -> None:
        self._stopping = True
        log.info(f"{self.kind.name}_coordinator_stopping")
        await self.registrar.deregister()
        self.service.accepting = False
        if self._health is not None:
            await set_serving(self._health, False)
        if self._shard_task is not None:
            self._shard_task.cancel()
            await asyncio.gather(self._shard_task, return_exceptions=True)
        await self.on_stopping()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.shutdown_timeout_ms / 1000.0
        await self.shards.stop()
        if self._server is not None:
            await self._server.stop(grace=max(0.0, deadline - loop.time()))
        await self.service.drain(deadline - loop.time())
        self.sync.stop()
        await self.storage.close()
        try:
            await self.zk.stop()
        except Exception as exc:  # noqa: BLE001 - closing anyway
            log.warning("zookeeper_close_failed", error=repr(exc))
        if self.admin is not None:
            await self.admin.stop()
        log.info(f"{self.kind.name}_coordinator_stopped")


S = TypeVar("S", bound=CoordinatorSettings)


async def serve_coordinator(
    service: str,
    settings_type: type[S],
    make_process: Callable[[S], CoordinatorProcess],
    argv: Sequence[str] | None,
) -> int:
    """A coordinator's ``main``: settings from flags/env, logging, a generated node id when
    ``node.id`` is -1, the zone from the Node's label when asked, then serve until SIGTERM."""
    settings = settings_type.load(sys.argv[1:] if argv is None else argv)
    configure_logging(service, settings.node_id, settings.log_format, settings.log_level)
    internal_tls.configure(settings)  # ConfigError (exit 2) on unusable certificates
    settings = await with_generated_id(settings, "node_id")
    settings = await with_discovered_rack(settings)
    return await serve_until_signalled(make_process(settings))
