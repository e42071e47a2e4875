"""Every service of the local cluster measures its event loop's lag on /metrics."""

from __future__ import annotations

import time
import urllib.request

from services.cli.local_cluster import ROLES, LocalCluster


def _metric_count(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "_count "):
            return float(line.split()[1])
    raise AssertionError(f"{name} missing from /metrics")


def test_every_service_reports_its_event_loop_lag(cluster: LocalCluster) -> None:
    services = [
        (role, int(index))
        for role, _, index in (p.name.rpartition("-") for p in cluster.processes())
        if role in ROLES
    ]
    assert {role for role, _ in services} == set(ROLES)
    for role, index in services:
        url = cluster.admin_url(role, index) + "/metrics"
        deadline = time.monotonic() + 5  # the first sample is taken a moment after start
        while True:
            with urllib.request.urlopen(url, timeout=5) as r:
                samples = _metric_count(r.read().decode(), "kafkapy_event_loop_lag_seconds")
            if samples > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert samples > 0, (role, index)
