"""LocalCluster: a whole kafka-py cluster as local processes (ZooKeeper, controllers, storage
nodes, group and transaction coordinators, gateways), started, supervised, faulted and stopped from one thread.

Each service runs as ``python -m services.<role>`` in its own process group with its output in
``<data_dir>/logs/<service>-<index>.log`` (``storage-0.log``, ``group-coordinator-1.log``). Ids
are stable (the process with index i has node id i; storage i keeps its log in
``<data_dir>/storage-i``) and the ports chosen for a data dir are saved in
``<data_dir>/cluster.json``, so starting again on the same data dir brings the same cluster back.

This class only sequences; the jobs live beside it: ``layout`` (roles, process slots, ports),
``flags`` (each role's command line), ``processes`` (spawn, terminate, pid file, data-dir lock),
``readiness`` (when a service counts as up), ``zookeeper`` and ``prometheus`` (an optional real
Prometheus scraping every service through file-based discovery kept in step with the processes). Starting or stopping one node by
role and ordinal (``start_process`` / ``kill``) is the seam a node provisioner drives.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from services.cli.local_cluster import processes
from services.cli.local_cluster.errors import LocalClusterError, LocalClusterInterrupted
from services.cli.local_cluster.flags import ClusterShape, service_argv, service_flags
from services.cli.local_cluster.layout import (
    ROLES,
    STATE_FILE,
    ZOOKEEPER,
    PortBook,
    PortPicker,
    Service,
    process_name,
    save_state,
    slot,
)
from services.cli.local_cluster.prometheus import LocalPrometheus, PrometheusOptions
from services.cli.local_cluster.readiness import wait_ready
from services.cli.local_cluster.rebind import REBIND_ATTEMPTS, bind_lost, log_size, repick
from services.cli.local_cluster.security import (
    SecureLayout,
    ZkTlsLayout,
    secure_layout,
    zk_tls_layout,
)
from services.cli.local_cluster.zookeeper import active_controller_id, start_zookeeper, zk_log_path
from services.common.zk.security import NO_SECURITY, ZkSecurity
from services.common.zk.server import ZooKeeperProcess

#: how ``stop()`` goes: the roles of one step stop together, the steps one after the other (a
#: role missing here stops first)
STOP_STEPS = (
    ("gateway", "transaction_coordinator", "group_coordinator"),
    ("storage",),
    ("controller",),
)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A snapshot of one managed process."""

    name: str
    role: str
    index: int
    pid: int | None
    port: int
    admin_port: int | None
    zone: str | None
    log_path: Path
    running: bool


