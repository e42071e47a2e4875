"""What request handlers get: the gateway's long-lived services and the request's own context."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.common.broker_config_store import BrokerConfigStore
from services.common.coordinator.clients import CoordinatorClients
from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.metadata_cache import MetadataCache
from services.common.storage_client import StorageClients
from services.common.zk.client import AsyncZk
from services.common.zk.layout import Endpoint
from services.common.zk.producer_ids import ProducerIdManager
from services.gateway.authorizer import Authorizer
from services.gateway.controller_client import ControllerClient
from services.gateway.dynamic_config import GatewayBrokerConfig
from services.gateway.fetch_park import FetchPark
from services.gateway.metadata_entries import TopicEntries
from services.gateway.offsets_cache import OffsetsCache
from services.gateway.produce_order import ProduceOrder
from services.gateway.quota_manager import ClientQuotaManager
from services.gateway.sasl import Session
from services.gateway.settings import GatewaySettings
from services.gateway.txn_verify_batch import VerificationBatcher

log = get_logger("gateway")


@dataclass(slots=True)
class GatewayServices:
    settings: GatewaySettings
    endpoint: Endpoint  # this gateway as clients see it (advertised host/port, rack)
    cache: MetadataCache
    storage: StorageClients
    controller: ControllerClient
    offsets: OffsetsCache
    coordinators: CoordinatorClients | None = None
    txn_coordinators: CoordinatorClients | None = None
    txn_verifier: VerificationBatcher | None = None  # made on first use (txn_verification)
    producer_ids: ProducerIdManager | None = None
    zk: AsyncZk | None = None  # for read-your-writes checks after admin changes
    # /config/brokers/* as ZooKeeper holds them (dynamic broker configs of every broker id)
    broker_configs: BrokerConfigStore = field(default_factory=BrokerConfigStore)
    # the dynamic broker configs this gateway applies (None: static settings only)
    broker_config: GatewayBrokerConfig | None = None
    # topic auto-creations in flight -> their controller call (Metadata error code per topic)
    creating: dict[str, asyncio.Task[dict[str, ErrorCode]]] = field(default_factory=dict)
    # the CreateInternalTopic call for __consumer_offsets in flight (at most one per gateway)
    offsets_topic_creation: asyncio.Future[Any] | None = None
    txn_topic_creation: asyncio.Future[Any] | None = None
    # how long FindCoordinator waits for a coordinator being created / placed
    # (kafkapy.coordinator.lookup.wait.ms)
    coordinator_wait_s: float = 3.0
    authorizer: Authorizer | None = None  # None: authorizer.class.name not set
    quotas: ClientQuotaManager | None = None  # client quotas (quota_manager.py)
    # Metadata entries of every topic, reused while unchanged (metadata_entries.py)
    topic_entries: TopicEntries = field(default_factory=TopicEntries)
    _background: set[asyncio.Future[Any]] = field(default_factory=set)

    @property
    def node_id(self) -> int:
        return self.endpoint.node_id

    @property
    def message_max_bytes(self) -> int:
        """message.max.bytes in force (dynamic broker config, else the setting)."""
        bc = self.broker_config
        return bc.message_max_bytes if bc is not None else self.settings.message_max_bytes

    @property
    def request_timeout_s(self) -> float:
        return self.settings.request_timeout_ms / 1000.0

    def spawn(self, work: Awaitable[Any], what: str) -> asyncio.Future[Any]:
        """Run ``work`` in the background (kept referenced; failures are logged)."""
        task = asyncio.ensure_future(work)
        self._background.add(task)

        def done(t: asyncio.Future[Any]) -> None:
            self._background.discard(t)
            if not t.cancelled() and (exc := t.exception()) is not None:
                log.warning("background_task_failed", what=what, error=repr(exc))

        task.add_done_callback(done)
        return task

    async def wait_background(self, grace_s: float) -> None:
        if self._background:
            await asyncio.wait(list(self._background), timeout=grace_s)


@dataclass(slots=True)
class ClientSoftware:
    """What a connection's client said it is (ApiVersions v3+: client_software_name/version);
    empty until then, and for clients that do not say."""

    name: str = ""
    version: str = ""


@dataclass(slots=True)
class RequestContext:
    services: GatewayServices
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    versions: Mapping[int, tuple[int, int]]  # what this gateway advertises in ApiVersions
    close: Callable[[str], None] | None = None  # closes the client connection (with a reason)
    fetch_park: FetchPark | None = None  # the connection's parked long polls (fetch_park.py)
    # the connection's produce ordering (produce_order.py); a request alone gets its own
    produce_order: ProduceOrder = field(default_factory=ProduceOrder)
    software: ClientSoftware = field(default_factory=ClientSoftware)  # the connection's client
    session: Session | None = None  # the connection's listener and principal (sasl.py)

    @property
    def listener(self) -> str | None:
        """The name of the listener the request came in on (None outside a connection)."""
        return self.session.listener.name if self.session is not None else None

    def close_connection(self, reason: str) -> None:
        if self.close is not None:
            self.close(reason)
