"""A port lost between choosing it and binding it.

The local cluster chooses its ports (saved ones first) before it starts the processes, and a
process binds them a second or two later. Another program on the machine can take one of them
in between (an ephemeral port of a client connection, another test's server); the process then
exits with "Address already in use". ``bind_lost`` recognises that from the process's own output
of this start, and ``repick`` gives the process new free ports for the next try.
"""

from __future__ import annotations

import re
from pathlib import Path

from services.cli.local_cluster.errors import LocalClusterError
from services.cli.local_cluster.layout import PortPicker
from services.cli.probes import port_free

#: how many times one start gives a process new ports after it lost one
REBIND_ATTEMPTS = 3
# errno 98 as Python, asyncio and the JVM print it, and gRPC's bind failure
_BIND_FAILED = re.compile(r"address already in use|EADDRINUSE|failed to bind", re.IGNORECASE)


def log_size(path: Path) -> int:
    """Where this start's output of a log begins (logs are appended across starts)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def bind_lost(log_path: Path, since: int) -> bool:
    """True when the log written since offset ``since`` reports a failed bind."""
    try:
        with open(log_path, "rb") as f:
            f.seek(since)
            text = f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return False
    return _BIND_FAILED.search(text) is not None


def repick(
    host: str, name: str, ports: dict[str, int], fixed: set[str], taken: set[int]
) -> dict[str, int]:
    """New values for those of ``ports`` (kind -> port) that cannot be bound now; kinds in
    ``fixed`` were asked for by the user and are never changed (LocalClusterError when one of
    them is the busy one). ``taken``: every port the cluster uses."""
    picker = PortPicker(host)
    picker.reserve(*taken)
    out = dict(ports)
    for kind, port in ports.items():
        if port_free(host, port):
            continue  # released again since: the next try can have it
        if kind in fixed:
            raise LocalClusterError(f"port {port} on {host} is already in use ({name})")
        out[kind] = picker.pick(0, None, f"{name} {kind}")
    return out
