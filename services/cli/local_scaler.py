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

from kazoo.exceptions import NodeExistsError, NoNodeError

from services.cli.local_cluster import LocalCluster
from services.common.zk import elastic
from services.common.zk.security import kazoo_client

Log = Callable[[str], None]

_quiet = logging.getLogger("kafka-py.local-scaler.kazoo")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class LocalScaler:
    def __init__(self, cluster: LocalCluster, log: Log, *, ready_timeout: float = 60.0) -> None:
        self.cluster = cluster
        self.log = log
        self.ready_timeout = ready_timeout
        self.zk = kazoo_client(cluster.zk_connect, cluster.zk_security, timeout=10.0, logger=_quiet)
        self.zk.start(timeout=10.0)
        self._stop = threading.Event()
        self.spec = self._ensure_spec()

    def _ensure_spec(self) -> elastic.ScaleSpec:
        """The spec, written from the cluster's storage slots when nobody wrote one yet.

        Every slot counts, running or not: a node that died a moment ago is the supervisor's
        to restart, not a scale-down (a StatefulSet's replicas do not shrink when a pod dies).
        """
        slots = [p.index for p in self.cluster.processes() if p.role == "storage"]
        initial = elastic.ScaleSpec(max(slots, default=-1) + 1, ())
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
        slots = sum(1 for p in self.cluster.processes() if p.role == "storage")
        for _ in range(slots, max(want, default=-1) + 1):
            self.cluster.add_storage_slot()
        storage = {p.index: p for p in self.cluster.processes() if p.role == "storage"}
        for i in sorted(want):
            if storage[i].pid is None:
                self.log(f"storage-{i}: starting (storage scale {len(want)})")
                self.cluster.start_process("storage", i, timeout=self.ready_timeout, wait=False)
                done.append(f"started storage-{i}")
        for i, p in sorted(storage.items()):
            if i not in want and p.pid is not None:
                self.log(f"storage-{i}: stopping (storage scale {len(want)})")
                self.cluster.retire_process("storage", i)
                done.append(f"stopped storage-{i}")
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
