"""Process supervision for the local cluster: spawn a service in its own process group with its
output appended to its log, terminate a group (SIGTERM, then SIGKILL), and clean up after a
supervisor that died: the pid file it left, and the data-dir lock that keeps two supervisors
off one data dir."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

import services
from services.cli.local_cluster.errors import LocalClusterError

PIDS_FILE = "pids.json"
LOCK_FILE = ".lock"
POLL_S = 0.05
_PROJECT_ROOT = Path(services.__file__).resolve().parent.parent


def child_env(overrides: Mapping[str, str]) -> dict[str, str]:
    """This process's environment, unbuffered, with the project on PYTHONPATH, plus ``overrides``."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(_PROJECT_ROOT) + (os.pathsep + path if path else "")
    env.update(overrides)
    return env


def spawn(
    argv: Sequence[str], log_path: Path, *, cwd: Path, env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as a new session (its own process group) with stdout and stderr appended
    to ``log_path`` after a line naming the command."""
    with open(log_path, "ab") as log:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        log.write(f"---- {stamp} kafka-py local cluster: {' '.join(argv)}\n".encode())
        log.flush()
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group of ``proc``; SIGKILL also reaps it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    if sig == signal.SIGKILL:
        proc.wait()


def terminate(
    proc: subprocess.Popen[bytes], timeout: float, hurry: Callable[[], bool] = lambda: False
) -> None:
    """SIGTERM (and SIGCONT, in case it is stopped) the group, then SIGKILL after ``timeout``
    or as soon as ``hurry()`` says so; reap."""
    terminate_all([proc], timeout, hurry)


def terminate_all(
    procs: Sequence[subprocess.Popen[bytes]],
    timeout: float,
    hurry: Callable[[], bool] = lambda: False,
) -> None:
    """``terminate`` for several groups at once: all are signalled, then waited for together
    (one ``timeout`` for all), so their shutdowns overlap."""
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in running) and time.monotonic() < deadline and not hurry():
        time.sleep(POLL_S)
    for proc in procs:
        # Whatever is left of the group (the leader or children it spawned) goes now.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ---- leftovers of a supervisor that died ----------------------------------------------------
def save_pids(data_dir: Path, pids: Mapping[str, int]) -> None:
    tmp = data_dir / (PIDS_FILE + ".tmp")
    tmp.write_text(json.dumps(dict(pids), sort_keys=True) + "\n")
    tmp.replace(data_dir / PIDS_FILE)


def reap_leftovers(data_dir: Path) -> None:
    """SIGKILL processes a previous supervisor of this data dir started and left running
    (it was killed itself). Only a process group leader whose working directory is the
    data dir, or whose command line names it, is taken for ours."""
    try:
        pids = json.loads((data_dir / PIDS_FILE).read_text())
    except (OSError, ValueError):
        return
    for pid in pids.values() if isinstance(pids, dict) else ():
        if isinstance(pid, int) and _is_ours(pid, data_dir):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            _wait_gone(pid, 5.0)


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
        time.sleep(POLL_S)


class DataDirLock:
    """An exclusive flock on ``<data_dir>/.lock`` holding the supervisor's pid."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._fd: IO[str] | None = None

    def take(self) -> None:
        fd = open(self.data_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held until release()
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
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self._fd.truncate(0)
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._fd.close()
            self._fd = None
