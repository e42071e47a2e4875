"""The one emulated Kubernetes API of the test suite: kmock's KubernetesEmulator over real HTTP, on
its own event-loop thread so processes, sync tests and the synchronous official client can all use
it. No real API server runs on these machines; zone discovery and the storage node provisioner are
tested against this.

On top of kmock's in-memory objects (Nodes, Pods, StatefulSets, served by kmock itself) it adds
what kmock leaves to the user: the StatefulSet ``scale`` subresource (a ``Scale`` read from and
merged into the StatefulSet, with ``metadata.resourceVersion`` checked on patch: a stale one is a
409, as on a real API server) and queued faults per (method, path): an HTTP status answered with a
``Status`` body, or ``"hang"`` (no answer before the client's timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import aiohttp.web
import kmock
from kmock._internal.rendering import Request

ZONE_LABEL = "topology.kubernetes.io/zone"
NODES = kmock.resource("", "v1", "nodes")
PODS = kmock.resource("", "v1", "pods")
STATEFULSETS = kmock.resource("apps", "v1", "statefulsets")
MERGE_PATCH = "application/merge-patch+json"

T = TypeVar("T")


class _Emulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    """kmock's emulator plus the scale subresource and injected faults (see the module doc)."""

    faults: dict[tuple[str, str], list[int | str]]
    hang_s: float
    race_next_patch: bool

    async def _handle(self, request: Request) -> aiohttp.web.StreamResponse:
        queued = self.faults.get((_verb(request), request.url.path))
        if queued:
            fault = queued.pop(0)
            if fault == "hang":
                await asyncio.sleep(self.hang_s)
                return _status(504, "Timeout", "injected hang")
            return _status(int(fault), "Injected", f"injected {fault}")
        if request.resource == STATEFULSETS and request.subresource == "scale":
            return await self._scale(request)
        return await super()._handle(request)  # type: ignore[no-any-return]

    async def _scale(self, request: Request) -> aiohttp.web.StreamResponse:
        key = (STATEFULSETS, request.namespace, request.name)
        async with self._lock:
            if key not in self.objects or self.objects[key].deleted:
                return _status(404, "NotFound", f'statefulsets.apps "{request.name}" not found')
            sts = self.objects[key]
            if _verb(request) == "GET":
                return aiohttp.web.json_response(_scale_of(sts.raw))
            if _verb(request) != "PATCH":
                return _status(405, "MethodNotAllowed", "only get and patch are emulated")
            if request.headers.get("Content-Type") != MERGE_PATCH:
                return _status(415, "UnsupportedMediaType", "only merge patches are emulated")
            body = json.loads(request.body)
            version = int(sts.raw["metadata"]["resourceVersion"])
            if self.race_next_patch:  # another writer got there between our read and patch
                self.race_next_patch = False
                version += 1
                sts.patch({"metadata": {"resourceVersion": str(version)}})
            sent = (body.get("metadata") or {}).get("resourceVersion")
            if sent is not None and sent != str(version):
                return _status(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on statefulsets.apps "{request.name}": the '
                    "object has been modified; please apply your changes to the latest version "
                    "and try again",
                )
            sts.patch(
                {
                    "spec": {"replicas": int(body["spec"]["replicas"])},
                    "metadata": {"resourceVersion": str(version + 1)},
                }
            )
            return aiohttp.web.json_response(_scale_of(sts.raw))


def _verb(request: Request) -> str:
    return str(request.method.value).upper()


def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
    body = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure"}
    body |= {"code": code, "reason": reason, "message": message}
    return aiohttp.web.json_response(body, status=code)


def _scale_of(sts: Mapping[str, Any]) -> dict[str, Any]:
    meta = sts["metadata"]
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "resourceVersion": meta["resourceVersion"],
        },
        "spec": {"replicas": sts["spec"]["replicas"]},
        "status": {"replicas": sts["spec"]["replicas"]},
    }


class KubeApi:
    """The emulated API server (a context manager): ``url``, objects added with ``add_*``,
    ``fail`` to queue faults and ``requests`` to see what clients sent."""

    def __init__(self, hang_s: float = 0.6, host: str = "127.0.0.1") -> None:
        self.host = host
        self.emu = _Emulator()
        self.emu.faults = {}
        self.emu.hang_s = hang_s
        self.emu.race_next_patch = False
        self.loop = asyncio.new_event_loop()
        self.url = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self.loop.run_until_complete, args=(self._serve(),))
        self._thread.daemon = True

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with self.emu, kmock.Server(self.emu, host=self.host) as srv:
            self.emu.resources["v1/nodes"] = {}
            self.emu.resources["v1/pods"] = {}
            self.url = str(srv.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> KubeApi:
        self._thread.start()
        if not self._ready.wait(10) or not self.url:
            raise RuntimeError("the emulated Kubernetes API did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self.loop.close()

    def _on_loop(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def add_node(self, name: str, labels: Mapping[str, str]) -> None:
        obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        obj["metadata"]["labels"] = dict(labels)  # type: ignore[index]
        self._on_loop(lambda: self.emu.objects.__setitem__((NODES, None, name), obj))

    def add_pod(
        self,
        namespace: str,
        name: str,
        node: str | None,
        ready: bool = True,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": {"nodeName": node, "containers": [{"name": "main"}]},
            "status": {"conditions": [{"type": "Ready", "status": str(ready)}]},
        }
        self._on_loop(lambda: self.emu.objects.__setitem__((PODS, namespace, name), obj))

    def delete_pod(self, namespace: str, name: str) -> None:
        self._on_loop(lambda: self.emu.objects[PODS, namespace, name].delete())

    def add_statefulset(self, namespace: str, name: str, replicas: int) -> None:
        obj = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
            "spec": {"replicas": replicas},
        }
        self._on_loop(lambda: self.emu.objects.__setitem__((STATEFULSETS, namespace, name), obj))

    def statefulset(self, namespace: str, name: str) -> dict[str, Any]:
        return self._on_loop(lambda: dict(self.emu.objects[STATEFULSETS, namespace, name].raw))

    def set_replicas(self, namespace: str, name: str, replicas: int) -> None:
        key = (STATEFULSETS, namespace, name)
        self._on_loop(lambda: self.emu.objects[key].patch({"spec": {"replicas": replicas}}))

    def fail(self, method: str, path: str, *faults: int | str) -> None:
        """Answer the next requests to ``method path`` with these statuses (or ``"hang"``)."""
        self._on_loop(lambda: self.emu.faults.setdefault((method, path), []).extend(faults))

    def race_next_patch(self) -> None:
        """Another writer changes the StatefulSet between the next scale read and patch."""
        self._on_loop(lambda: setattr(self.emu, "race_next_patch", True))

    @property
    def requests(self) -> list[dict[str, Any]]:
        """What clients sent: method, path, query, content type and JSON body."""

        def snapshot() -> list[dict[str, Any]]:
            return [
                {
                    "method": _verb(r),
                    "path": r.url.path,
                    "query": dict(r.url.query),
                    "content_type": r.headers.get("Content-Type"),
                    "body": json.loads(r.body) if r.body else None,
                }
                for r in self.emu
            ]

        return self._on_loop(snapshot)


@contextlib.contextmanager
def emulated_api(
    node_labels: Mapping[str, Mapping[str, str]], host: str = "127.0.0.1"
) -> Iterator[str]:
    """Serve one Node per entry of ``node_labels`` (name -> labels) on ``host``; yields the
    API's URL (with the port; the host part is ``host``)."""
    with KubeApi(host=host) as api:
        for name, labels in node_labels.items():
            api.add_node(name, labels)
        yield api.url
