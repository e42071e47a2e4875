"""LocalCluster process management, with a real ZooKeeper and stand-in services.

The stand-ins (tests/unit/cli/fakesvc) take the same flags as the real services, serve /readyz
and answer ApiVersions, so these tests check the supervisor itself: start order, readiness,
failure reports, restarts, ports kept in cluster.json, and that stop() leaves no process behind.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster, LocalClusterError, LocalClusterInterrupted
from services.cli.probes import http_ready, kafka_answers
from services.cli.supervisor import Supervisor

pytestmark = pytest.mark.integration


class FakeCluster(LocalCluster):
    SERVICE_PACKAGE = "tests.unit.cli.fakesvc"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _group_members(pgids: set[int]) -> list[int]:
    """Live processes whose process group is one of ``pgids`` (a /proc scan)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in pgids:
            found.append(int(entry))
    return found


def _small(tmp_path: Path, **kw: object) -> FakeCluster:
    opts: dict[str, object] = {
        "gateways": 1,
        "storage_nodes": 2,
        "controllers": 1,
        "group_coordinators": 1,
        "transaction_coordinators": 0,
        "gateway_port": 0,
        "zk_port": 0,
    }
    opts.update(kw)
    return FakeCluster(tmp_path / "data", **opts)  # type: ignore[arg-type]


def test_start_stop_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKESVC_CHILD", "1")  # each service also forks a child in its group
    cluster = _small(
        tmp_path, storage_nodes=3, controllers=2, group_coordinators=2, transaction_coordinators=1
    )
    with cluster:
        pids = cluster.pids()
        assert set(pids) == {
            "zookeeper",
            "controller-0",
            "controller-1",
            "storage-0",
            "storage-1",
            "storage-2",
            "group_coordinator-0",
            "group_coordinator-1",
            "transaction_coordinator-0",
            "gateway-0",
        }
        host, port = cluster.bootstrap.split(":")
        assert kafka_answers(host, int(port))
        for proc in cluster.processes()[1:]:
            assert proc.admin_port and http_ready("127.0.0.1", proc.admin_port)
        assert [p.zone for p in cluster.processes() if p.role == "storage"] == [
            "zone-a",
            "zone-b",
            "zone-c",
        ]
        assert _group_members(set(pids.values()))  # the children exist while running
        log = cluster.log_path("storage", 1).read_text()
        assert "--broker.id 1" in log and "--broker.rack zone-b" in log
        assert f"--log.dirs {cluster.data_dir / 'storage-1'}" in log
        assert "--zookeeper.session.timeout.ms 3000" in log
    assert cluster.pids() == {}
    assert not any(_alive(p) for p in pids.values())
    assert _group_members(set(pids.values())) == []
    cluster.stop()  # idempotent
    state = json.loads((cluster.data_dir / "cluster.json").read_text())
    assert state["gateway"]["0"]["port"] == int(port)
    assert (cluster.data_dir / ".lock").read_text() == ""  # released


def test_second_start_reuses_ports_and_data(tmp_path: Path) -> None:
    first = _small(tmp_path)
    with first:
        bootstrap, zk = first.bootstrap, first.zk_connect
        ports = {p.name: (p.port, p.admin_port) for p in first.processes()}
    second = _small(tmp_path)
    with second:
        assert second.bootstrap == bootstrap and second.zk_connect == zk
        assert {p.name: (p.port, p.admin_port) for p in second.processes()} == ports
        assert (second.storage_dir(0) / "fake-starts").read_text() == "xx"


def test_ports_taken_between_choosing_and_binding_are_chosen_again(tmp_path: Path) -> None:
    """Another program takes ZooKeeper's and the gateway's saved ports after the second start
    chose them and before the processes bind them: both come up on new free ports, cluster.json
    and the bootstrap say so, the data dir is the same."""
    import socket
    import threading

    with _small(tmp_path) as first:
        zk_port = first.zookeeper.port
        gw_port = first.gateway_ports[0]
        others = {p.name: (p.port, p.admin_port) for p in first.processes()[1:-1]}
    state = tmp_path / "data" / "cluster.json"
    # Bound (SO_REUSEADDR, not listening) looks free to the port check; listening takes it.
    thieves = []
    for port in (zk_port, gw_port):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        thieves.append(s)
    before = state.stat().st_ino

    def steal_once_chosen() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if state.exists() and state.stat().st_ino != before:  # the layout was saved
                for s in thieves:
                    s.listen()
                return
            time.sleep(0.001)

    thief = threading.Thread(target=steal_once_chosen)
    thief.start()
    try:
        with _small(tmp_path) as second:
            thief.join()
            assert second.zookeeper.port != zk_port and second.gateway_ports[0] != gw_port
            host, port = second.bootstrap.split(":")
            assert kafka_answers(host, int(port))
            assert {p.name: (p.port, p.admin_port) for p in second.processes()[1:-1]} == others
            saved = json.loads(state.read_text())
            assert saved["zookeeper"]["port"] == second.zookeeper.port
            assert saved["gateway"]["0"]["port"] == int(port)
            assert (second.storage_dir(0) / "fake-starts").read_text() == "xx"
        assert "Address already in use" in second.log_path("gateway").read_text()
        assert "Address already in use" in second.log_path("zookeeper").read_text()
    finally:
        thief.join()
        for s in thieves:
            s.close()


