"""An emulated Kubernetes API serving Node objects (kmock's KubernetesEmulator over real HTTP),
run on its own event loop thread so processes and sync tests can use it. No real API server
runs on these machines; this is what the services' zone discovery is tested against."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Mapping

import kmock

ZONE_LABEL = "topology.kubernetes.io/zone"


@contextlib.contextmanager
def emulated_api(node_labels: Mapping[str, Mapping[str, str]]) -> Iterator[str]:
    """Serve one Node per entry of ``node_labels`` (name -> labels); yields the API's URL."""
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    url: list[str] = []

    async def serve() -> None:
        emu = kmock.KubernetesEmulator()
        async with emu, kmock.Server(emu) as srv:
            emu.resources["v1/nodes"] = {}
            for name, labels in node_labels.items():
                emu.objects[kmock.resource("", "v1", "nodes"), None, name] = {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": dict(labels)},
                }
            url.append(str(srv.url).rstrip("/"))
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    if not ready.wait(10) or not url:
        raise RuntimeError("the emulated Kubernetes API did not start")
    try:
        yield url[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
