"""The local cluster's "StatefulSet controller": applies ``/kafka-py/storage-scale`` (written by
the active controller's local provisioner) to a LocalCluster, starting storage ordinals that
should run and stopping those that should not. A stopped node's data dir stays (like a PVC), so
the ordinal comes back with its data if it is asked for again.

``kafka-py cluster up`` ticks it from its supervision loop; tests run it on a thread
(:meth:`LocalScaler.running`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from services.cli.local_cluster import LocalCluster, _Service
from services.common.zk import elastic
from services.common.zk.server import free_port

Log = Callable[[str], None]

_quiet = logging.getLogger("kafka-py.local-scaler.kazoo")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def add_storage_slot(cluster: LocalCluster, index: int) -> None:
    """Give the cluster storage ordinals up to ``index`` (ports, zone in turn, log file)."""
    nodes = cluster._services["storage"]
    while len(nodes) <= index:
        i = len(nodes)
        nodes.append(
            _Service(
                "storage",
                i,
                free_port(cluster.host),
                free_port(cluster.host),
                cluster.zones[i % len(cluster.zones)],
                cluster.logs_dir / f"storage-{i}.log",
            )
        )
    cluster._counts["storage"] = len(nodes)


def stop_storage(cluster: LocalCluster, index: int, timeout: float = 10.0) -> None:
    """SIGTERM one storage node (a clean stop) and forget its process, so supervision leaves it
    down; its data dir stays."""
    svc = cluster._services["storage"][index]
    if svc.proc is not None:
        cluster._terminate(svc.proc, timeout)
        svc.proc = None
        cluster._save_pids()


class LocalScaler:
    def __init__(self, cluster: LocalCluster, log: Log, *, ready_timeout: float = 60.0) -> None:
        self.cluster = cluster
        self.log = log
        self.ready_timeout = ready_timeout
        self.zk = KazooClient(hosts=cluster.zk_connect, timeout=10.0, logger=_quiet)
        self.zk.start(timeout=10.0)
        self._stop = threading.Event()
        self.spec = self._ensure_spec()

    def _ensure_spec(self) -> elastic.ScaleSpec:
        """The spec, written from what runs now when nobody wrote one yet."""
        running = [s.index for s in self.cluster._services["storage"] if s.running()]
        n = max(running, default=-1) + 1
        initial = elastic.ScaleSpec(n, tuple(i for i in range(n) if i not in running))
        with contextlib.suppress(NodeExistsError):
            self.zk.create(elastic.STORAGE_SCALE, initial.to_json(), makepath=True)
        return self.read() or initial

    def read(self) -> elastic.ScaleSpec | None:
        try:
            data, _ = self.zk.get(elastic.STORAGE_SCALE)
        except NoNodeError:
            return None
        return elastic.ScaleSpec.from_json(data)

    def tick(self) -> list[str]:
        """Apply the spec once; returns what it did."""
        spec = self.read()
        if spec is None:
            return []
        self.spec = spec
        done: list[str] = []
        want = set(spec.running)
        nodes = self.cluster._services["storage"]
        for i in sorted(want):
            if i >= len(nodes) or nodes[i].proc is None:
                add_storage_slot(self.cluster, i)
                self.log(f"storage-{i}: starting (storage scale {len(want)})")
                self.cluster.start_process("storage", i, timeout=self.ready_timeout, wait=False)
                done.append(f"started storage-{i}")
        for svc in list(nodes):
            if svc.index not in want and svc.proc is not None:
                self.log(f"storage-{svc.index}: stopping (storage scale {len(want)})")
                stop_storage(self.cluster, svc.index)
                done.append(f"stopped storage-{svc.index}")
        return done

    @contextlib.contextmanager
    def running(self, interval: float = 0.3) -> Iterator[LocalScaler]:
        """Tick on a thread until the block ends."""

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.tick()
                except Exception as exc:  # noqa: BLE001 - keep applying; say why
                    self.log(f"storage scale not applied: {type(exc).__name__}: {exc}")

        t = threading.Thread(target=loop, name="local-scaler", daemon=True)
        t.start()
        try:
            yield self
        finally:
            self._stop.set()
            t.join(10)

    def close(self) -> None:
        self._stop.set()
        self.zk.stop()
        self.zk.close()
