"""The StatefulSet controller's part for the storage StatefulSet, done by kube-sim: it watches
``spec.replicas`` of the StatefulSet in the emulated Kubernetes API (kmock, which stands in for a
cluster's API server: the controller's Kubernetes provisioner patches ``statefulsets/scale``
there through the official client) and makes the pods follow, as Kubernetes would with
``podManagementPolicy: Parallel`` and ``whenScaled: Retain``:

- grow: each missing ordinal is started with its own volume (kept from an earlier life if any)
  and registered as a Pod of the emulated API (node, labels, Ready once its readinessProbe
  passes);
- shrink: the highest ordinals are deleted (preStop hook, SIGTERM, grace period), their volumes
  kept. Kubernetes does not check anything before deleting; ``on_delete`` lets a test record
  what the pod still hosted at that moment (the controller must have drained it first).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kube_api import KubeApi
from podsim import SimPod, Simulation


@dataclass
class Event:
    action: str  # "start" | "ready" | "delete"
    pod: str
    at: float = field(default_factory=time.monotonic)
    detail: str = ""


class StatefulSetReconciler:
    def __init__(
        self,
        sim: Simulation,
        api: KubeApi,
        name: str,
        *,
        on_delete: Callable[[SimPod], str] | None = None,
        interval: float = 0.5,
        ready_timeout: float = 180,
    ) -> None:
        self.sim = sim
        self.api = api
        self.name = name
        self.on_delete = on_delete
        self.interval = interval
        self.ready_timeout = ready_timeout
        self.events: list[Event] = []
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"reconcile-{name}", daemon=True)

    def pods(self) -> list[SimPod]:
        """The StatefulSet's pods the simulation runs now, by ordinal."""
        return sorted(
            (
                p
                for p in self.sim.pods + self.sim.spare
                if p.running and p.workload["metadata"]["name"] == self.name
            ),
            key=lambda p: p.ordinal,
        )

    def register(self, pod: SimPod, ready: bool) -> None:
        labels = self.sim.labels(pod)
        self.api.add_pod(self.sim.namespace, pod.name, pod.node, ready=ready, labels=labels)

    def start(self) -> None:
        for pod in self.pods():
            self.register(pod, ready=True)
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(self.ready_timeout + 60)

    def _run(self) -> None:
        try:
            while not self._halt.is_set():
                self.reconcile_once()
                self._halt.wait(self.interval)
        except BaseException as exc:  # noqa: BLE001 - reported to the test by ``error``
            self.error = exc

    def reconcile_once(self) -> None:
        want = int(self.api.statefulset(self.sim.namespace, self.name)["spec"]["replicas"])
        have = self.pods()
        if len(have) < want:  # Parallel: every missing ordinal at once
            new = [self.sim.ordinal(self.name, i) for i in range(len(have), want)]
            for pod in new:
                self.sim.start(pod)
                self.register(pod, ready=False)
                self.events.append(Event("start", pod.name))
            self.sim.wait_ready(new, self.ready_timeout)
            for pod in new:
                self.register(pod, ready=True)
                self.events.append(Event("ready", pod.name))
        for pod in reversed(have[want:]):  # the highest ordinals first
            detail = self.on_delete(pod) if self.on_delete else ""
            self.events.append(Event("delete", pod.name, detail=detail))
            self.sim.delete(pod)
            self.api.delete_pod(self.sim.namespace, pod.name)
