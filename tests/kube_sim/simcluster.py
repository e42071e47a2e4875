"""The simulation seen through the surface of ``LocalCluster`` that the shared fault checker
(tests/e2e/checker) reads, so kube-sim runs the same ``Checker`` (writers, group, controller
monitor, liveness, verdicts) as every other fault test instead of a checker of its own:
``bootstrap``, ``zk_connect``, ``processes()``, ``pids()``, ``exited()``, ``admin_url()`` and
``logs_dir`` (the pods' logs, written there each time it is read).

A controller's ``index`` is its generated controller id (the checker compares it with
``/controller``), read from its registration ``/kafka-py/controllers/<id>`` (host = the pod's IP,
or its DNS name with internal TLS);
every other pod's index is its ordinal. The checker's nemesis (signals to host processes) is not
used here: kube-sim tests apply their faults themselves and name them with ``checker.fault``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from podsim import SimPod, Simulation, podman

from services.cli.local_cluster.cluster import ProcessInfo
from services.cli.local_cluster.layout import ZOOKEEPER

CONTROLLERS = "/kafka-py/controllers"


class SimCluster:
    def __init__(self, sim: Simulation, bootstrap: str, logs_dir: Path) -> None:
        self.sim = sim
        self.bootstrap = bootstrap
        self.host = "127.0.0.1"
        self._logs = logs_dir
        zk_pod = next(p for p in sim.pods if sim.component(p) == ZOOKEEPER)
        self.zk_connect = f"{zk_pod.ip}:{zk_pod.port('client')}"
        self._zk = KazooClient(hosts=self.zk_connect, timeout=10)
        self._zk.start(30)
        self._lock = threading.Lock()
        self._ids: dict[tuple[str, int], int] = {}  # (container, starts) -> controller id
        self._pids: dict[tuple[str, int], int] = {}

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()

    # ---- what the checker reads ---------------------------------------------------------
    def _index(self, pod: SimPod) -> int | None:
        if self.sim.component(pod) != "controller":
            return pod.ordinal
        key = (pod.container, pod.starts)
        with self._lock:
            if key not in self._ids:
                for cid in self._zk.get_children(CONTROLLERS):
                    try:
                        host = json.loads(self._zk.get(f"{CONTROLLERS}/{cid}")[0])["host"]
                    except NoNodeError:
                        continue
                    if pod.is_host(host):
                        self._ids[key] = int(cid)
            return self._ids.get(key)

    def _pod(self, role: str, index: int) -> SimPod:
        for pod in self.sim.pods + self.sim.spare:
            if pod.running and self.sim.component(pod) == role and self._index(pod) == index:
                return pod
        raise KeyError(f"no running {role} pod with index {index}")

    def processes(self) -> list[ProcessInfo]:
        out: list[ProcessInfo] = []
        for pod in self.sim.pods + self.sim.spare:
            if not pod.container:
                continue  # a planned ordinal never started
            role = self.sim.component(pod)
            index = self._index(pod) if pod.running else None
            name = ZOOKEEPER if role == ZOOKEEPER else f"{role}-{pod.ordinal}"
            admin = pod.port("admin") if role != ZOOKEEPER else None
            out.append(
                ProcessInfo(
                    name,
                    role,
                    pod.ordinal if index is None else index,
                    self._pid(pod),
                    pod.port(pod.main["ports"][0]["name"]),
                    admin,
                    pod.zone,
                    self._logs / f"{pod.name}.log",
                    pod.running and index is not None,
                )
            )
        return out

    def _pid(self, pod: SimPod) -> int | None:
        if not pod.running:
            return None
        key = (pod.container, pod.starts)
        if key not in self._pids:
            out = podman("inspect", "--format", "{{.State.Pid}}", pod.container, check=False)
            if out.strip().isdigit() and int(out) > 0:
                self._pids[key] = int(out)
        return self._pids.get(key)

    def pids(self) -> dict[str, int]:
        return {p.name: p.pid for p in self.processes() if p.running and p.pid is not None}

    def exited(self) -> dict[str, int]:
        """Pods the simulation runs whose container is not running: name -> exit code."""
        out = podman(
            "ps", "-a", "--filter", f"label=kafka-py-sim={self.sim.prefix}", "--format", "json"
        )
        states = {c["Names"][0]: (c["State"], int(c["ExitCode"])) for c in json.loads(out or "[]")}
        down: dict[str, int] = {}
        for pod in self.sim.pods + self.sim.spare:
            if pod.running:
                state, code = states.get(pod.container, ("missing", -1))
                if state != "running":
                    down[pod.name] = code
        return down

    def admin_url(self, role: str, index: int = 0) -> str:
        pod = self._pod(role, index)
        return f"http://{pod.ip}:{pod.port('admin')}"

    def active_controller_index(self) -> int | None:
        try:
            return int(json.loads(self._zk.get("/controller")[0])["brokerid"])
        except NoNodeError:
            return None

    @property
    def logs_dir(self) -> Path:
        """The pods' logs as they are now, one ``<pod>.log`` each."""
        self._logs.mkdir(parents=True, exist_ok=True)
        for pod in self.sim.pods + self.sim.spare:
            if pod.container:
                (self._logs / f"{pod.name}.log").write_text(pod.past_logs + self.sim.logs(pod))
        return self._logs
