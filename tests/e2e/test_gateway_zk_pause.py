"""A gateway restarted around ZooKeeper pauses (issue 12 §2, acceptance 3).

A restarted gateway waits for the registration of its killed predecessor to expire; until its
own registration exists it answers no Kafka request and /readyz is not 200. ZooKeeper pausing
(SIGSTOP past the session timeout) while it waits, or while it starts, must not make it exit;
the local cluster's supervisor brings back a gateway killed during a pause. SIGTERM while
ZooKeeper does not answer ends the process in bounded time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from services.cli.probes import kafka_answers
from services.cli.supervisor import Supervisor
from services.common.zk import layout
from services.common.zk.server import free_port
from tests.integration.kafka_support import running_cluster, wait_for
from tests.zk_stall import ZkStallProxy

pytestmark = pytest.mark.e2e

SESSION_MS = 3000  # the local cluster's, gateways' included
PAUSE_S = SESSION_MS / 1000 * 2  # past the session timeout and kazoo's detection of it


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, ZkStallProxy]]:
    """The gateway reaches ZooKeeper through a proxy (tests/zk_stall.py) that can keep the
    session of a killed gateway alive, whatever time its successor takes to start."""
    zk_port = free_port()
    proxy = ZkStallProxy(f"127.0.0.1:{zk_port}").start()
    try:
        with running_cluster(
            tmp_path_factory.mktemp("gateway-zk-pause"),
            gateways=1,
            storage_nodes=1,
            controllers=1,
            group_coordinators=0,
            zk_port=zk_port,
            zk_session_timeout_ms=SESSION_MS,
            extra={"gateway": ["--override", f"zookeeper.connect={proxy.address}"]},
        ) as c:
            yield c, proxy
    finally:
        proxy.stop()


def readyz(cluster: LocalCluster) -> int | None:
    try:
        with urllib.request.urlopen(cluster.admin_url("gateway") + "/readyz", timeout=1) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None  # admin server not up yet


def registration_owner(cluster: LocalCluster) -> int | None:
    zk = KazooClient(hosts=cluster.zk_connect, timeout=5)
    zk.start(10)
    try:
        stat = zk.exists(layout.gateway_path(0))
        return stat.ephemeralOwner if stat is not None else None
    finally:
        zk.stop()
        zk.close()


def kafka_up(cluster: LocalCluster) -> bool:
    host, port = cluster.bootstrap.split(":")
    return kafka_answers(host, int(port), timeout=1.0)


def pause_zookeeper(cluster: LocalCluster, seconds: float) -> None:
    pid = cluster.zookeeper.proc.pid  # type: ignore[union-attr]
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def log_has(cluster: LocalCluster, since: int, text: str) -> bool:
    return text in cluster.log_path("gateway").read_text()[since:]


def test_restarted_gateway_waits_registered_and_survives_zookeeper_pauses(
    env: tuple[LocalCluster, ZkStallProxy],
) -> None:
    cluster, proxy = env
    # ---- A: kill -9 during a ZooKeeper pause; the supervisor restarts it ------------------
    owner = registration_owner(cluster)
    assert owner is not None and readyz(cluster) == 200
    lines: list[str] = []
    supervisor = Supervisor(cluster, lines.append, ready_timeout=60)
    zk_pid = cluster.zookeeper.proc.pid  # type: ignore[union-attr]
    os.kill(zk_pid, signal.SIGSTOP)
    try:
        cluster.kill("gateway")
        ticking = threading.Thread(target=supervisor.tick)  # restarts it, waits until ready
        ticking.start()
        wait_for("the new gateway's admin server", lambda: readyz(cluster) is not None, 30)
        deadline = time.monotonic() + PAUSE_S
        while time.monotonic() < deadline:
            assert readyz(cluster) != 200, "ready while ZooKeeper is paused"
            assert not kafka_up(cluster), "Kafka requests answered before registration"
            time.sleep(0.2)
    finally:
        os.kill(zk_pid, signal.SIGCONT)
    ticking.join(90)
    assert "gateway-0 is back" in lines, lines
    new_owner = registration_owner(cluster)
    assert new_owner not in (None, owner)
    assert readyz(cluster) == 200 and kafka_up(cluster)

    # ---- B: kill -9, restart at once, ZooKeeper pauses while it waits for the old node ----
    owner = new_owner
    assert owner is not None
    since = cluster.log_path("gateway").stat().st_size
    proxy.hold(owner)  # the killed gateway's registration stays until released
    cluster.kill("gateway")
    cluster.start_process("gateway", wait=False)
    pid = cluster.pids()["gateway-0"]
    wait_for(
        "the new gateway to wait for its old registration",
        lambda: log_has(cluster, since, "waiting for it to expire"),
        60,
    )
    for _ in range(10):  # the old registration is still there: not ready, no Kafka
        assert registration_owner(cluster) == owner
        assert readyz(cluster) not in (200, None) and not kafka_up(cluster)
        time.sleep(0.2)
    proxy.release(owner)  # expires while ZooKeeper pauses
    pause_zookeeper(cluster, PAUSE_S)
    first_ready = None
    deadline = time.monotonic() + 30
    while first_ready is None and time.monotonic() < deadline:
        assert cluster.exited() == {}, "the gateway exited: " + str(cluster.exited())
        if readyz(cluster) == 200:
            first_ready = registration_owner(cluster)
        elif registration_owner(cluster) == owner:
            assert not kafka_up(cluster), "Kafka requests answered before registration"
        time.sleep(0.1)
    assert first_ready not in (None, owner), "ready without a registration of its own"
    assert cluster.pids()["gateway-0"] == pid  # came back by its own retry
    assert kafka_up(cluster)
    text = cluster.log_path("gateway").read_text()[since:]
    assert "registration failed, retrying" in text  # ZooKeeper did drop it while it waited


class ExtraGateway:
    """One more gateway process with Kafka's default session timeout (18 s: kazoo's own waits
    are that long), started by hand next to the cluster."""

    def __init__(self, cluster: LocalCluster, node_id: int, log_path: Path) -> None:
        self.admin_port = free_port()
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.gateway",
                "--node.id",
                str(node_id),
                "--listeners",
                "127.0.0.1:0",
                "--zookeeper.connect",
                cluster.zk_connect,
                "--zookeeper.session.timeout.ms",
                "18000",
                "--admin.port",
                str(self.admin_port),
            ],  # fmt: skip
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )

    def status(self) -> int | None:
        try:
            url = f"http://127.0.0.1:{self.admin_port}/readyz"
            with urllib.request.urlopen(url, timeout=1) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def sigterm(self) -> tuple[int, float]:
        """Exit code and seconds from SIGTERM to exit."""
        stopped = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(30)
        return code, time.monotonic() - stopped

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def test_sigterm_while_zookeeper_is_paused_ends_the_gateway_in_bounded_time(
    env: tuple[LocalCluster, ZkStallProxy], tmp_path: Path
) -> None:
    cluster, _ = env
    zk_pid = cluster.zookeeper.proc.pid  # type: ignore[union-attr]
    # a running gateway
    running = ExtraGateway(cluster, 5, tmp_path / "gateway-5.log")
    try:
        wait_for("the extra gateway ready", lambda: running.status() == 200, 60)
        os.kill(zk_pid, signal.SIGSTOP)
        try:
            time.sleep(1.0)
            code, took = running.sigterm()
        finally:
            os.kill(zk_pid, signal.SIGCONT)
    finally:
        running.close()
    print(f"\ngateway stopped {took:.1f}s after SIGTERM with ZooKeeper paused")  # noqa: T201
    assert code == 0
    assert took < 10.0, f"{took:.1f}s"  # kazoo alone would wait up to its 18 s
    assert '"gateway_stopped"' in running.log_path.read_text()

    # a gateway still starting: waiting to connect to the paused ZooKeeper
    os.kill(zk_pid, signal.SIGSTOP)
    starting = ExtraGateway(cluster, 6, tmp_path / "gateway-6.log")
    try:
        # its event loop answers (start-up's CPU work is done): it waits for ZooKeeper now
        wait_for("the starting gateway not ready", lambda: starting.status() == 503, 60)
        time.sleep(1.0)
        assert starting.status() == 503
        code, took = starting.sigterm()
    finally:
        os.kill(zk_pid, signal.SIGCONT)
        starting.close()
    print(f"starting gateway stopped {took:.1f}s after SIGTERM")  # noqa: T201
    assert code == 0
    assert took < 10.0, f"{took:.1f}s"  # the start alone waits 15 s for ZooKeeper