def test_failed_process_start_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """start_process() that does not get ready stops what it started (children included), and
    the process shows as exited, so a supervisor tries again."""
    with _small(tmp_path) as cluster:
        cluster.kill("storage", 1)
        monkeypatch.setenv("FAKESVC_NEVER_READY", "storage-1")
        monkeypatch.setenv("FAKESVC_CHILD", "1")
        with pytest.raises(LocalClusterError, match="storage-1 not ready within 2s"):
            cluster.start_process("storage", 1, timeout=2)
        (info,) = [p for p in cluster.processes() if p.name == "storage-1"]
        assert info.pid is not None and not info.running
        assert _group_members({info.pid}) == []
        assert "storage-1" in cluster.exited()
        monkeypatch.delenv("FAKESVC_NEVER_READY")
        cluster.start_process("storage", 1)
        assert cluster.exited() == {}


def test_data_dir_is_locked_while_running(tmp_path: Path) -> None:
    with _small(tmp_path):
        with pytest.raises(LocalClusterError, match="in use by another kafka-py cluster"):
            _small(tmp_path).start()


def test_fixed_port_in_use_is_reported(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        with pytest.raises(LocalClusterError, match=f"port {busy} .* in use .*gateway-0"):
            _small(tmp_path, gateway_port=busy).start()


def test_crash_at_start_names_process_and_log_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKESVC_CRASH", "storage-1")
    cluster = _small(tmp_path)
    with pytest.raises(LocalClusterError) as info:
        cluster.start(timeout=20)
    err = info.value
    assert err.process == "storage-1"
    assert "exited with code 3" in str(err) and "boom" in str(err)
    assert "boom" in err.one_line() and "\n" not in err.one_line()
    assert cluster.pids() == {}
    assert not any(_alive(p.pid) for p in cluster.processes() if p.pid)


def test_not_ready_times_out_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKESVC_NEVER_READY", "gateway-0")
    cluster = _small(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(LocalClusterError, match="gateway-0 not ready within 4s"):
        cluster.start(timeout=4)
    assert time.monotonic() - t0 < 10
    assert cluster.pids() == {}


def test_kill_restart_and_exited(tmp_path: Path) -> None:
    with _small(tmp_path) as cluster:
        old = cluster.pids()["storage-0"]
        cluster.kill("storage", 0)
        assert cluster.exited() == {"storage-0": -signal.SIGKILL}
        with pytest.raises(LocalClusterError, match="not running"):
            cluster.kill("storage", 0)
        cluster.start_process("storage", 0)
        assert cluster.exited() == {}
        assert cluster.pids()["storage-0"] != old
        with pytest.raises(LocalClusterError, match="already running"):
            cluster.start_process("storage", 0)
        with pytest.raises(LocalClusterError, match="no storage-5"):
            cluster.kill("storage", 5)


def test_stop_handles_stopped_and_stubborn_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKESVC_IGNORE_TERM", "controller-0")
    cluster = _small(tmp_path).start()
    cluster.kill("storage", 1, signal.SIGSTOP)
    pids = cluster.pids()
    t0 = time.monotonic()
    cluster.stop(timeout=1.0)
    assert time.monotonic() - t0 < 6
    assert not any(_alive(p) for p in pids.values())


def test_zookeeper_kill_and_restart(tmp_path: Path) -> None:
    with _small(tmp_path) as cluster:
        cluster.kill("zookeeper")
        assert "zookeeper" in cluster.exited()
        cluster.start_process("zookeeper")
        assert "zookeeper" not in cluster.exited()


def test_active_controller_index_reads_controller_znode(tmp_path: Path) -> None:
    with _small(tmp_path, controllers=2) as cluster:
        assert cluster.active_controller_index() is None
        zk = KazooClient(hosts=cluster.zk_connect)
        zk.start(10)
        try:
            zk.create("/controller", b'{"version":1,"brokerid":1,"timestamp":"1"}', ephemeral=True)
            assert cluster.active_controller_index() == 1
        finally:
            zk.stop()
            zk.close()


def test_supervisor_restarts_a_dead_service(tmp_path: Path) -> None:
    lines: list[str] = []
    with _small(tmp_path) as cluster:
        sup = Supervisor(cluster, lines.append, max_restarts=2)
        assert sup.tick() == []
        cluster.kill("gateway", 0)
        assert sup.tick() == ["gateway-0"]
        host, port = cluster.bootstrap.split(":")
        assert kafka_answers(host, int(port))
    assert any("gateway-0 exited unexpectedly" in line for line in lines)
    assert any("gateway-0 is back" in line for line in lines)


def test_next_start_reaps_processes_of_a_killed_supervisor(tmp_path: Path) -> None:
    import subprocess
    import sys

    data = tmp_path / "data"
    script = (
        "import sys, time\n"
        "from tests.integration.test_cli_local_cluster import FakeCluster\n"
        f"c = FakeCluster({str(data)!r}, gateways=1, storage_nodes=1, controllers=1,"
        " group_coordinators=1, transaction_coordinators=0,"
        " gateway_port=0, zk_port=0).start()\n"
        "print(' '.join(str(p) for p in c.pids().values()), flush=True)\n"
        "time.sleep(600)\n"
    )
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        assert child.stdout is not None
        orphans = [int(p) for p in child.stdout.readline().split()]
        assert len(orphans) == 5  # zookeeper, controller, storage, group coordinator, gateway
    finally:
        child.kill()  # the supervisor dies without stopping anything
        child.wait()
    assert all(_alive(p) for p in orphans)
    with _small(tmp_path, storage_nodes=1) as cluster:
        assert not any(_alive(p) for p in orphans)
        assert len(cluster.pids()) == 5


def test_interrupt_before_start_is_honoured_once(tmp_path: Path) -> None:
    cluster = _small(tmp_path)
    cluster.interrupt()
    with pytest.raises(LocalClusterInterrupted):
        cluster.start()
    assert cluster.pids() == {}
    with cluster.start():
        assert (
            len(cluster.pids()) == 6
        )  # zookeeper, controller, 2 storage, group coordinator, gateway
