"""When a local-cluster service counts as started: its admin ``/readyz`` answers 200, and a
gateway also answers a Kafka request on its listener."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from services.cli.local_cluster.errors import LocalClusterInterrupted, process_failed
from services.cli.local_cluster.layout import Service
from services.cli.local_cluster.processes import POLL_S
from services.cli.probes import http_ready, kafka_answers


def is_ready(host: str, svc: Service) -> bool:
    if not http_ready(host, svc.admin_port, "/readyz", timeout=1.0):
        return False
    return svc.role != "gateway" or kafka_answers(host, svc.port, timeout=1.0)


def wait_ready(
    host: str,
    batch: Sequence[Service],
    deadline: float,
    timeout: float,
    interrupted: Callable[[], bool],
) -> None:
    """Wait until every service of ``batch`` is ready. Raises (quoting the log) when one exits,
    when ``deadline`` passes, or LocalClusterInterrupted once ``interrupted()`` is true."""
    waiting = list(batch)
    while waiting:
        for svc in list(waiting):
            assert svc.proc is not None
            if svc.proc.poll() is not None:
                raise process_failed(
                    f"{svc.name} exited with code {svc.proc.returncode} during start-up",
                    svc.name,
                    svc.log_path,
                )
            if is_ready(host, svc):
                waiting.remove(svc)
        if not waiting:
            return
        if interrupted():
            raise LocalClusterInterrupted("start-up interrupted")
        if time.monotonic() > deadline:
            names = ", ".join(s.name for s in waiting)
            raise process_failed(
                f"{names} not ready within {timeout:g}s", waiting[0].name, waiting[0].log_path
            )
        time.sleep(POLL_S * 2)
