"""A real Prometheus server (Debian's ``prometheus`` 2.x) watching a local cluster.

It runs as one more process of the cluster, in ``<data_dir>/prometheus`` (config, TSDB, log
``logs/prometheus.log``). Targets come from file-based service discovery: ``targets.json`` lists
the admin port (``/metrics``) of every kafka-py service that is running, labelled
``job=<role>``, ``instance=<process name>``, ``zone`` and ``kafka_cluster`` (the name the
cluster-wide alert rules aggregate by: the data dir's name without a leading dot), and is rewritten (atomically, by a
rename that Prometheus's file watcher picks up) whenever a service starts or stops. The rules file
(``deploy/prometheus/kafka-py-rules.yml`` unless another is given) is loaded, so its alerts are
evaluated against the cluster; ``/api/v1/alerts`` shows them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from services.cli.local_cluster import processes
from services.cli.local_cluster.errors import LocalClusterError
from services.cli.local_cluster.layout import PortPicker

RULES_FILE = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "kafka-py-rules.yml"
TARGETS_FILE = "targets.json"
CONFIG_FILE = "prometheus.yml"
LOG_NAME = "prometheus.log"


class Target(Protocol):
    """What the targets file needs of a process (``LocalCluster.processes()`` items)."""

    @property
    def name(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def admin_port(self) -> int | None: ...
    @property
    def zone(self) -> str | None: ...
    @property
    def running(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class PrometheusOptions:
    """``port`` 0 = any free port; intervals in seconds; ``rules`` None = the shipped rules."""

    port: int = 9090
    scrape_interval_s: float = 5.0
    evaluation_interval_s: float = 5.0
    rules: Path | None = None
    binary: str = "prometheus"


def _duration(seconds: float) -> str:
    """Prometheus duration text: whole milliseconds (``1500ms``)."""
    ms = round(seconds * 1000)
    if ms < 1:
        raise LocalClusterError(f"a Prometheus interval must be at least 1 ms, not {seconds}")
    return f"{ms}ms"


def targets_document(
    procs: Iterable[Target], host: str, cluster: str | None = None
) -> list[dict[str, Any]]:
    """The file-SD target groups: one per running service with an admin port."""
    groups = []
    for p in procs:
        if not p.running or not p.admin_port:
            continue
        labels = {"job": p.role, "instance": p.name}
        if cluster:
            labels["kafka_cluster"] = cluster
        if p.zone:
            labels["zone"] = p.zone
        groups.append({"targets": [f"{host}:{p.admin_port}"], "labels": labels})
    return groups


def config_document(opts: PrometheusOptions, targets: Path, rules: Path) -> dict[str, Any]:
    return {
        "global": {
            "scrape_interval": _duration(opts.scrape_interval_s),
            "scrape_timeout": _duration(min(opts.scrape_interval_s, 10.0)),
            "evaluation_interval": _duration(opts.evaluation_interval_s),
        },
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "kafka-py",
                "metrics_path": "/metrics",
                "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "30s"}],
            }
        ],
    }


class LocalPrometheus:
    """Config, targets and process of the cluster's Prometheus."""

    def __init__(self, data_dir: Path, host: str, opts: PrometheusOptions) -> None:
        self.dir = data_dir / "prometheus"
        self.host = host
        self.opts = opts
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._last_targets: list[dict[str, Any]] | None = None

    @property
    def cluster(self) -> str:
        """The ``kafka_cluster`` label: the data dir's name (``.kafka-py-data`` -> ``kafka-py-data``)."""
        return self.dir.parent.name.lstrip(".") or "local"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.dir / "logs" / LOG_NAME

    def sync(self, procs: Iterable[Target]) -> bool:
        """Rewrite ``targets.json`` if the running services changed; True when it did."""
        doc = targets_document(procs, self.host, self.cluster)
        if doc == self._last_targets:
            return False
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / (TARGETS_FILE + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, self.dir / TARGETS_FILE)
        self._last_targets = doc
        return True

    def start(self, procs: Iterable[Target], env: Mapping[str, str], deadline: float) -> None:
        """Write config and targets, start the server and wait until it is ready."""
        binary = shutil.which(self.opts.binary)
        if binary is None:
            raise LocalClusterError(
                f"{self.opts.binary} is not installed (Debian's prometheus package; "
                "scripts/install-deps.sh installs it)"
            )
        rules = (self.opts.rules or RULES_FILE).resolve()
        if not rules.is_file():
            raise LocalClusterError(f"no alert rules file at {rules}")
        self.port = PortPicker(self.host).pick(self.opts.port, None, "prometheus")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.sync(procs)
        config = self.dir / CONFIG_FILE
        # JSON is YAML: no YAML writer needed
        config.write_text(
            json.dumps(config_document(self.opts, self.dir / TARGETS_FILE, rules), indent=1)
        )
        argv = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            f"--web.listen-address={self.host}:{self.port}",
            "--storage.tsdb.retention.time=1d",
            "--log.level=warn",
        ]
        self.proc = processes.spawn(argv, self.log_path, cwd=self.dir.parent, env=dict(env))
        self._wait_ready(deadline)

    def _wait_ready(self, deadline: float) -> None:
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise LocalClusterError(
                    f"prometheus exited with code {self.proc.returncode} during start-up "
                    f"(log: {self.log_path})"
                )
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"prometheus was not ready at {self.url} in time (log: {self.log_path})"
                )
            time.sleep(0.2)

    def stop(self, timeout: float) -> None:
        if self.proc is not None:
            processes.terminate(self.proc, timeout)
            self.proc = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
