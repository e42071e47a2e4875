"""A whole kafka-py cluster as local processes: ZooKeeper, controllers, storage nodes, group
coordinators, gateways.

Used by ``kafka-py cluster up``, the integration and e2e tests and the benchmarks. Each service
runs as ``python -m services.<role>`` in its own process group with its output in
``<data_dir>/logs/<service>-<index>.log`` (``storage-0.log``, ``group-coordinator-1.log``). Ids
are stable (the process with index i has node id i; storage i keeps its log in
``<data_dir>/storage-i``) and the ports chosen for a data dir are saved in
``<data_dir>/cluster.json``, so starting again on the same data dir brings the same cluster back.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import services
from services.cli.probes import http_ready, kafka_answers, port_free
from services.common.zk.server import ZooKeeperError, ZooKeeperProcess, free_port

ROLES = ("controller", "storage", "group_coordinator", "gateway")
ZOOKEEPER = "zookeeper"
STATE_FILE = "cluster.json"
PIDS_FILE = "pids.json"
LOCK_FILE = ".lock"
STATE_VERSION = 1
_POLL_S = 0.05
_PROJECT_ROOT = Path(services.__file__).resolve().parent.parent


class LocalClusterError(RuntimeError):
    """Start-up or control failure. ``process`` names the process; ``log_tail`` ends its log."""

    def __init__(
        self,
        message: str,
        *,
        process: str | None = None,
        log_path: Path | None = None,
        log_tail: Sequence[str] = (),
    ) -> None:
        self.summary = message
        self.process = process
        self.log_path = log_path
        self.log_tail = list(log_tail)
        text = message
        if log_path is not None:
            text += f" (log: {log_path})"
        if self.log_tail:
            text += "\n" + "\n".join("    " + line for line in self.log_tail)
        super().__init__(text)

    def one_line(self) -> str:
        """The summary plus the last log line, for a single-line CLI error."""
        text = self.summary
        if self.log_path is not None:
            text += f" (log: {self.log_path})"
        if self.log_tail:
            text += f": {self.log_tail[-1].strip()}"
        return text


class LocalClusterInterrupted(LocalClusterError):
    """``interrupt()`` was called while the cluster was starting."""


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


@dataclass(slots=True)
class _Service:
    role: str
    index: int
    port: int
    admin_port: int
    zone: str | None
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass(slots=True)
class _PortBook:
    """Ports saved in cluster.json: role -> index -> {"port", "admin_port"}."""

    zookeeper: int | None = None
    roles: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> _PortBook:
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls()
        if not isinstance(raw, dict) or raw.get("version") != STATE_VERSION:
            return cls()
        roles = {r: {str(i): dict(v) for i, v in raw.get(r, {}).items()} for r in ROLES}
        zk = raw.get(ZOOKEEPER, {}).get("port")
        return cls(int(zk) if zk else None, roles)

    def get(self, role: str, index: int) -> dict[str, int]:
        return self.roles.get(role, {}).get(str(index), {})


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
        zones: Sequence[str] = ("zone-a", "zone-b", "zone-c"),
        gateway_port: int = 9092,
        zk_port: int = 2181,
        host: str = "127.0.0.1",
        zk_session_timeout_ms: int = 3000,
        extra: Mapping[str, Sequence[str]] | None = None,
        env: Mapping[str, str] | None = None,
        log_dirs_per_node: int = 1,
    ) -> None:
        if gateways < 1 or storage_nodes < 1 or controllers < 1:
            raise ValueError("a cluster needs at least one gateway, storage node and controller")
        if group_coordinators < 0:
            raise ValueError("group_coordinators must be >= 0")
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
        self._counts = {
            "controller": controllers,
            "storage": storage_nodes,
            "group_coordinator": group_coordinators,
            "gateway": gateways,
        }
        self._requested = {"gateway": gateway_port, ZOOKEEPER: zk_port}
        self._services: dict[str, list[_Service]] = {role: [] for role in ROLES}
        self._zk: ZooKeeperProcess | None = None
        self._lock_fd: IO[str] | None = None
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
        """Start ZooKeeper, then launch controllers, storage nodes, group coordinators and
        gateways (in that order) and wait until every one is ready; on failure everything
        started is stopped again."""
        if self._started:
            raise LocalClusterError("the cluster is already started")
        if self._interrupted:  # interrupt() came before start(): honour it
            self._interrupted = False
            raise LocalClusterInterrupted("start-up interrupted")
        deadline = time.monotonic() + timeout
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(exist_ok=True)
        self._take_lock()
        self._started = True
        atexit.register(self.stop)
        try:
            self._reap_leftovers()
            self._layout()
            self._start_zookeeper(deadline)
            # Launched in dependency order, but without waiting between tiers: every service
            # only needs ZooKeeper to come up, and their start-ups overlap.
            for svc in self._all():
                self._spawn(svc)
            self._wait_ready(list(self._all()), deadline, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every process in reverse start order (ZooKeeper last), SIGKILL after ``timeout``.

        Idempotent; no process of the cluster is left when it returns.
        """
        for role in reversed(ROLES):
            for svc in reversed(self._services[role]):
                if svc.proc is not None:
                    self._terminate(svc.proc, timeout)
        if self._zk is not None and self._zk.proc is not None:
            self._terminate(self._zk.proc, timeout)
        self._release_lock()
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
            raise LocalClusterError(f"{_name(role, index)} is not running")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait()

    def wait_exit(self, role: str, index: int = 0, timeout: float = 10.0) -> int:
        """Wait for one process to exit; returns its exit code (negative = killed by signal)."""
        proc = self._proc(role, index)
        if proc is None:
            raise LocalClusterError(f"{_name(role, index)} was never started")
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise LocalClusterError(
                f"{_name(role, index)} did not exit within {timeout:g}s"
            ) from None

    def start_process(
        self, role: str, index: int = 0, *, timeout: float = 60.0, wait: bool = True
    ) -> None:
        """(Re)start one process with its id, ports and data dir; by default wait until ready."""
        if not self._started:
            raise LocalClusterError("the cluster has not been started")
        proc = self._proc(role, index)
        if proc is not None and proc.poll() is None:
            raise LocalClusterError(f"{_name(role, index)} is already running")
        deadline = time.monotonic() + timeout
        if role == ZOOKEEPER:
            self._start_zookeeper(deadline)
            return
        svc = self._service(role, index)
        self._spawn(svc)
        if wait:
            self._wait_ready([svc], deadline, timeout)

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

    def active_controller_id(self, timeout: float = 5.0) -> int | None:
        """``brokerid`` in ZooKeeper's ``/controller``, or None when no controller is active."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        zk = KazooClient(hosts=self.zk_connect, timeout=timeout)
        zk.start(timeout)
        try:
            data, _ = zk.get("/controller")
        except NoNodeError:
            return None
        finally:
            zk.stop()
            zk.close()
        return int(json.loads(data)["brokerid"])

    def active_controller_index(self, timeout: float = 5.0) -> int | None:
        """Index of the active controller (controller i has controller.id i), or None."""
        cid = self.active_controller_id(timeout)
        if cid is None or not 0 <= cid < len(self._services["controller"]):
            return None
        return cid

    # ---- internals: layout and ports ---------------------------------------------------
    def _layout(self) -> None:
        """Assign ports (saved ones first) and build the process table; save cluster.json."""
        book = _PortBook.load(self.data_dir / STATE_FILE)
        used: set[int] = set()

        def pick(requested: int, saved: int | None, what: str) -> int:
            if requested > 0:
                if requested in used or not port_free(self.host, requested):
                    raise LocalClusterError(
                        f"port {requested} on {self.host} is already in use ({what})"
                    )
                used.add(requested)
                return requested
            if saved and saved not in used and port_free(self.host, saved):
                used.add(saved)
                return saved
            while (port := free_port(self.host)) in used:
                pass
            used.add(port)
            return port

        # Fixed ports first, so a saved free-port choice can never take one of them.
        fixed: dict[str, int] = {}
        if self._requested[ZOOKEEPER] > 0:
            fixed[ZOOKEEPER] = pick(self._requested[ZOOKEEPER], None, ZOOKEEPER)
        if self._requested["gateway"] > 0:
            for i in range(self._counts["gateway"]):
                fixed[f"gateway-{i}"] = pick(self._requested["gateway"] + i, None, f"gateway-{i}")
        zk_port = fixed.get(ZOOKEEPER) or pick(0, book.zookeeper, ZOOKEEPER)
        self._zk = ZooKeeperProcess(self.data_dir / ZOOKEEPER, port=zk_port, host=self.host)
        for role in ROLES:
            self._services[role] = []
            for i in range(self._counts[role]):
                saved = book.get(role, i)
                port = fixed.get(f"{role}-{i}") or pick(0, saved.get("port"), f"{role}-{i}")
                admin = pick(0, saved.get("admin_port"), f"{role}-{i} admin")
                zone = self.zones[i % len(self.zones)] if role != "controller" else None
                log_path = self.logs_dir / f"{_log_name(role)}-{i}.log"
                self._services[role].append(_Service(role, i, port, admin, zone, log_path))
        self._save_state(book)

    def _save_state(self, book: _PortBook) -> None:
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "host": self.host,
            ZOOKEEPER: {"port": self.zookeeper.port},
        }
        for role in ROLES:
            ports = dict(book.roles.get(role, {}))  # keep ports of nodes not started this time
            ports.update(
                {
                    str(s.index): {"port": s.port, "admin_port": s.admin_port}
                    for s in self._services[role]
                }
            )
            state[role] = ports
        tmp = self.data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.data_dir / STATE_FILE)

    def _require_layout(self) -> None:
        if not any(self._services.values()):
            raise LocalClusterError("the cluster has not been started")

    def _all(self) -> Iterator[_Service]:
        for role in ROLES:
            yield from self._services[role]

    def _service(self, role: str, index: int) -> _Service:
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

    # ---- internals: processes ---------------------------------------------------------
    def _flags(self, svc: _Service) -> list[str]:
        listen = f"{self.host}:{svc.port}"
        # Every service gets the same (short) session timeout: a restarted process waits that
        # long for the node of its killed predecessor to expire.
        common = [
            "--zookeeper.connect", self.zk_connect,
            "--zookeeper.session.timeout.ms", str(self.zk_session_timeout_ms),
            "--admin.host", self.host,
            "--admin.port", str(svc.admin_port),
        ]  # fmt: skip
        if svc.role == "controller":
            # __consumer_offsets wants 3 replicas (Kafka's default); a smaller cluster gets what
            # it can host, as Kafka's own test clusters configure it.
            offsets_rf = min(3, self._counts["storage"])
            flags = [
                "--controller.id", str(svc.index), "--listeners", listen, *common,
                "--offsets.topic.replication.factor", str(offsets_rf),
            ]  # fmt: skip
        elif svc.role == "storage":
            flags = [
                "--broker.id", str(svc.index), "--listeners", listen,
                "--log.dirs", ",".join(str(d) for d in self.storage_dirs(svc.index)),
                "--broker.rack", str(svc.zone), *common,
            ]  # fmt: skip
        else:  # group coordinators and gateways
            flags = [
                "--node.id", str(svc.index), "--listeners", listen, "--broker.rack", str(svc.zone),
                *common,
            ]  # fmt: skip
        return flags + self.extra[svc.role]

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(_PROJECT_ROOT) + (os.pathsep + path if path else "")
        env.update(self.env)
        return env

    def _spawn(self, svc: _Service) -> None:
        if svc.role == "storage":
            self.storage_dir(svc.index).mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", f"{self.SERVICE_PACKAGE}.{svc.role}", *self._flags(svc)]
        with open(svc.log_path, "ab") as log:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            log.write(f"---- {stamp} kafka-py local cluster: {' '.join(argv)}\n".encode())
            log.flush()
            svc.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                env=self._child_env(),
                start_new_session=True,
            )
        svc.starts += 1
        self._save_pids()

    def _start_zookeeper(self, deadline: float) -> None:
        zk = self.zookeeper
        try:
            try:
                zk.start(timeout=max(1.0, deadline - time.monotonic()))
            finally:
                self._save_pids()
        except ZooKeeperError as exc:
            raise LocalClusterError(
                f"zookeeper: {exc}",
                process=ZOOKEEPER,
                log_path=self.log_path(ZOOKEEPER),
                log_tail=_tail(self.log_path(ZOOKEEPER)),
            ) from None

    def _ready(self, svc: _Service) -> bool:
        if not http_ready(self.host, svc.admin_port, "/readyz", timeout=1.0):
            return False
        return svc.role != "gateway" or kafka_answers(self.host, svc.port, timeout=1.0)

    def _wait_ready(self, batch: Sequence[_Service], deadline: float, timeout: float) -> None:
        waiting = list(batch)
        while waiting:
            for svc in list(waiting):
                assert svc.proc is not None
                if svc.proc.poll() is not None:
                    raise LocalClusterError(
                        f"{svc.name} exited with code {svc.proc.returncode} during start-up",
                        process=svc.name,
                        log_path=svc.log_path,
                        log_tail=_tail(svc.log_path),
                    )
                if self._ready(svc):
                    waiting.remove(svc)
            if not waiting:
                return
            if self._interrupted:
                raise LocalClusterInterrupted("start-up interrupted")
            if time.monotonic() > deadline:
                svc = waiting[0]
                names = ", ".join(s.name for s in waiting)
                raise LocalClusterError(
                    f"{names} not ready within {timeout:g}s",
                    process=svc.name,
                    log_path=svc.log_path,
                    log_tail=_tail(svc.log_path),
                )
            time.sleep(_POLL_S * 2)

    def _terminate(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        """SIGTERM (and SIGCONT, in case it is stopped) the group, then SIGKILL; reap."""
        pgid = proc.pid
        if proc.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGCONT):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, sig)
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline and not self._hurry:
                time.sleep(_POLL_S)
        # Whatever is left of the group (the leader or children it spawned) goes now.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        proc.wait()

    # ---- internals: leftovers of a supervisor that died -------------------------------
    def _save_pids(self) -> None:
        pids = {p.name: p.pid for p in self.processes() if p.pid is not None}
        tmp = self.data_dir / (PIDS_FILE + ".tmp")
        tmp.write_text(json.dumps(pids, sort_keys=True) + "\n")
        tmp.replace(self.data_dir / PIDS_FILE)

    def _reap_leftovers(self) -> None:
        """SIGKILL processes a previous supervisor of this data dir started and left running
        (it was killed itself). Only a process group leader whose working directory is the
        data dir, or whose command line names it, is taken for ours."""
        try:
            pids = json.loads((self.data_dir / PIDS_FILE).read_text())
        except (OSError, ValueError):
            return
        for pid in pids.values() if isinstance(pids, dict) else ():
            if isinstance(pid, int) and _is_ours(pid, self.data_dir):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                _wait_gone(pid, 5.0)

    # ---- internals: data-dir lock -----------------------------------------------------
    def _take_lock(self) -> None:
        fd = open(self.data_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fd.seek(0)
            owner = fd.read().strip() or "another process"
            fd.close()
            raise LocalClusterError(
                f"{self.data_dir} is in use by another kafka-py cluster (pid {owner})"
            ) from None
        fd.seek(0)
        fd.truncate()
        fd.write(str(os.getpid()))
        fd.flush()
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                self._lock_fd.truncate(0)
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            self._lock_fd.close()
            self._lock_fd = None


def _log_name(role: str) -> str:
    """The service's name in its log file's name (``group-coordinator-0.log``)."""
    return role.replace("_", "-")


def _name(role: str, index: int) -> str:
    return ZOOKEEPER if role == ZOOKEEPER else f"{role}-{index}"


def _is_ours(pid: int, data_dir: Path) -> bool:
    """A live process group leader that runs in ``data_dir`` or names it on its command line."""
    try:
        if os.getpgid(pid) != pid:
            return False
        cwd = os.readlink(f"/proc/{pid}/cwd")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    target = str(data_dir)
    inside = target.rstrip("/") + "/"
    return cwd == target or any(
        a == target or a.startswith(inside)
        for a in (arg.decode(errors="replace") for arg in cmdline)
    )


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return  # a zombie holds no ports or files
        except OSError:
            return
        time.sleep(_POLL_S)


def _tail(path: Path, lines: int = 15) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]
