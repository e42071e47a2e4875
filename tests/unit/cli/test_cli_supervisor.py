"""The cluster-up supervisor: restarts, ordering, backoff and the restart budget."""

from __future__ import annotations

from services.cli.local_cluster import LocalClusterError
from services.cli.supervisor import Supervisor, split_name


class FakeCluster:
    def __init__(self) -> None:
        self.dead: dict[str, int] = {}
        self.started: list[str] = []
        self.fail_start = False

    def exited(self) -> dict[str, int]:
        return dict(self.dead)

    def start_process(
        self, role: str, index: int = 0, *, timeout: float = 60.0, wait: bool = True
    ) -> None:
        name = role if role == "zookeeper" else f"{role}-{index}"
        self.started.append(name)
        if self.fail_start:
            raise LocalClusterError(
                f"{name} exited with code 1 during start-up", log_tail=["first", "last words"]
            )
        self.dead.pop(name, None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_split_name() -> None:
    assert split_name("storage-12") == ("storage", 12)
    assert split_name("zookeeper") == ("zookeeper", 0)


def test_restarts_zookeeper_first() -> None:
    cluster, log = FakeCluster(), []
    cluster.dead = {"gateway-0": -9, "storage-1": 1, "zookeeper": 143}
    sup = Supervisor(cluster, log.append, clock=Clock())
    assert sup.tick() == ["zookeeper", "storage-1", "gateway-0"]
    assert cluster.started == ["zookeeper", "storage-1", "gateway-0"]
    assert "storage-1 exited unexpectedly with code 1" in log


def test_backoff_and_budget() -> None:
    cluster, log, clock = FakeCluster(), [], Clock()
    cluster.fail_start = True
    sup = Supervisor(cluster, log.append, max_restarts=3, clock=clock)
    cluster.dead = {"storage-0": 1}
    sup.tick()  # first restart at once
    sup.tick()  # backoff: 1 s not over yet
    assert cluster.started == ["storage-0"]
    assert any("restart of storage-0 failed" in line and "last words" in line for line in log)
    clock.now += 1.0
    sup.tick()
    clock.now += 2.0
    sup.tick()
    assert cluster.started == ["storage-0"] * 3
    clock.now += 60.0
    sup.tick()
    sup.tick()
    assert cluster.started == ["storage-0"] * 3  # budget spent: left down
    assert sum("leaving it down" in line for line in log) == 1


def test_budget_is_per_window() -> None:
    cluster, clock = FakeCluster(), Clock()
    sup = Supervisor(cluster, lambda _: None, max_restarts=1, window_s=100.0, clock=clock)
    cluster.dead = {"gateway-0": 1}
    assert sup.tick() == ["gateway-0"]
    clock.now += 101.0
    cluster.dead = {"gateway-0": 1}
    assert sup.tick() == ["gateway-0"]


def test_zero_restarts_means_never() -> None:
    cluster = FakeCluster()
    cluster.dead = {"controller-1": 1}
    assert Supervisor(cluster, lambda _: None, max_restarts=0).tick() == []
    assert cluster.started == []