class LocalCluster:
    """Runs and supervises one local cluster. Not thread-safe: drive it from one thread."""

    #: each role runs as ``python -m <SERVICE_PACKAGE>.<role>`` (tests substitute fakes)
    SERVICE_PACKAGE = "services"

    def __init__(
        self,
        data_dir: Path | str,
        *,
        gateways: int = 1,
        storage_nodes: int = 3,
        controllers: int = 2,
        group_coordinators: int = 2,
        transaction_coordinators: int = 1,
        zones: Sequence[str] = ("zone-a", "zone-b", "zone-c"),
        gateway_port: int = 9092,
        zk_port: int = 2181,
        host: str = "127.0.0.1",
        zk_session_timeout_ms: int = 3000,
        extra: Mapping[str, Sequence[str]] | None = None,
        env: Mapping[str, str] | None = None,
        log_dirs_per_node: int = 1,
        secure: bool = False,
        zookeeper_tls: bool = False,
        prometheus: PrometheusOptions | None = None,
    ) -> None:
        if gateways < 1 or storage_nodes < 1 or controllers < 1:
            raise ValueError("a cluster needs at least one gateway, storage node and controller")
        if group_coordinators < 0 or transaction_coordinators < 0:
            raise ValueError("group_coordinators and transaction_coordinators must be >= 0")
        if not zones:
            raise ValueError("zones must not be empty")
        unknown = set(extra or {}) - set(ROLES)
        if unknown:
            raise ValueError(f"extra flags for unknown role(s): {', '.join(sorted(unknown))}")
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.zones = tuple(zones)
        self.zk_session_timeout_ms = zk_session_timeout_ms
        if log_dirs_per_node < 1:
            raise ValueError("log_dirs_per_node must be >= 1")
        self.log_dirs_per_node = log_dirs_per_node
        self.extra = {role: list((extra or {}).get(role, ())) for role in ROLES}
        self.env = dict(env or {})
        #: internal mTLS + ZooKeeper ACLs (security.py); made at start()
        self.secure = secure
        self.security: SecureLayout | None = None
        #: ZooKeeper on a TLS-only port, clients with certificates (security.py); made at start()
        self.zookeeper_tls = zookeeper_tls
        self.zk_tls: ZkTlsLayout | None = None
        self._counts = {
            "controller": controllers,
            "storage": storage_nodes,
            "group_coordinator": group_coordinators,
            "transaction_coordinator": transaction_coordinators,
            "gateway": gateways,
        }
        self._requested = {"gateway": gateway_port, ZOOKEEPER: zk_port}
        self._services: dict[str, list[Service]] = {role: [] for role in ROLES}
        self._zk: ZooKeeperProcess | None = None
        self._prometheus = LocalPrometheus(self.data_dir, host, prometheus) if prometheus else None
        self._lock = processes.DataDirLock(self.data_dir)
        self._interrupted = False
        self._hurry = False
        self._started = False

    # ---- addresses --------------------------------------------------------------------
    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def started(self) -> bool:
        return self._started

    @property
    def zookeeper(self) -> ZooKeeperProcess:
        if self._zk is None:
            raise LocalClusterError("the cluster has not been started")
        return self._zk

    @property
    def zk_connect(self) -> str:
        return self.zookeeper.connect

    @property
    def zk_security(self) -> ZkSecurity:
        """What a ZooKeeper client of this cluster connects with: digest credentials (secure
        clusters), TLS (``zookeeper_tls``)."""
        security = self.security.zk_security if self.security is not None else NO_SECURITY
        if self.zk_tls is not None:
            security = dataclasses.replace(security, tls=self.zk_tls.client)
        return security

    @property
    def gateway_ports(self) -> list[int]:
        self._require_layout()
        return [s.port for s in self._services["gateway"]]

    @property
    def bootstrap(self) -> str:
        """Kafka bootstrap servers, e.g. ``"127.0.0.1:9092"`` (comma-separated with several gateways)."""
        return ",".join(f"{self.host}:{p}" for p in self.gateway_ports)

    def log_path(self, role: str, index: int = 0) -> Path:
        if role == ZOOKEEPER:
            return self.data_dir / ZOOKEEPER / "zookeeper.out"
        return self._service(role, index).log_path

    def storage_dir(self, index: int) -> Path:
        return self.data_dir / f"storage-{index}"

    def storage_dirs(self, index: int) -> list[Path]:
        """The ``log.dirs`` of one storage node: ``storage-<i>``, then ``storage-<i>-<j>``."""
        extra = [self.data_dir / f"storage-{index}-{j}" for j in range(1, self.log_dirs_per_node)]
        return [self.storage_dir(index), *extra]

    # ---- lifecycle --------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> Self:
        """Start ZooKeeper, then launch controllers, storage nodes, group and transaction
        coordinators and gateways (in that order) and wait until every one is ready; on failure everything
        started is stopped again. A process that finds one of its ports taken by another program
        (between choosing and binding it) is started again on new free ports (``rebind``), so
        ``bootstrap`` and ``cluster.json`` are read after ``start()`` returns."""
        if self._started:
            raise LocalClusterError("the cluster is already started")
        if self._interrupted:  # interrupt() came before start(): honour it
            self._interrupted = False
            raise LocalClusterInterrupted("start-up interrupted")
        deadline = time.monotonic() + timeout
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        self._lock.take()
        self._started = True
        atexit.register(self.stop)
        try:
            processes.reap_leftovers(self.data_dir)
            if self.secure:
                self.security = secure_layout(self.data_dir)
            if self.zookeeper_tls:
                self.zk_tls = zk_tls_layout(self.data_dir, self.host)
            self._layout()
            self._start_zookeeper_rebinding(deadline)
            # Launched in dependency order, but without waiting between tiers: every service
            # only needs ZooKeeper to come up, and their start-ups overlap.
            for svc in self._all():
                self._spawn(svc)
            self._wait_ready_rebinding(list(self._all()), deadline, timeout)
            if self._prometheus is not None:
                self._prometheus.start(self.processes(), processes.child_env(self.env), deadline)
                self._save_pids()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every process in reverse start order (ZooKeeper last), SIGKILL after ``timeout``.

        Stopped in steps, each waited for before the next: gateways and coordinators together,
        then the storage nodes one at a time (each one's controlled shutdown moves leadership to
        nodes still running), then the controllers together, then ZooKeeper. Idempotent; no
        process of the cluster is left when it returns.
        """
        if self._prometheus is not None:
            self._prometheus.stop(timeout)
        unplanned = tuple(r for r in reversed(ROLES) if not any(r in step for step in STOP_STEPS))
        for step in (unplanned, *STOP_STEPS):
            procs = [
                svc.proc
                for role in step
                for svc in reversed(self._services[role])
                if svc.proc is not None
            ]
            if step == ("storage",):
                for proc in procs:
                    self._terminate(proc, timeout)
            else:
                processes.terminate_all(procs, timeout, lambda: self._hurry)
        if self._zk is not None and self._zk.proc is not None:
            self._terminate(self._zk.proc, timeout)
        self._lock.release()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        self._started = False
        self._interrupted = self._hurry = False

    def interrupt(self) -> None:
        """Make a running (or the next) ``start()`` or ``start_process()`` give up; ``stop()``
        clears it. Safe to call from a signal handler."""
        self._interrupted = True

    def hurry(self) -> None:
        """Make a running ``stop()`` SIGKILL what is left now (safe from a signal handler)."""
        self._hurry = True

    def __enter__(self) -> Self:
        if not self._started:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- fault injection and supervision ----------------------------------------------
    def kill(self, role: str, index: int = 0, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the process group of one process; SIGKILL also reaps it."""
        proc = self._proc(role, index)
        if proc is None or proc.poll() is not None:
            raise LocalClusterError(f"{process_name(role, index)} is not running")
        processes.signal_group(proc, sig)
        self.sync_monitoring()

    def wait_exit(self, role: str, index: int = 0, timeout: float = 10.0) -> int:
        """Wait for one process to exit; returns its exit code (negative = killed by signal)."""
        proc = self._proc(role, index)
        if proc is None:
            raise LocalClusterError(f"{process_name(role, index)} was never started")
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise LocalClusterError(
                f"{process_name(role, index)} did not exit within {timeout:g}s"
            ) from None

    def start_process(
        self,
        role: str,
        index: int = 0,
        *,
        timeout: float = 60.0,
        wait: bool = True,
        flags: Sequence[str] = (),
    ) -> None:
        """(Re)start one process with its id, ports and data dir; by default wait until ready.
        ``flags`` are added for this start only, last (they win: a misconfigured restart).
        When it does not get ready (it exits, the timeout passes, ``interrupt()``), it is
        stopped again before the error is raised: a failed start leaves nothing running."""
        if not self._started:
            raise LocalClusterError("the cluster has not been started")
        proc = self._proc(role, index)
        if proc is not None and proc.poll() is None:
            raise LocalClusterError(f"{process_name(role, index)} is already running")
        deadline = time.monotonic() + timeout
        if role == ZOOKEEPER:
            self._start_zookeeper(deadline)
            return
        svc = self._service(role, index)
        self._spawn(svc, flags)
        if wait:
            try:
                self._wait_ready([svc], deadline, timeout)
            except BaseException:
                assert svc.proc is not None
                self._terminate(svc.proc, 10.0)
                self._save_pids()
                raise

    def add_storage_slot(self) -> int:
        """One more storage ordinal (ports, the next zone in turn, its own data dir), as a
        StatefulSet scaled up by one; ``start_process("storage", i)`` starts it."""
        self._require_layout()
        book = PortBook.load(self.data_dir / STATE_FILE)
        picker = PortPicker(self.host)
        for svc in self._all():
            picker.reserve(svc.port, svc.admin_port)
        i = len(self._services["storage"])
        self._services["storage"].append(
            slot("storage", i, book=book, picker=picker, zones=self.zones, logs_dir=self.logs_dir)
        )
        self._counts["storage"] = i + 1
        save_state(self.data_dir, self.host, self.zookeeper.port, book, self._all())
        return i

    def retire_process(self, role: str, index: int, timeout: float = 10.0) -> None:
        """Stop one process cleanly (SIGTERM) and leave it down: it is no longer supervised nor
        reported as exited; its data dir stays (a removed StatefulSet pod's PVC)."""
        svc = self._service(role, index)
        if svc.proc is not None:
            self._terminate(svc.proc, timeout)
            svc.proc = None
            self._save_pids()

    def exited(self) -> dict[str, int]:
        """Processes that were started and are not running now: name -> exit code."""
        out: dict[str, int] = {}
        if self._zk is not None and self._zk.proc is not None and self._zk.proc.poll() is not None:
            out[ZOOKEEPER] = self._zk.proc.returncode
        for svc in self._all():
            if svc.proc is not None and svc.proc.poll() is not None:
                out[svc.name] = svc.proc.returncode
        return out

    def pids(self) -> dict[str, int]:
        """Running processes: name (``zookeeper``, ``controller-0``, ``storage-2``...) -> pid."""
        return {p.name: p.pid for p in self.processes() if p.running and p.pid is not None}

    def processes(self) -> list[ProcessInfo]:
        """Every managed process in start order."""
        out: list[ProcessInfo] = []
        if self._zk is not None:
            zp = self._zk.proc
            out.append(
                ProcessInfo(
                    ZOOKEEPER,
                    ZOOKEEPER,
                    0,
                    zp.pid if zp else None,
                    self._zk.port,
                    None,
                    None,
                    self.log_path(ZOOKEEPER),
                    zp is not None and zp.poll() is None,
                )
            )
        for svc in self._all():
            running = svc.running()
            out.append(
                ProcessInfo(
                    svc.name,
                    svc.role,
                    svc.index,
                    svc.proc.pid if svc.proc is not None else None,
                    svc.port,
                    svc.admin_port,
                    svc.zone,
                    svc.log_path,
                    running,
                )
            )
        return out

    def address(self, role: str, index: int = 0) -> str:
        """``host:port`` of a process's main listener (Kafka, gRPC or ZooKeeper client port)."""
        if role == ZOOKEEPER:
            return self.zk_connect
        return f"{self.host}:{self._service(role, index).port}"

    def admin_url(self, role: str, index: int = 0) -> str:
        return f"http://{self.host}:{self._service(role, index).admin_port}"

    @property
    def prometheus_url(self) -> str | None:
        """The cluster's Prometheus (``prometheus=`` given and started), else None."""
        p = self._prometheus
        return p.url if p is not None and p.running() else None

    def sync_monitoring(self) -> None:
        """Bring Prometheus's targets file in step with the running services (called on every
        start and stop the cluster makes; ``cluster up`` also calls it each tick, for crashes)."""
        if self._prometheus is not None and self._started:
            self._prometheus.sync(self.processes())

    def active_controller_id(self, timeout: float = 5.0) -> int | None:
        """``brokerid`` in ZooKeeper's ``/controller``, or None when no controller is active."""
        return active_controller_id(self.zk_connect, timeout, self.zk_security)

    def active_controller_index(self, timeout: float = 5.0) -> int | None:
        """Index of the active controller (controller i has controller.id i), or None."""
        cid = self.active_controller_id(timeout)
        if cid is None or not 0 <= cid < len(self._services["controller"]):
            return None
        return cid

    # ---- internals ---------------------------------------------------------------------
    def _layout(self) -> None:
        """Assign ports (saved ones first) and build the process table; save cluster.json."""
        book = PortBook.load(self.data_dir / STATE_FILE)
        picker = PortPicker(self.host)
        # Fixed ports first, so a saved free-port choice can never take one of them.
        fixed: dict[str, int] = {}
        if self._requested[ZOOKEEPER] > 0:
            fixed[ZOOKEEPER] = picker.pick(self._requested[ZOOKEEPER], None, ZOOKEEPER)
        if self._requested["gateway"] > 0:
            for i in range(self._counts["gateway"]):
                port = self._requested["gateway"] + i
                fixed[f"gateway-{i}"] = picker.pick(port, None, f"gateway-{i}")
        zk_port = fixed.get(ZOOKEEPER) or picker.pick(0, book.zookeeper, ZOOKEEPER)
        self._zk = self._zookeeper_process(zk_port)
        for role in ROLES:
            self._services[role] = [
                slot(
                    role,
                    i,
                    book=book,
                    picker=picker,
                    zones=self.zones,
                    logs_dir=self.logs_dir,
                    fixed_port=fixed.get(f"{role}-{i}"),
                )
                for i in range(self._counts[role])
            ]
        save_state(self.data_dir, self.host, zk_port, book, self._all())

    def _zookeeper_process(self, port: int) -> ZooKeeperProcess:
        tls = self.zk_tls.server if self.zk_tls is not None else None
        return ZooKeeperProcess(self.data_dir / ZOOKEEPER, port=port, host=self.host, tls=tls)

    def _require_layout(self) -> None:
        if not any(self._services.values()):
            raise LocalClusterError("the cluster has not been started")

    def _all(self) -> Iterator[Service]:
        for role in ROLES:
            yield from self._services[role]

    def _service(self, role: str, index: int) -> Service:
        if role not in ROLES:
            raise LocalClusterError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        self._require_layout()
        services_ = self._services[role]
        if not 0 <= index < len(services_):
            raise LocalClusterError(
                f"no {role}-{index}: the cluster has {len(services_)} {role} process(es)"
            )
        return services_[index]

    def _proc(self, role: str, index: int) -> subprocess.Popen[bytes] | None:
        if role == ZOOKEEPER:
            return self.zookeeper.proc
        return self._service(role, index).proc

    def _flags(self, svc: Service, once: Sequence[str] = ()) -> list[str]:
        shape = ClusterShape(
            host=self.host,
            zk_connect=self.zk_connect,
            zk_session_timeout_ms=self.zk_session_timeout_ms,
            storage_nodes=self._counts["storage"],
            storage_dirs=self.storage_dirs,
        )
        secure = self.security.flags(svc.role) if self.security is not None else []
        if self.zk_tls is not None:
            secure += self.zk_tls.flags()
        return service_flags(svc, shape, [*secure, *self.extra[svc.role], *once])

    def _spawn(self, svc: Service, once: Sequence[str] = ()) -> None:
        if svc.role == "storage":
            self.storage_dir(svc.index).mkdir(parents=True, exist_ok=True)
        argv = service_argv(self.SERVICE_PACKAGE, svc.role, self._flags(svc, once))
        env = processes.child_env(self.env)
        svc.log_start = log_size(svc.log_path)
        svc.proc = processes.spawn(argv, svc.log_path, cwd=self.data_dir, env=env)
        svc.starts += 1
        self._save_pids()

    def _start_zookeeper(self, deadline: float) -> None:
        try:
            start_zookeeper(self.zookeeper, deadline)
        finally:
            self._save_pids()

    def _start_zookeeper_rebinding(self, deadline: float) -> None:
        """Start ZooKeeper; when its port was taken since it was chosen, on a new free port
        (not when the user asked for that port)."""
        for attempt in itertools.count():
            log = zk_log_path(self.zookeeper)
            since = log_size(log)
            try:
                self._start_zookeeper(deadline)
                return
            except LocalClusterError:
                if attempt >= REBIND_ATTEMPTS or not bind_lost(log, since):
                    raise
                fixed = {"port"} if self._requested[ZOOKEEPER] > 0 else set()
                ports = {"port": self.zookeeper.port}
                port = repick(self.host, ZOOKEEPER, ports, fixed, self._ports_taken())["port"]
                self._zk = self._zookeeper_process(port)
                self._save_state()

    def _wait_ready_rebinding(
        self, batch: Sequence[Service], deadline: float, timeout: float
    ) -> None:
        """``_wait_ready``, starting a process that exited because one of its ports was taken
        again on new free ports (a gateway's requested port is never changed)."""
        for attempt in itertools.count():
            try:
                self._wait_ready(batch, deadline, timeout)
                return
            except LocalClusterInterrupted:
                raise
            except LocalClusterError as exc:
                svc = next((s for s in batch if s.name == exc.process), None)
                if (
                    svc is None
                    or svc.running()
                    or attempt >= REBIND_ATTEMPTS
                    or not bind_lost(svc.log_path, svc.log_start)
                ):
                    raise
                fixed = {"port"} if svc.role == "gateway" and self._requested["gateway"] else set()
                ports = {"port": svc.port, "admin_port": svc.admin_port}
                new = repick(self.host, svc.name, ports, fixed, self._ports_taken())
                svc.port, svc.admin_port = new["port"], new["admin_port"]
                self._save_state()
                self._spawn(svc)

    def _ports_taken(self) -> set[int]:
        taken = {self.zookeeper.port}
        for svc in self._all():
            taken.update((svc.port, svc.admin_port))
        return taken

    def _save_state(self) -> None:
        book = PortBook.load(self.data_dir / STATE_FILE)
        save_state(self.data_dir, self.host, self.zookeeper.port, book, self._all())

    def _wait_ready(self, batch: Sequence[Service], deadline: float, timeout: float) -> None:
        wait_ready(self.host, batch, deadline, timeout, lambda: self._interrupted)

    def _terminate(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        processes.terminate(proc, timeout, lambda: self._hurry)

    def _save_pids(self) -> None:
        pids = {p.name: p.pid for p in self.processes() if p.pid is not None}
        if self._prometheus is not None and self._prometheus.proc is not None:
            pids["prometheus"] = self._prometheus.proc.pid
        processes.save_pids(self.data_dir, pids)
        self.sync_monitoring()
