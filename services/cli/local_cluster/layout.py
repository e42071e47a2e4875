"""The process table of a local cluster: roles, one slot per process, and its ports.

Ports chosen for a data dir are saved in ``cluster.json`` (role -> index -> port and admin port)
and reused on the next start, so a cluster started again on the same data dir comes back at the
same addresses. A new role is one more name in ``ROLES`` (start order) plus its flags in
``flags.py``; a new node of an existing role (a storage node added by ordinal) is one more
``slot()`` call with the same ``PortPicker`` and book.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.cli.local_cluster.errors import LocalClusterError
from services.cli.probes import port_free
from services.common.zk.server import free_port

#: every role in start order (dependencies first); stopped in reverse
ROLES = ("controller", "storage", "group_coordinator", "transaction_coordinator", "gateway")
ZOOKEEPER = "zookeeper"
STATE_FILE = "cluster.json"
STATE_VERSION = 1


@dataclass(slots=True)
class Service:
    """One managed process of a role: its id (``index``), ports, zone, log and process."""

    role: str
    index: int
    port: int
    admin_port: int
    zone: str | None
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    #: size of ``log_path`` when the process was last spawned: where its output of this start begins
    log_start: int = 0

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass(slots=True)
class PortBook:
    """Ports saved in cluster.json: role -> index -> {"port", "admin_port"}."""

    zookeeper: int | None = None
    roles: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> PortBook:
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


class PortPicker:
    """Hands out distinct ports on ``host``: a requested one, else a saved free one, else any."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._used: set[int] = set()

    def reserve(self, *ports: int) -> None:
        """Ports already taken (by the cluster's running processes)."""
        self._used.update(ports)

    def pick(self, requested: int, saved: int | None, what: str) -> int:
        if requested > 0:
            if requested in self._used or not port_free(self.host, requested):
                raise LocalClusterError(
                    f"port {requested} on {self.host} is already in use ({what})"
                )
            self._used.add(requested)
            return requested
        if saved and saved not in self._used and port_free(self.host, saved):
            self._used.add(saved)
            return saved
        while (port := free_port(self.host)) in self._used:
            pass
        self._used.add(port)
        return port


def log_name(role: str) -> str:
    """The service's name in its log file's name (``group-coordinator-0.log``)."""
    return role.replace("_", "-")


def process_name(role: str, index: int) -> str:
    return ZOOKEEPER if role == ZOOKEEPER else f"{role}-{index}"


def slot(
    role: str,
    index: int,
    *,
    book: PortBook,
    picker: PortPicker,
    zones: Sequence[str],
    logs_dir: Path,
    fixed_port: int | None = None,
) -> Service:
    """The process slot of ``role``-``index``: saved ports reused where free. Controllers have
    no zone; every other process gets zone ``index mod len(zones)``."""
    saved = book.get(role, index)
    name = process_name(role, index)
    port = fixed_port or picker.pick(0, saved.get("port"), name)
    admin = picker.pick(0, saved.get("admin_port"), f"{name} admin")
    zone = zones[index % len(zones)] if role != "controller" else None
    log_path = logs_dir / f"{log_name(role)}-{index}.log"
    return Service(role, index, port, admin, zone, log_path)


def save_state(
    data_dir: Path, host: str, zk_port: int, book: PortBook, services: Iterable[Service]
) -> None:
    """Write cluster.json: the ports of ``services``, plus those of nodes not started this time."""
    state: dict[str, Any] = {"version": STATE_VERSION, "host": host, ZOOKEEPER: {"port": zk_port}}
    for role in ROLES:
        state[role] = dict(book.roles.get(role, {}))
    for s in services:
        state[s.role][str(s.index)] = {"port": s.port, "admin_port": s.admin_port}
    tmp = data_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    tmp.replace(data_dir / STATE_FILE)
