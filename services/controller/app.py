"""The controller process: registration, election, the active term, gRPC and admin HTTP.

States: standby (registered, watching ``/controller``) -> active (won the election; an
:class:`ActiveController` runs) -> standby again on resignation (shutdown, ZooKeeper session loss,
another controller took over, or a fenced write). Every transition holds one lock.

ZooKeeper stalls: disconnected (kazoo SUSPENDED) for longer than the session timeout, the active
controller stops acting, since its session may be gone server-side. If the same session then
reconnects (the server did not expire it), the controller still owns ``/controller`` and no
standby will ever see it go, so it re-runs the election: it deletes its own ``/controller`` and
both controllers compete again (Kafka re-checks ``/controller`` on reconnect the same way).
A real expiry (LOST) re-registers and re-elects once a new session exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

import grpc
from grpc_health.v1 import health
from kazoo.exceptions import KazooException, NodeExistsError, SessionExpiredError

from services.common.admin_http import AdminServer
from services.common.broker_config import DEFAULT_ENTITY
from services.common.broker_config_store import BrokerConfigStore
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import controller_pb2_grpc, elastic_pb2_grpc
from services.common.runtime import add_port, new_grpc_server, set_serving
from services.common.zk import layout
from services.common.zk.broker_config_sync import ZkBrokerConfigSync
from services.common.zk.client import AsyncZk, ZnodeStat
from services.common.zk.layout import Endpoint
from services.common.zk.registration import DEREGISTER_TIMEOUT_S
from services.controller.active import (
    FAILOVER_ERROR_BACKOFF_S,
    ActiveController,
    NotControllerError,
)
from services.controller.admin import AdminOps
from services.controller.elastic_service import ElasticService
from services.controller.elector import Elector
from services.controller.metrics import ControllerMetrics
from services.controller.service import ControllerService
from services.controller.settings import ControllerSettings
from services.controller.zkstore import ControllerMovedError

log = get_logger("controller")

REGISTER_RETRY_S = 0.5
CHILDREN_WATCHES = (
    (layout.BROKER_IDS, "brokers"),
    (layout.BROKER_TOPICS, "topics"),
    (layout.DELETE_TOPICS, "delete_topics"),
    (layout.ISR_CHANGE_NOTIFICATION, "isr_change"),
    (layout.LOG_DIR_EVENT_NOTIFICATION, "log_dir_event"),
    (layout.GROUP_COORDINATOR_IDS, "coordinators"),
    (layout.TRANSACTION_COORDINATOR_IDS, "coordinators"),
)


class ControllerApp:
    def __init__(
        self, settings: ControllerSettings, metrics: ControllerMetrics | None = None
    ) -> None:
        self.settings = settings
        self.id = settings.controller_id
        self.metrics = metrics or ControllerMetrics()
        self.zk = AsyncZk.for_service(settings)
        self.elector = Elector(self.zk, self.id)
        self.broker_configs = BrokerConfigStore()  # dynamic broker configs (KIP-226)
        self.broker_config_sync = ZkBrokerConfigSync(self.zk, self.broker_configs)
        self.broker_configs.on_change(self._on_broker_config)
        self.active: ActiveController | None = None
        self.admin: AdminOps | None = None
        self.registered = False
        self.endpoint: Endpoint | None = None
        self.grpc_port = 0
        self._lock = asyncio.Lock()
        self._stopping = False
        self._session_lost = False
        # resigned on the suspension timer while the session may still live; cleared when the
        # election ran again after a reconnect of that session (or when the session was lost)
        self._resigned_suspended = False
        self._resigned_session: int | None = None  # the session that resigned on the timer
        self._suspensions = 0  # count of SUSPENDED transitions: a timer belongs to one of them
        self._watching_controller = False
        self._watched_topics: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self.admin_server: AdminServer | None = None
        # ZooKeeper callbacks arrive from kazoo's threads: run them (and the tasks they start)
        # in the service's logging context (service, node_id).
        self._context = contextvars.copy_context()

    def ready(self) -> bool:
        return self.registered and self.zk.connected

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        self._context = contextvars.copy_context()
        await self.zk.start()
        self.zk.on_state(lambda state: self._context.run(self._on_zk_state, state))
        await self.zk.ensure_layout()
        await self.broker_config_sync.start()
        self._server, self._health = new_grpc_server()
        elastic_pb2_grpc.add_ElasticServicer_to_server(
            ElasticService(lambda: self.active.elastic if self.active else None), self._server
        )
        controller_pb2_grpc.add_ControllerServicer_to_server(
            ControllerService(lambda: self.admin), self._server
        )
        self.grpc_port = add_port(self._server, self.settings.listener.bind_target)
        await self._server.start()
        adv = self.settings.advertised(self.grpc_port)
        self.endpoint = Endpoint(self.id, adv.host, adv.port)
        self.admin_server = AdminServer(
            self.settings.admin_host, self.settings.admin_port, self.ready
        )
        self.admin_server.start()
        self.metrics.update(None)
        for path, kind in CHILDREN_WATCHES:
            self.zk.watch_children(path, self._children_watcher(kind))
        self.zk.watch_data(
            layout.REASSIGN_PARTITIONS, lambda _data, _stat: self._dispatch("reassign_partitions")
        )
        await set_serving(self._health, True)
        log.info(
            "controller started",
            grpc=f"{self.settings.listener.bind_target}",
            grpc_port=self.grpc_port,
            advertised=self.endpoint.address,
            admin_port=self.admin_server.port,
            zookeeper=self.settings.zookeeper_connect,
        )
        self._spawn(self._register_and_elect(), "register")

    async def stop(self) -> None:
        """Graceful shutdown: resign (delete /controller if ours), stop serving."""
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        async with self._lock:
            await self._resign_locked("shutdown")
        if self._health is not None:
            await set_serving(self._health, False)
        if self._server is not None:
            await self._server.stop(grace=1.0)
        if self.admin_server is not None:
            await self.admin_server.stop()
        self.broker_config_sync.stop()
        await self.zk.stop()
        log.info("controller stopped")

    def _on_broker_config(self, entity: str) -> None:
        """The cluster-wide dynamic broker configs changed: the active controller re-runs the
        election of leaderless partitions (unclean.leader.election.enable may now allow it)."""
        if entity == DEFAULT_ENTITY and self.active is not None:
            self.active.notify("broker_config")

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name, context=self._context)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("controller task failed", task=task.get_name(), exc_info=task.exception())

    # ---- registration ---------------------------------------------------------------------
    async def _register_and_elect(self) -> None:
        await self._register()
        if not self._watching_controller:
            self._watching_controller = True
            self.zk.watch_data(layout.CONTROLLER, self._on_controller_node)
        else:
            await self._controller_changed()

    async def _register(self) -> None:
        """Ephemeral ``/kafka-py/controllers/<id>``; waits while a previous session still holds it."""
        assert self.endpoint is not None
        path = layout.controller_endpoint_path(self.id)
        warned = False
        while not self._stopping:
            try:
                await self.zk.create(path, self.endpoint.to_json(), ephemeral=True)
                break
            except NodeExistsError:
                got = await self.zk.get_or_none(path)
                if got is not None and got[1].ephemeralOwner == self.zk.session_id:
                    break
                if not warned:
                    log.warning(
                        "controller id is registered by another session, waiting", path=path
                    )
                    warned = True
            except KazooException as exc:
                log.warning("registration failed, retrying", error=type(exc).__name__)
            await asyncio.sleep(REGISTER_RETRY_S)
        self.registered = True
        log.info("registered controller endpoint", path=path, endpoint=self.endpoint.address)

    # ---- election -------------------------------------------------------------------------
    def _on_controller_node(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        self._spawn(self._controller_changed(), "controller-change")

    async def _controller_changed(self) -> None:
        if not self.registered or self._stopping:
            return
        async with self._lock:
            holder = await self.elector.holder()
            if holder is None:
                await self._elect_locked()
            elif self.active is not None and (
                holder[0] != self.id or holder[1] != self.zk.session_id
            ):
                await self._resign_locked(f"controller {holder[0]} holds /controller")

    async def _elect_locked(self) -> None:
        if self.active is not None or self._stopping or not self.registered:
            return
        try:
            won = await self.elector.try_elect()
        except KazooException as exc:
            # The multi's outcome is unknown (ConnectionLoss: it may have run): /controller may
            # now be ours while nobody acts. Kafka's checkedEphemeralCreate re-reads the node;
            # here the same session, once connected again, deletes its own node and elects
            # again (as after a stall), a lost session elects in its successor.
            log.warning("controller election interrupted", error=type(exc).__name__)
            self._resigned_suspended, self._resigned_session = True, self.zk.held_session_id
            if self.zk.connected:  # the CONNECTED event may have come already
                self._spawn(self._rejoin_after_suspension(), "re-elect")
            return
        if won is None:
            holder = await self.elector.holder()
            log.info("another controller is active", controller=holder[0] if holder else None)
            return
        epoch, epoch_zk_version = won
        log.info("elected as active controller", epoch=epoch, epoch_zk_version=epoch_zk_version)
        active = ActiveController(
            self.zk,
            self.settings,
            epoch,
            epoch_zk_version,
            self.metrics,
            on_moved=lambda reason: self._on_moved(active, reason),
            watch_topic=self._watch_topic,
            broker_configs=self.broker_configs,
        )
        self.active, self.admin = active, AdminOps(active)
        active.elastic.throttle.alter = self.admin.alter_configs  # the rebalancer's throttles
        try:
            await active.start()
        except (ControllerMovedError, NotControllerError, SessionExpiredError) as exc:
            await self._resign_locked(f"lost control during failover: {type(exc).__name__}")
        except Exception:  # noqa: BLE001 - Kafka: any failover error moves the controller
            log.exception("error while becoming controller, triggering controller movement")
            await asyncio.sleep(FAILOVER_ERROR_BACKOFF_S)
            await self._resign_locked("failover error")

    async def _resign_locked(self, reason: str, *, delete_node: bool = True) -> None:
        active, self.active, self.admin = self.active, None, None
        if active is None:
            return
        await active.stop()
        if delete_node and self.zk.connected:
            # bounded: a connection that looks up may be stalled (the node then goes with the
            # session)
            with contextlib.suppress(KazooException, TimeoutError):
                async with asyncio.timeout(DEREGISTER_TIMEOUT_S):
                    await self.elector.delete_if_ours()
        self.metrics.update(None)
        log.info("resigned as controller", epoch=active.epoch, reason=reason)

    def _on_moved(self, active: ActiveController, reason: str) -> None:
        async def resign() -> None:
            async with self._lock:
                if self.active is active:
                    await self._resign_locked(f"controller moved: {reason}")

        self._spawn(resign(), "resign")

    # ---- ZooKeeper session ----------------------------------------------------------------
    def _on_zk_state(self, state: str) -> None:
        if self._stopping:
            return
        if state == "LOST":
            self.registered = False
            self._session_lost = True
            self._resigned_suspended = False  # the new session's election covers it
            self._spawn(self._lose_session(), "session-lost")
        elif state == "SUSPENDED":
            self._suspensions += 1
            log.warning("zookeeper connection suspended")
            self._spawn(self._watch_suspension(self._suspensions), "suspended")
        elif state == "CONNECTED" and self._session_lost:
            self._session_lost = False
            log.info("zookeeper session re-established")
            self._spawn(self._register_and_elect(), "re-register")
        elif state == "CONNECTED":
            self._resync_children()
            self._spawn(self._rejoin_after_suspension(), "reconnected")

    async def _lose_session(self) -> None:
        async with self._lock:
            await self._resign_locked("zookeeper session lost", delete_node=False)

    async def _watch_suspension(self, suspension: int) -> None:
        """Disconnected longer than the session timeout: the session may be gone server-side,
        so stop acting now rather than when the reconnect reports the expiry. Should the same
        session reconnect instead, :meth:`_rejoin_after_suspension` runs the election again."""
        await asyncio.sleep(self.settings.zookeeper_session_timeout_ms / 1000)
        if self.zk.connected or suspension != self._suspensions:
            return  # reconnected in time (perhaps suspended again since: that one has a timer)
        async with self._lock:
            if self.active is not None:
                session = self.zk.held_session_id
                await self._resign_locked(
                    "zookeeper session timed out while disconnected", delete_node=False
                )
                if not self._session_lost:  # a LOST meanwhile: the new session elects
                    self._resigned_suspended, self._resigned_session = True, session
        if self.zk.connected:  # reconnected while resigning: the CONNECTED event came too early
            await self._rejoin_after_suspension()

    async def _rejoin_after_suspension(self) -> None:
        """The session survived a stall during which this controller resigned: it still owns
        ``/controller``, so nobody acts. Delete the node (the standby's watch fires) and run
        the election; whoever wins starts a new term with a new epoch."""
        async with self._lock:
            if not self._resigned_suspended or self._stopping or not self.zk.connected:
                return
            if self.active is not None or self.zk.held_session_id != self._resigned_session:
                self._resigned_suspended = False  # acting again, or another session elected
                return
            try:
                deleted = await self.elector.delete_if_ours()
                self._resigned_suspended = False
                log.info(
                    "zookeeper session survived the stall; electing again",
                    session_id=f"{self.zk.session_id or 0:x}",
                    deleted_own_controller_node=deleted,
                )
                if await self.elector.holder() is None:
                    await self._elect_locked()
            except KazooException as exc:  # disconnected again: the next CONNECTED retries
                self._resigned_suspended = True
                log.warning("re-election after the stall failed", error=type(exc).__name__)

    # ---- watches -> events ----------------------------------------------------------------
    def _children_watcher(self, kind: str) -> Callable[[list[str]], None]:
        def changed(_children: list[str]) -> None:
            self._dispatch(kind)

        return changed

    def _resync_children(self) -> None:
        """Handle every children watch again after a reconnect of the same session. kazoo's
        ChildrenWatch does not report a list equal to the one it had before the disconnect, so
        a node that re-registered meanwhile (same id, new session: a bounced storage node, a
        group coordinator with a new registration) would go unnoticed; the handlers compare
        registrations themselves and do nothing when nothing changed."""
        for _path, kind in CHILDREN_WATCHES:
            self._dispatch(kind)
        self._dispatch("reassign_partitions")

    def _dispatch(self, kind: str, arg: str | None = None) -> None:
        active = self.active
        if active is not None and active.running:
            active.notify(kind, arg)

    def _adds_partitions(self, name: str, data: bytes) -> bool:
        """Whether the topic znode's ``data`` names partitions the active controller does not
        know (what its PartitionModifications event would add). Not so for the first read of
        every topic's watch when a fresh standby takes over (the failover read the same
        assignments): 100 topics queued 100 events, each a ZooKeeper read, ahead of the
        failover's first client request."""
        active = self.active
        topic = active.ctx.topics.get(name) if active is not None else None
        if topic is None:
            return True
        try:
            assignment, _topic_id = layout.parse_topic_assignment(data)
        except (ValueError, TypeError, KeyError, AttributeError):
            return True  # malformed: the event reads it again and says so
        return not assignment.keys() <= topic.assignment.keys()

    def _watch_topic(self, name: str) -> None:
        if name in self._watched_topics:
            return
        self._watched_topics.add(name)

        def changed(data: bytes | None, stat: ZnodeStat | None) -> None:
            if data is not None and self._adds_partitions(name, data):
                self._dispatch("topic", name)

        # kazoo's DataWatch reads the znode synchronously when it is set: not on the loop (a
        # failover over many topics would stall on one round trip per topic)
        self._spawn(
            asyncio.to_thread(self.zk.watch_data, layout.topic_path(name), changed), "watch-topic"
        )
