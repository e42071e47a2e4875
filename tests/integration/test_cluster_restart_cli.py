"""``kafka-py cluster restart --rolling storage`` and the local cluster's control channel, with a
real ZooKeeper and the stand-in services of tests/unit/cli/fakesvc (no topics: what is checked
here is the restart machinery; tests/e2e/test_rolling_restart.py runs it on a real cluster under
load). The cluster's owner is this test process: a thread serves the control channel, as
``kafka-py cluster up`` does on its tick."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.cli.cluster_control import ControlClient, ControlError, ControlServer, Status
from services.cli.local_cluster import LocalCluster

pytestmark = pytest.mark.integration


class FakeCluster(LocalCluster):
    SERVICE_PACKAGE = "tests.unit.cli.fakesvc"


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    monkeypatch.setenv("FAKESVC_IGNORE_TERM", "storage-2")
    cluster = FakeCluster(
        tmp_path / "data",
        gateways=1,
        storage_nodes=3,
        controllers=1,
        group_coordinators=0,
        gateway_port=0,
        zk_port=0,
    ).start()
    server = ControlServer(cluster)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            server.poll()
            done.wait(0.05)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield cluster
    finally:
        done.set()
        thread.join(30)
        cluster.stop(timeout=2)  # storage-2 ignores SIGTERM: SIGKILL after 2 s, not the default 10


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "cluster", "restart", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_rolling_restart_and_control_requests(served: LocalCluster) -> None:
    before = served.pids()
    res = _cli("--rolling", "storage", "--data-dir", str(served.data_dir), "--stop-timeout", "2")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stdout.splitlines()
    for i in range(3):
        assert any(f"[{i + 1}/3] storage-{i}: controlled shutdown" in line for line in lines)
        assert any(f"storage-{i}: started" in line for line in lines), lines
    # storage-2 ignores SIGTERM: killed after --stop-timeout, and said so
    assert any("storage-2: stopped after" in ln and "killed" in ln for ln in lines), lines
    assert "rolling restart of 3 storage node(s) done" in lines[-1]
    after = served.pids()
    for name, pid in before.items():
        assert (after[name] != pid) == name.startswith("storage-"), (name, before, after)

    # the control channel itself: a failed request is answered, a good one reports its steps
    client = ControlClient(served.data_dir)
    with pytest.raises(ControlError, match="restart of storage-7 failed: no storage-7"):
        client.restart("storage-7", stop_timeout=2, timeout=30)
    seen: list[Status] = []
    final = client.restart("storage-0", stop_timeout=5, timeout=60, on_status=seen.append)
    order = ["stopping", "starting", "done"]  # a quick step may be missed between two polls
    states = [s.state for s in seen]
    assert states[-1] == "done" and states == sorted(states, key=order.index), states
    assert final.exit_code == 0 and final.detail == ""


def test_without_a_running_cluster_the_cli_says_so_in_one_line(tmp_path: Path) -> None:
    res = _cli("--rolling", "storage", "--data-dir", str(tmp_path))
    assert res.returncode == 1
    assert res.stderr.strip().count("\n") == 0
    assert "no running kafka-py cluster uses" in res.stderr
    res = _cli("--rolling", "gateway", "--data-dir", str(tmp_path))
    assert res.returncode == 2
    assert "only 'storage' can be restarted" in res.stderr
