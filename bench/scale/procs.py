"""Process-level readings from /proc: resident memory and CPU of the cluster's services."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from bench.cpu import cpu_seconds


def rss_bytes(pids: Iterable[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
    return total


def role_pids(cluster: Any) -> dict[str, list[int]]:
    """Live pids of each service role (``storage``, ``gateway``, ...), ZooKeeper left out."""
    out: dict[str, list[int]] = {}
    for name, pid in cluster.pids().items():
        role = name.rsplit("-", 1)[0]
        if role != "zookeeper":
            out.setdefault(role, []).append(pid)
    return out


def admin_ports(cluster: Any, role: str) -> dict[str, int]:
    """Admin (/metrics) ports of the running processes of ``role``, by process name."""
    return {
        p.name: p.admin_port
        for p in cluster.processes()
        if p.role == role and p.admin_port and p.running
    }


def rss_by_role(cluster: Any) -> dict[str, int]:
    return {role: rss_bytes(pids) for role, pids in role_pids(cluster).items()}


def cpu_over(pids: list[int], seconds: float) -> float:
    """Cores used by ``pids`` (and children) over ``seconds`` of wall time."""
    before = cpu_seconds(pids)
    time.sleep(seconds)
    return (cpu_seconds(pids) - before) / seconds


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def wait_until(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> float:
    """Seconds until ``cond()`` is truthy; RuntimeError naming ``what`` after ``timeout``."""
    start = time.perf_counter()
    while True:
        if cond():
            return time.perf_counter() - start
        if time.perf_counter() - start > timeout:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
