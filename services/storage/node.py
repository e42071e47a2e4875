"""A storage node process: start-up, background tasks and graceful shutdown.

Start-up order follows Kafka's ``KafkaServer.startup``: ZooKeeper session and layout, cluster
id, log dir lock and ``meta.properties`` check, load (and recover) the logs, set up replication
(replica fetchers, ISR management), serve gRPC and the admin endpoints, then register
``/brokers/ids/<id>``. Shutdown reverses it (fetchers stop before the logs close) and ends with
flushed, closed logs, fresh checkpoints and the ``.kafka_cleanshutdown`` marker.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from services.common.admin_http import AdminServer
from services.common.broker_config_store import BrokerConfigStore
from services.common.logging import get_logger
from services.common.runtime import add_port, freeze_startup_heap, new_grpc_server, set_serving
from services.common.zk import layout
from services.common.zk.broker_config_sync import ZkBrokerConfigSync
from services.common.zk.client import ZK_UNAVAILABLE, AsyncZk, ZkConnectError
from services.storage.changes import CLEANER
from services.storage.controlled_shutdown import ControlledShutdown, ShutdownSettings
from services.storage.dynamic_config import StorageBrokerConfig
from services.storage.log import checkpoint as ckpt
from services.storage.log.meta_properties import (
    InvalidMetaPropertiesError,
    MetaProperties,
    read_meta_properties,
    write_meta_properties,
)
from services.storage.log_cleaner import LogCleaner
from services.storage.metrics import StorageMetrics
from services.storage.registration import BrokerRegistrar, StartupError, get_or_create_cluster_id
from services.storage.replica_manager import ReplicaManager
from services.storage.replication.service import Replication
from services.storage.server import StorageService, add_storage_service
from services.storage.settings import ListenerAddress, StorageSettingsBase
from services.storage.usage import UsageReporter, capacity_of, counter_total

log = get_logger("storage.node")

LOCK_FILE = ".lock"
LOG_DIR_EVENT_PREFIX = f"{layout.LOG_DIR_EVENT_NOTIFICATION}/log_dir_event_"
INITIAL_TASK_DELAY_MS = 30_000  # Kafka's LogManager.InitialTaskDelayMs
ROLL_FLUSH_CHECK_MS = 1000  # how soon a rolled segment is fsynced (recovery point moves)
NEVER_MS = 2**62  # intervals this large (Kafka's Long.MaxValue default) disable a task
START_POLL_S = 0.1  # how often a start in progress checks for a stop request


class LogDirLock:
    """Kafka's ``.lock`` file: one process per log dir (released by the kernel if we die)."""

    def __init__(self, log_dir: Path) -> None:
        self.path = log_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StartupError(
                f"failed to acquire lock on {self.path}: another process is using this log dir"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def check_meta_properties(log_dir: Path, broker_id: int, cluster_id: str) -> None:
    """Refuse a log dir that belongs to another broker or cluster; write it if missing."""
    try:
        meta = read_meta_properties(log_dir)
    except InvalidMetaPropertiesError as exc:
        raise StartupError(f"{log_dir}/meta.properties is invalid: {exc}") from None
    if meta is None:
        write_meta_properties(log_dir, MetaProperties(broker_id=broker_id, cluster_id=cluster_id))
        return
    if meta.broker_id != broker_id:
        raise StartupError(
            f"configured broker.id {broker_id} doesn't match stored broker.id {meta.broker_id} in "
            f"{log_dir}/meta.properties (moved data? match the id; a new node needs empty log.dirs)"
        )
    if meta.cluster_id is not None and meta.cluster_id != cluster_id:
        raise StartupError(
            f"the cluster id {cluster_id} in ZooKeeper doesn't match the stored cluster.id "
            f"{meta.cluster_id} in {log_dir}/meta.properties: this node is joining the wrong "
            f"cluster (check zookeeper.connect)"
        )
    if meta.cluster_id is None:
        write_meta_properties(
            log_dir, MetaProperties(broker_id=broker_id, cluster_id=cluster_id, extra=meta.extra)
        )


class StorageNode:
    def __init__(
        self, settings: StorageSettingsBase, metrics: StorageMetrics | None = None
    ) -> None:
        self.settings = settings
        self.log_dir = settings.log_dir
        self.log_dirs = [Path(d) for d in settings.all_log_dirs]
        self.zk = AsyncZk.for_service(settings)
        self.metrics = metrics
        self.rm: ReplicaManager | None = None
        self.replication: Replication | None = None
        self.cleaner: LogCleaner | None = None
        self.broker_configs = BrokerConfigStore()
        self.broker_config_sync = ZkBrokerConfigSync(self.zk, self.broker_configs)
        self.dynamic = StorageBrokerConfig(settings, self.broker_configs)
        self.broker_configs.on_change(self.dynamic.on_change)
        self.cluster_id: str | None = None
        self.grpc_server: grpc.aio.Server | None = None
        self.storage_service: StorageService | None = None
        self._health: Any = None
        self.admin: AdminServer | None = None
        self.registrar: BrokerRegistrar | None = None
        self.advertised: ListenerAddress | None = None
        self.bound_port: int | None = None
        self._locks: list[LogDirLock] = []
        self._failed_at_start: dict[Path, str] = {}
        self._stop_tasks = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._zk_started = False
        self._stopping = False
        # connecting to ZooKeeper or waiting to register: a stop requested now cancels the start
        self.waiting_for_zookeeper = False

    def ready(self) -> bool:
        return not self._stopping and self.registrar is not None and self.registrar.registered

    # ---- start-up ---------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        try:
            self.waiting_for_zookeeper = True
            await self.zk.start()
        except Exception as exc:
            await self.zk.stop()
            if isinstance(exc, ZkConnectError):  # already names the address and the reason
                raise StartupError(str(exc)) from None
            raise StartupError(
                f"cannot connect to ZooKeeper at {s.zookeeper_connect}: {exc!r}"
            ) from None
        finally:
            self.waiting_for_zookeeper = False
        self._zk_started = True
        await self.zk.ensure_layout()
        self.cluster_id = await get_or_create_cluster_id(self.zk)
        for d in self.log_dirs:
            self._open_log_dir(d, s.broker_id, self.cluster_id)
        if len(self._failed_at_start) == len(self.log_dirs):
            raise StartupError(
                "every log dir failed: "
                + "; ".join(f"{d}: {why}" for d, why in self._failed_at_start.items())
            )
        await self.broker_config_sync.start()  # dynamic broker configs before the logs open
        self.dynamic.refresh()
        self.rm = ReplicaManager(
            s.broker_id,
            self.log_dirs,
            self.dynamic.topic_defaults(),
            metrics=self.metrics,
            replica_lag_time_max_ms=s.replica_lag_time_max_ms,
        )
        for d, why in self._failed_at_start.items():
            self.rm.log_dirs.mark_offline(d, why)
        self.rm.on_log_dir_failure = self._on_log_dir_failure
        await self._load_logs()
        self.cleaner = self._new_cleaner()
        self.dynamic.attach(self.rm, self.cleaner)
        self.replication = Replication(self.zk, self.rm, s)
        await self._start_grpc()
        self.admin = AdminServer(s.admin_host, s.admin_port, self.ready)
        self.admin.start()
        assert self.advertised is not None
        adv = self.advertised
        self.registrar = BrokerRegistrar(
            self.zk,
            s.broker_id,
            lambda: layout.BrokerRegistration(
                s.broker_id,
                adv.host,
                adv.port,
                s.broker_rack,
                static_configs=self.dynamic.static_configs(),
            ),
            s.zookeeper_session_timeout_ms,
        )
        self.waiting_for_zookeeper = True
        try:
            await self.registrar.register()
        finally:
            self.waiting_for_zookeeper = False
        self._start_background_tasks()
        log.info(
            "storage node started",
            broker_id=s.broker_id,
            open_file_limit=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            cluster_id=self.cluster_id,
            grpc=f"{adv.host}:{adv.port}",
            admin_port=self.admin.port,
            rack=s.broker_rack,
            log_dirs=[str(d) for d in self.log_dirs],
            partitions=len(self.rm.hosted),
        )

    def _open_log_dir(self, d: Path, broker_id: int, cluster_id: str) -> None:
        """Create, lock and check one log dir; one that fails with an I/O error is offline
        (Kafka starts with the others), a dir of another broker or cluster refuses the start."""
        lock = LogDirLock(d)
        try:
            d.mkdir(parents=True, exist_ok=True)
            lock.acquire()
        except OSError as exc:
            log.error("log dir failed at start-up: offline", log_dir=str(d), error=repr(exc))
            self._failed_at_start[d] = f"cannot open the log dir: {exc}"
            return
        self._locks.append(lock)
        try:
            check_meta_properties(d, broker_id, cluster_id)
        except OSError as exc:
            log.error("log dir failed at start-up: offline", log_dir=str(d), error=repr(exc))
            self._failed_at_start[d] = f"cannot read or write meta.properties: {exc}"

    async def _load_logs(self) -> None:
        assert self.rm is not None
        online = self.rm.log_dirs.online
        clean_dirs = {d for d in online if (d / ckpt.CLEAN_SHUTDOWN_FILE).exists()}
        topics = sorted({t for t, _ in self.rm.scan_log_dir()})
        overrides: dict[str, dict[str, str]] = {}
        for topic in topics:
            found = await self.zk.get_or_none(layout.topic_config_path(topic))
            overrides[topic] = layout.parse_topic_config(found[0] if found else None)
        started = time.monotonic()
        count = await self.rm.load_logs(
            overrides, clean_shutdown=clean_dirs == set(online), clean_dirs=clean_dirs
        )
        for d in self.rm.log_dirs.online:
            ckpt.take_clean_shutdown_marker(d)
        log.info(
            "logs loaded",
            count=count,
            clean_shutdown=sorted(map(str, clean_dirs)),
            log_dirs=[str(d) for d in self.rm.log_dirs.online],
            offline_log_dirs=sorted(map(str, self.rm.log_dirs.offline)),
            ms=round((time.monotonic() - started) * 1000, 1),
        )

    # ---- log dir failures -------------------------------------------------------------------
    def _on_log_dir_failure(self, log_dir: Path, reason: str) -> None:
        """Tell the controller (Kafka's LogDirFailureChannel -> ZooKeeper notification); with
        no log dir left the node halts, as Kafka does."""
        assert self.rm is not None
        if not self.rm.log_dirs.online:
            log.critical(
                f"Shutdown broker because all log dirs in {', '.join(map(str, self.log_dirs))} "
                "have failed",
                reason=reason,
            )
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        self._tasks.append(
            asyncio.create_task(self._notify_log_dir_event(log_dir), name="log-dir-event")
        )

    async def _notify_log_dir_event(self, log_dir: Path) -> None:
        body = layout.dumps({"version": 1, "broker": self.settings.broker_id, "event": 1})
        while not self._stop_tasks.is_set():
            try:
                await self.zk.create(LOG_DIR_EVENT_PREFIX, body, sequence=True)
                log.info("log dir failure reported to the controller", log_dir=str(log_dir))
                return
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: try again
                log.warning("cannot report the log dir failure yet", error=repr(exc))
                try:
                    await asyncio.wait_for(self._stop_tasks.wait(), 1.0)
                except TimeoutError:
                    pass

    def _new_cleaner(self) -> LogCleaner | None:
        s, rm = self.settings, self.rm
        assert rm is not None
        if not s.log_cleaner_enable:
            log.info("log cleaner disabled: compacted topics are not compacted")
            return None
        cleaner = LogCleaner(
            rm.log_dirs.online[0],  # one cleaner-offset-checkpoint for all dirs (Kafka: per dir)
            rm.logs,
            self.dynamic.cleaner_settings(),
            rm.metrics,
            rm.clock,
            rm.mark_changed,
            lambda: rm.changes.take(CLEANER),
        )
        cleaner.load_checkpoint()
        return cleaner

    async def _start_grpc(self) -> None:
        assert self.rm is not None
        listener = self.settings.listener
        server, health = new_grpc_server()
        self.storage_service = add_storage_service(server, self.rm)
        try:
            port = add_port(server, listener.bind_target)
        except RuntimeError as exc:
            raise StartupError(f"cannot bind gRPC listener {listener.bind_target}: {exc}") from None
        if port == 0:
            raise StartupError(f"cannot bind gRPC listener {listener.bind_target}")
        await server.start()
        await set_serving(health, True)
        self.grpc_server, self._health, self.bound_port = server, health, port
        self.advertised = self.settings.advertised(port)

    # ---- background tasks -------------------------------------------------------------------
    def _start_background_tasks(self) -> None:
        assert self.rm is not None
        s, rm = self.settings, self.rm
        jobs: list[tuple[str, int | Callable[[], int], int, Callable[[], Awaitable[None]]]] = [
            (
                "retention",
                s.log_retention_check_interval_ms,
                min(INITIAL_TASK_DELAY_MS, s.log_retention_check_interval_ms),
                rm.run_retention,
            ),
            # Also flushes rolled segments (Kafka schedules that at each roll) and logs left
            # unflushed for log.recovery.flush.interval.ms, hence the cap.
            (
                "flush",
                min(s.log_flush_scheduler_interval_ms, ROLL_FLUSH_CHECK_MS),
                min(s.log_flush_scheduler_interval_ms, ROLL_FLUSH_CHECK_MS),
                lambda: rm.run_flush(s.log_recovery_flush_interval_ms),
            ),
            (
                "recovery-point-checkpoint",
                s.log_flush_offset_checkpoint_interval_ms,
                min(INITIAL_TASK_DELAY_MS, s.log_flush_offset_checkpoint_interval_ms),
                rm.checkpoint_recovery_points,
            ),
            (
                "log-start-offset-checkpoint",
                s.log_flush_start_offset_checkpoint_interval_ms,
                min(INITIAL_TASK_DELAY_MS, s.log_flush_start_offset_checkpoint_interval_ms),
                rm.checkpoint_log_start_offsets,
            ),
            (
                "high-watermark-checkpoint",
                s.replica_high_watermark_checkpoint_interval_ms,
                s.replica_high_watermark_checkpoint_interval_ms,
                rm.checkpoint_high_watermarks,
            ),
        ]
        if self.cleaner is not None:
            jobs.append(
                (
                    "log-cleaner",
                    lambda: self.dynamic.cleaner_backoff_ms,  # dynamic broker config
                    s.log_cleaner_backoff_ms,
                    self._run_cleaner,
                )
            )
        usage = UsageReporter(
            self.zk,
            s.broker_id,
            rm,
            capacity_of(s.kafkapy_storage_capacity_bytes, self.log_dirs),
            lambda: counter_total(self.metrics.bytes_in if self.metrics else None),
        )
        jobs.append(("usage-report", s.kafkapy_usage_report_interval_ms, 0, usage.report))
        if self.replication is not None:
            isr_check_ms = max(1, s.replica_lag_time_max_ms // 2)
            jobs.append(
                ("isr-expiration", isr_check_ms, isr_check_ms, self.replication.shrink_isrs)
            )
        for name, period_ms, delay_ms, job in jobs:
            if isinstance(period_ms, int) and period_ms >= NEVER_MS:
                log.info("background task disabled", task=name)
                continue
            self._tasks.append(
                asyncio.create_task(self._periodic(name, period_ms, delay_ms, job), name=name)
            )

    async def _run_cleaner(self) -> None:
        if self.cleaner is not None:
            await self.cleaner.run_pass()

    async def _periodic(
        self,
        name: str,
        period_ms: int | Callable[[], int],
        delay_ms: int,
        job: Callable[[], Awaitable[None]],
    ) -> None:
        """Run ``job`` every ``period_ms`` (read again after each run when it is a callable:
        a dynamic config); stops (after the current run) when asked."""
        wait_s = delay_ms / 1000.0
        while True:
            try:
                await asyncio.wait_for(self._stop_tasks.wait(), wait_s)
                return
            except TimeoutError:
                pass
            try:
                await job()
            except ZK_UNAVAILABLE as exc:  # ZooKeeper away: the next run tries again
                log.warning(
                    "background task skipped: ZooKeeper unavailable", task=name, error=repr(exc)
                )
            except Exception:
                log.exception("background task failed", task=name)
            wait_s = (period_ms() if callable(period_ms) else period_ms) / 1000.0

    # ---- shutdown ---------------------------------------------------------------------------
    async def _controlled_shutdown(self) -> None:
        """Kafka's controlled shutdown, while this node still serves (it keeps answering
        followers and in-flight requests until it deregisters)."""
        s, registrar = self.settings, self.registrar
        if not s.controlled_shutdown_enable:
            log.info("controlled shutdown disabled (controlled.shutdown.enable=false)")
            return
        if not any(len(p.replicas) > 1 for p in (self.rm.partitions() if self.rm else ())):
            log.info("controlled shutdown: no replicated partition here, nothing to move")
            return
        assert registrar is not None
        await ControlledShutdown(
            self.zk,
            s.broker_id,
            lambda: registrar.czxid,
            ShutdownSettings(
                s.controlled_shutdown_max_retries,
                s.controlled_shutdown_retry_backoff_ms,
                s.controller_socket_timeout_ms,
            ),
        ).run()

    def _leader_count(self) -> int:
        """Partitions this node leads now (logged as it deregisters: after a controlled
        shutdown, only those no other in-sync replica could take)."""
        if self.rm is None:
            return 0
        return sum(1 for p in self.rm.partitions() if p.is_leader)

    async def stop(self) -> bool:
        """Graceful stop. Returns True when every log was closed cleanly (marker written)."""
        self._stopping = True
        log.info("storage node shutting down")
        if self.registrar is not None and self.registrar.registered:
            await self._controlled_shutdown()
        if self._health is not None:
            await set_serving(self._health, False)
        if self.registrar is not None:
            log.info("deregistering", leaders=self._leader_count())
            await self.registrar.deregister()
        if self.grpc_server is not None:
            if self.storage_service is not None:  # Exchange streams never end by themselves
                self.storage_service.exchanges.close()
            await self.grpc_server.stop(self.settings.shutdown_grace_ms / 1000.0)
        self._stop_tasks.set()
        self.broker_config_sync.stop()
        if self.cleaner is not None:
            self.cleaner.stop()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.replication is not None:
            try:
                await self.replication.close()
            except Exception:
                log.exception("failed to stop replication")
        clean = False
        if self.rm is not None:
            clean = await self.rm.close()
            if clean:
                for d in self.rm.log_dirs.online:
                    await asyncio.to_thread(ckpt.mark_clean_shutdown, d)
        if self.admin is not None:
            await self.admin.stop()
        if self._zk_started:
            await self.zk.stop()
        for lock in self._locks:
            lock.release()
        log.info("storage node stopped", clean=clean)
        return clean


async def run_node(
    settings: StorageSettingsBase, stop: asyncio.Event, metrics: StorageMetrics | None = None
) -> int:
    """Start a node, serve until ``stop`` is set, stop it. Returns the process exit code.

    A failed start cleans up what was started and re-raises.
    """
    node = StorageNode(settings, metrics)
    starting = asyncio.ensure_future(node.start())
    try:
        while not starting.done():
            await asyncio.wait({starting}, timeout=START_POLL_S)
            if stop.is_set() and node.waiting_for_zookeeper and not starting.done():
                starting.cancel()  # nothing on disk is in flight: give the start up
        starting.result()
    except BaseException:
        if not starting.done():  # run_node itself was cancelled
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
        await node.stop()
        if starting.cancelled() and stop.is_set():
            return 0
        raise
    freeze_startup_heap()
    await stop.wait()
    await node.stop()
    return 0
