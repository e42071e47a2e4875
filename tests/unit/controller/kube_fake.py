"""A purpose-built HTTP fake of exactly the Kubernetes API endpoints the storage provisioner uses
(the StatefulSet scale subresource, pods by label, nodes); not a Kubernetes API server. Faults
are queued per (method, path): an HTTP status with a Status body, or ``"hang"`` (no answer
before the client's timeout)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class KubeFake:
    def __init__(self, namespace: str, statefulset: str, replicas: int) -> None:
        self.namespace = namespace
        self.statefulset = statefulset
        self.replicas = replicas
        self.resource_version = 1
        self.node_labels: dict[str, dict[str, str]] = {}
        self.pods: list[dict[str, Any]] = []
        self.faults: dict[tuple[str, str], list[int | str]] = {}
        self.requests: list[dict[str, Any]] = []
        self.hang_s = 0.6
        self.race_next_patch = False  # another writer changes the scale first
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def scale_path(self) -> str:
        return f"/apis/apps/v1/namespaces/{self.namespace}/statefulsets/{self.statefulset}/scale"

    def __enter__(self) -> KubeFake:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add_pod(self, ordinal: int, node: str, zone: str | None, ready: bool = True) -> None:
        labels = {"topology.kubernetes.io/zone": zone} if zone else {}
        self.node_labels[node] = {"kubernetes.io/hostname": node, **labels}
        self.pods.append(
            {
                "metadata": {"name": f"{self.statefulset}-{ordinal}", "labels": {"app": "storage"}},
                "spec": {"nodeName": node},
                "status": {"conditions": [{"type": "Ready", "status": str(ready)}]},
            }
        )

    def fail(self, method: str, path: str, *statuses: int | str) -> None:
        self.faults.setdefault((method, path), []).extend(statuses)

    def _scale(self) -> dict[str, Any]:
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {
                "name": self.statefulset,
                "namespace": self.namespace,
                "resourceVersion": str(self.resource_version),
            },
            "spec": {"replicas": self.replicas},
            "status": {"replicas": self.replicas},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, message: str) -> None:
                self._send(
                    code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "message": message,
                        "code": code,
                    },
                )

            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                fake.requests.append(
                    {
                        "method": method,
                        "path": url.path,
                        "query": parse_qs(url.query),
                        "content_type": self.headers.get("Content-Type"),
                        "authorization": self.headers.get("Authorization"),
                        "body": json.loads(raw) if raw else None,
                    }
                )
                queued = fake.faults.get((method, url.path))
                if queued:
                    fault = queued.pop(0)
                    if fault == "hang":
                        time.sleep(fake.hang_s)
                        return
                    self._status(int(fault), f"injected {fault}")
                    return
                if url.path == fake.scale_path:
                    if method == "GET":
                        self._send(200, fake._scale())
                        return
                    if self.headers.get("Content-Type") != "application/merge-patch+json":
                        self._status(415, "unsupported patch type")
                        return
                    body = json.loads(raw)
                    with fake.lock:
                        if fake.race_next_patch:
                            fake.race_next_patch = False
                            fake.resource_version += 1
                        rv = body.get("metadata", {}).get("resourceVersion")
                        if rv is not None and rv != str(fake.resource_version):
                            self._status(
                                409, "Operation cannot be fulfilled: the object has been modified"
                            )
                            return
                        fake.replicas = int(body["spec"]["replicas"])
                        fake.resource_version += 1
                    self._send(200, fake._scale())
                    return
                if url.path == f"/api/v1/namespaces/{fake.namespace}/pods" and method == "GET":
                    self._send(200, {"kind": "PodList", "items": fake.pods})
                    return
                if url.path.startswith("/api/v1/nodes/") and method == "GET":
                    name = url.path.rsplit("/", 1)[1]
                    if name not in fake.node_labels:
                        self._status(404, f'nodes "{name}" not found')
                        return
                    self._send(
                        200,
                        {
                            "kind": "Node",
                            "metadata": {"name": name, "labels": fake.node_labels[name]},
                        },
                    )
                    return
                self._status(404, "the server could not find the requested resource")

            def do_GET(self) -> None:  # noqa: N802
                self._handle("GET")

            def do_PATCH(self) -> None:  # noqa: N802
                self._handle("PATCH")

        return Handler
