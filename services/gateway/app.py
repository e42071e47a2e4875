"""The gateway process: ZooKeeper, metadata cache, Kafka listener, admin HTTP, registration.

Start order: admin HTTP (so /healthz answers at once), ZooKeeper session, metadata cache
(first snapshot), Kafka listener bound (its port is what gets advertised) but refusing connections,
the ephemeral ``/kafka-py/gateways/<id>`` registration (waiting out the node of a previous
process, retrying while ZooKeeper is unreachable), then the listener accepts. So no Kafka request
is answered, and /readyz is not 200, before the gateway is registered and able to route: ready =
registered, ZooKeeper connected, cache loaded, accepting. SIGTERM (also while starting): not
ready, deregister, stop accepting, let running requests finish (bounded by
kafkapy.shutdown.timeout.ms), close, exit 0; every ZooKeeper step is bounded, so a stop while
ZooKeeper is unreachable ends in seconds.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from services.common import internal_tls, protocol
from services.common.admin_http import AdminServer
from services.common.client_quotas import QuotaConfigs
from services.common.coordinator.clients import CoordinatorClients
from services.common.logging import configure_logging, get_logger
from services.common.metadata_cache import MetadataCache, ZkMetadataSync
from services.common.node_ids import with_generated_id
from services.common.runtime import run, serve_until_signalled
from services.common.storage_client import StorageClients
from services.common.zk import layout
from services.common.zk.broker_config_sync import ZkBrokerConfigSync
from services.common.zk.client import AsyncZk
from services.common.zk.producer_ids import ProducerIdManager
from services.common.zk.registration import EphemeralRegistrar
from services.common.zone import with_discovered_rack
from services.gateway.authorizer import AclSync, Authorizer, parse_super_users
from services.gateway.connection_quotas import ConnectionQuotas
from services.gateway.context import GatewayServices
from services.gateway.controller_client import ControllerClient
from services.gateway.dynamic_config import GatewayBrokerConfig
from services.gateway.handlers import HANDLERS, advertised_versions
from services.gateway.listeners import advertised_addresses
from services.gateway.offsets_cache import OffsetsCache
from services.gateway.quota_manager import ClientQuotaManager
from services.gateway.quota_sync import QuotaSync
from services.gateway.security import listener_security
from services.gateway.server import KafkaServer
from services.gateway.settings import GatewaySettings

log = get_logger("gateway")


class Gateway:
    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.zk = AsyncZk.for_service(settings)
        self.cache = MetadataCache()
        self.sync = ZkMetadataSync(self.zk, self.cache)
        listener = settings.listener
        self.services = GatewayServices(
            settings=settings,
            endpoint=layout.Endpoint(
                settings.node_id, listener.host, listener.port, settings.broker_rack
            ),
            cache=self.cache,
            storage=StorageClients(self.cache),
            controller=ControllerClient(self.cache),
            offsets=OffsetsCache(),
            coordinators=CoordinatorClients(self.cache),
            txn_coordinators=CoordinatorClients(self.cache, layout.TRANSACTION),
            coordinator_wait_s=settings.coordinator_lookup_wait_ms / 1000.0,
            producer_ids=ProducerIdManager(
                self.zk, settings.node_id, settings.producer_id_block_size
            ),
            zk=self.zk,
        )
        self.cache.on_topic_removed(self.services.offsets.forget_topic)
        self.acl_sync: AclSync | None = None
        if settings.authorizer_class_name:
            self.services.authorizer = Authorizer(
                parse_super_users(settings.super_users), settings.allow_everyone_if_no_acl_found
            )
            self.acl_sync = AclSync(self.zk, self.services.authorizer)
        quota_configs = QuotaConfigs()
        self.services.quotas = ClientQuotaManager(
            quota_configs, settings.quota_window_num, settings.quota_window_size_seconds
        )
        self.quota_sync = QuotaSync(self.zk, quota_configs)
        quotas = ConnectionQuotas()
        store = self.services.broker_configs
        self.broker_config_sync = ZkBrokerConfigSync(self.zk, store)
        self.services.broker_config = GatewayBrokerConfig(settings, store, quotas)
        store.on_change(self.services.broker_config.on_change)
        # one server per listener (several listeners: e.g. PLAINTEXT + SASL_SSL), sharing the
        # connection quotas; the first is the one readiness probes and local tools use
        self.servers = [
            KafkaServer(
                self.services,
                HANDLERS,
                advertised_versions(),
                max_request_bytes=settings.socket_request_max_bytes,
                max_inflight=settings.max_inflight_requests,
                idle_timeout_s=settings.connections_max_idle_ms / 1000.0,
                quotas=quotas,
                security=listener_security(settings, listener),
            )
            for listener in settings.kafka_listeners
        ]
        self.server = self.servers[0]
        self._tls_watchers: list[asyncio.Task[None]] = []
        self.registrar = EphemeralRegistrar(
            self.zk,
            layout.gateway_path(settings.node_id),
            lambda: self.services.endpoint.to_json(),
            settings.zookeeper_session_timeout_ms,
            f"gateway node.id {settings.node_id}",
        )
        self.admin: AdminServer | None = None
        self._stopping = False

    def ready(self) -> bool:
        return (
            not self._stopping
            and self.registrar.registered
            and self.zk.connected
            and self.cache.loaded
            and all(server.bound for server in self.servers)
        )

    async def start(self) -> None:
        st = self.settings
        self.admin = AdminServer(st.admin_host, st.admin_port, self.ready)
        self.admin.start()
        protocol.precompile()
        await self.zk.start()
        await self.zk.ensure_layout()
        await self.sync.start()
        await self.broker_config_sync.start()
        if self.acl_sync is not None:
            await self.acl_sync.start()  # ACLs in force before the first accept
        await self.quota_sync.start()  # client quotas too
        assert self.services.broker_config is not None
        await self.services.broker_config.apply()  # limits in force before the first accept
        listeners = st.kafka_listeners
        bound = {}
        for listener, server in zip(listeners, self.servers, strict=True):
            bound[listener.name] = await server.start(listener.host, listener.port, serve=False)
            tls = server.security.tls
            if tls is not None:
                interval = st.ssl_reload_check_interval_ms / 1000.0
                self._tls_watchers.append(asyncio.create_task(tls.watch(interval)))
        adv = advertised_addresses(listeners, st.advertised_kafka_listeners, bound)
        first = adv[listeners[0].name]
        self.services.endpoint = layout.Endpoint(
            st.node_id,
            first.host,
            first.port,
            st.broker_rack,
            tuple((name, a.host, a.port) for name, a in adv.items()) if len(adv) > 1 else (),
        )
        await self.registrar.register()
        for server in self.servers:
            await server.serve()
        log.info(
            "gateway_started",
            listeners={lst.name: f"{lst.host}:{bound[lst.name]}" for lst in listeners},
            advertised={name: f"{a.host}:{a.port}" for name, a in adv.items()},
            rack=st.broker_rack,
            admin_port=self.admin.port,
        )

    async def stop(self) -> None:
        self._stopping = True
        log.info("gateway_stopping")
        await self.registrar.deregister()
        for task in self._tls_watchers:
            task.cancel()
        grace = self.settings.shutdown_timeout_ms / 1000.0
        await asyncio.gather(*(server.drain(grace) for server in self.servers))
        await self.services.wait_background(2.0)
        self.sync.stop()
        self.broker_config_sync.stop()
        if self.acl_sync is not None:
            self.acl_sync.stop()
        self.quota_sync.stop()
        await self.services.storage.close()
        await self.services.controller.close()
        for clients in (self.services.coordinators, self.services.txn_coordinators):
            if clients is not None:
                await clients.close()
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
    internal_tls.configure(settings)  # ConfigError (exit 2) on unusable certificates
    settings = await with_generated_id(settings, "node_id")
    settings = await with_discovered_rack(settings)
    return await serve_until_signalled(Gateway(settings))


def cli() -> None:
    run(main)
