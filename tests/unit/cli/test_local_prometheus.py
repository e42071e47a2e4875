"""The local cluster's Prometheus: its file-SD targets follow the running processes, its config
is one that Debian's ``promtool check config`` accepts, and ``cluster up --prometheus`` passes
its options through. (The server itself scraping a real cluster and firing the alerts:
tests/e2e/test_monitoring.py.)"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from services.cli import cluster_cmd
from services.cli.common import UsageError
from services.cli.local_cluster import LocalClusterInterrupted, ProcessInfo
from services.cli.local_cluster.prometheus import (
    RULES_FILE,
    TARGETS_FILE,
    LocalPrometheus,
    PrometheusOptions,
    config_document,
    targets_document,
)
from services.cli.main import build_parser


def _proc(name: str, role: str, admin: int | None, running: bool = True) -> ProcessInfo:
    return ProcessInfo(name, role, 0, 1, 1, admin, "zone-a" if admin else None, Path("x"), running)


PROCS = [
    _proc("zookeeper", "zookeeper", None),
    _proc("controller-0", "controller", 7001),
    _proc("storage-0", "storage", 7002),
    _proc("storage-1", "storage", 7003, running=False),
    _proc("gateway-0", "gateway", 7004),
]


def test_targets_are_the_running_services_with_role_and_process_labels() -> None:
    assert targets_document(PROCS, "127.0.0.1", "dev") == [
        {
            "targets": [f"127.0.0.1:{port}"],
            "labels": {"job": role, "instance": name, "kafka_cluster": "dev", "zone": "zone-a"},
        }
        for name, role, port in [
            ("controller-0", "controller", 7001),
            ("storage-0", "storage", 7002),
            ("gateway-0", "gateway", 7004),
        ]
    ]


def test_targets_file_is_rewritten_only_when_the_processes_change(tmp_path: Path) -> None:
    prom = LocalPrometheus(tmp_path, "127.0.0.1", PrometheusOptions())
    assert prom.sync(PROCS)
    path = tmp_path / "prometheus" / TARGETS_FILE
    assert len(json.loads(path.read_text())) == 3
    assert {g["labels"]["kafka_cluster"] for g in json.loads(path.read_text())} == {tmp_path.name}
    assert not prom.sync(PROCS)
    assert prom.sync([*PROCS[:3], _proc("storage-1", "storage", 7003), PROCS[4]])
    assert len(json.loads(path.read_text())) == 4
    assert not list((tmp_path / "prometheus").glob("*.tmp"))
    assert LocalPrometheus(tmp_path / ".kafka-py-data", "h", PrometheusOptions()).cluster == (
        "kafka-py-data"
    )


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_generated_config(tmp_path: Path) -> None:
    opts = PrometheusOptions(scrape_interval_s=0.5, evaluation_interval_s=2)
    targets = tmp_path / TARGETS_FILE
    targets.write_text(json.dumps(targets_document(PROCS, "127.0.0.1")))
    doc = config_document(opts, targets, RULES_FILE)
    assert doc["global"] == {
        "scrape_interval": "500ms",
        "scrape_timeout": "500ms",
        "evaluation_interval": "2000ms",
    }
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps(doc))
    res = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 9 rules found" in res.stdout


class _Recorder:
    calls: list[dict[str, Any]] = []

    def __init__(self, data_dir: Path, **kwargs: Any) -> None:
        _Recorder.calls.append(kwargs)

    def start(self, timeout: float) -> None:
        raise LocalClusterInterrupted("start-up interrupted")

    def stop(self) -> None:
        pass


def _up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *argv: str) -> dict[str, Any]:
    _Recorder.calls = []
    monkeypatch.setattr(cluster_cmd, "LocalCluster", _Recorder)
    args = build_parser().parse_args(["cluster", "up", "--data-dir", str(tmp_path), *argv])
    assert cluster_cmd.run_up(args, out=io.StringIO(), err=io.StringIO()) == 0
    return _Recorder.calls[0]


def test_cluster_up_prometheus_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert _up(monkeypatch, tmp_path)["prometheus"] is None
    got = _up(
        monkeypatch,
        tmp_path,
        "--prometheus",
        "--prometheus-port", "0",
        "--scrape-interval", "1",
        "--evaluation-interval", "2.5",
        "--rules-file", "r.yml",
    )  # fmt: skip
    assert got["prometheus"] == PrometheusOptions(
        port=0, scrape_interval_s=1.0, evaluation_interval_s=2.5, rules=Path("r.yml")
    )
    with pytest.raises(UsageError, match="--scrape-interval"):
        _up(monkeypatch, tmp_path, "--prometheus", "--scrape-interval", "0")
