"""A control channel into a running local cluster, for a second process.

Only the process that runs a local cluster (``kafka-py cluster up``, or a test driving a
``LocalCluster``) can start one of its processes again, with the same flags, ports, data dir and
log file, and without its supervisor taking the planned stop for a crash. Another process (say
``kafka-py cluster restart --rolling storage``) asks it through files in
``<data_dir>/control/``: it writes ``<id>.request.json`` (atomically), the owner picks requests
up on its next tick (``ControlServer.poll``), acts, and writes ``<id>.status.json`` at each step
(``stopping``, ``starting``, then ``done`` or ``failed`` with a reason). Whether anyone serves is
the data dir's lock: the owner holds it for as long as the cluster runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from services.cli.local_cluster import LocalCluster, LocalClusterError, LocalClusterInterrupted
from services.cli.local_cluster.processes import LOCK_FILE
from services.cli.supervisor import split_name

CONTROL_DIR = "control"
POLL_S = 0.1
FINAL = ("done", "failed")


class ControlError(RuntimeError):
    """The request could not be served; the message is one readable line."""


@dataclass(frozen=True, slots=True)
class Status:
    state: str  # stopping, starting, done, failed
    detail: str = ""
    exit_code: int | None = None  # of the stopped process (negative: killed by that signal)
    stop_s: float | None = None  # SIGTERM to exit


def _write_json(path: Path, body: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body, sort_keys=True) + "\n")
    tmp.replace(path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


class ControlServer:
    """Serves restart requests for the cluster it is given; call ``poll()`` on each tick of the
    loop that drives the cluster (it blocks while it restarts a process)."""

    def __init__(self, cluster: LocalCluster, log: Callable[[str], None] = lambda _m: None):
        self.cluster = cluster
        self.log = log
        self.dir = cluster.data_dir / CONTROL_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dir.iterdir():  # of a previous run: nobody waits for them any more
            with contextlib.suppress(OSError):
                stale.unlink()

    def poll(self) -> list[str]:
        """Serve every pending request, oldest first; returns their ids."""
        served: list[str] = []
        for path in sorted(self.dir.glob("*.request.json"), key=_mtime):
            req_id = path.name.removesuffix(".request.json")
            body = _read_json(path)
            with contextlib.suppress(OSError):
                path.unlink()
            if body is None:
                self._status(req_id, Status("failed", "unreadable request"))
            elif body.get("action") != "restart":
                self._status(req_id, Status("failed", f"unknown action {body.get('action')!r}"))
            else:
                self._restart(req_id, str(body.get("process")), float(body.get("stop_timeout", 60)))
            served.append(req_id)
        return served

    def _status(self, req_id: str, status: Status) -> None:
        _write_json(self.dir / f"{req_id}.status.json", asdict(status))

    def _restart(self, req_id: str, name: str, stop_timeout: float) -> None:
        cluster = self.cluster
        try:
            role, index = split_name(name)
            self.log(f"{name}: stopping (SIGTERM) for a restart")
            self._status(req_id, Status("stopping"))
            started = time.monotonic()
            cluster.kill(role, index, signal.SIGTERM)
            detail = ""
            try:
                code = cluster.wait_exit(role, index, timeout=stop_timeout)
            except LocalClusterError:
                cluster.kill(role, index, signal.SIGKILL)
                code = cluster.wait_exit(role, index, timeout=5.0)
                detail = f"did not stop within {stop_timeout:g}s: killed"
            stop_s = round(time.monotonic() - started, 2)
            self._status(req_id, Status("starting", detail, code, stop_s))
            cluster.start_process(role, index, timeout=max(stop_timeout, 60.0))
        except LocalClusterInterrupted:
            self._status(req_id, Status("failed", "the cluster is stopping"))
            raise
        except (LocalClusterError, ValueError) as exc:
            why = exc.one_line() if isinstance(exc, LocalClusterError) else str(exc)
            self._status(req_id, Status("failed", why))
            self.log(f"{name}: restart failed: {why}")
            return
        self._status(req_id, Status("done", detail, code, stop_s))
        self.log(f"{name}: restarted")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def cluster_served(data_dir: Path) -> bool:
    """Whether a process runs the local cluster of ``data_dir`` (it holds the data dir lock)."""
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class ControlClient:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.dir = data_dir / CONTROL_DIR

    def check(self) -> None:
        if not cluster_served(self.data_dir):
            raise ControlError(
                f"no running kafka-py cluster uses {self.data_dir} (start one with "
                f"'kafka-py cluster up --data-dir {self.data_dir}')"
            )

    def restart(
        self,
        process: str,
        *,
        stop_timeout: float,
        timeout: float,
        on_status: Callable[[Status], None] = lambda _s: None,
    ) -> Status:
        """Ask the cluster's owner to restart ``process``; returns the final status (``done``)
        or raises ControlError."""
        self.check()
        self.dir.mkdir(parents=True, exist_ok=True)
        req_id = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}"
        _write_json(
            self.dir / f"{req_id}.request.json",
            {"action": "restart", "process": process, "stop_timeout": stop_timeout},
        )
        status_path = self.dir / f"{req_id}.status.json"
        deadline = time.monotonic() + timeout
        last: str | None = None
        while True:
            body = _read_json(status_path)
            if body is not None:
                status = Status(**body)
                if status.state != last:
                    last = status.state
                    on_status(status)
                if status.state in FINAL:
                    with contextlib.suppress(OSError):
                        status_path.unlink()
                    if status.state == "failed":
                        raise ControlError(f"restart of {process} failed: {status.detail}")
                    return status
            if not cluster_served(self.data_dir):
                raise ControlError(f"the cluster in {self.data_dir} stopped during the restart")
            if time.monotonic() > deadline:
                with contextlib.suppress(OSError):
                    (self.dir / f"{req_id}.request.json").unlink()
                raise ControlError(
                    f"restart of {process} not done within {timeout:g}s (state: {last or 'queued'})"
                )
            time.sleep(POLL_S)
