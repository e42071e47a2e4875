"""Helpers (no tests) for the controller integration tests: controller processes and a fake
storage node (a real grpc.aio Storage servicer registered in /brokers/ids) that records orders."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from services.common.errors import ErrorCode
from services.common.rpc.kafkapy.v1 import controller_pb2_grpc, storage_pb2, storage_pb2_grpc
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.common.zk.server import free_port

REPO = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT_MS = 2000
#: how long a test waits for controller processes it just started to elect one: their start
#: (imports, first ZooKeeper session) takes seconds on a loaded machine, as LocalCluster allows
STARTUP_S = 60.0


async def wait_for(
    pred: Callable[[], Any], within: float = 5.0, interval: float = 0.02, what: str = "condition"
) -> Any:
    """Poll ``pred`` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + within
    while True:
        value = pred()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(interval)


class ControllerProc:
    """``python -m services.controller`` as a child process with JSON logs in a file."""

    def __init__(
        self, controller_id: int, zk_connect: str, log_dir: Path, extra: Sequence[str] = ()
    ) -> None:
        self.id = controller_id
        self.zk_connect = zk_connect
        self.log_path = log_dir / f"controller-{controller_id}.log"
        self.admin_port = free_port()
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "services.controller",
            "--controller.id",
            str(self.id),
            "--zookeeper.connect",
            self.zk_connect,
            "--zookeeper.session.timeout.ms",
            str(SESSION_TIMEOUT_MS),
            "--admin.port",
            str(self.admin_port),
            "--log.format",
            "json",
            *self.extra,
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, cwd=REPO, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env={**os.environ}
            )

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self, *, signalled: bool = False) -> int | None:
        """SIGTERM (once: a second one during interpreter exit would kill it) and wait."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        if not signalled:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self) -> list[dict[str, Any]]:
        out = []
        if not self.log_path.exists():
            return out
        for line in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"event": line})
        return out

    def logged(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.logs() if e.get("event") == event]


def stop_all(procs: Sequence[ControllerProc]) -> list[int | None]:
    """SIGTERM every running controller at once, then collect exit codes."""
    for p in procs:
        if p.running:
            p.signal(signal.SIGCONT)
            p.signal(signal.SIGTERM)
    return [p.stop(signalled=True) for p in procs]


class FakeStorage(storage_pb2_grpc.StorageServicer):
    """A storage node that records controller orders and fences stale controller epochs."""

    def __init__(self, broker_id: int, zk_connect: str, rack: str | None = None) -> None:
        self.broker_id = broker_id
        self.zk_connect = zk_connect
        self.rack = rack
        self.updates: list[storage_pb2.UpdatePartitionsRequest] = []
        self.stops: list[storage_pb2.StopReplicasRequest] = []
        self.max_controller_epoch = 0
        self.fail_stop_replicas = False
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._zk: AsyncZk | None = None

    # ---- Storage RPCs ---------------------------------------------------------------------
    async def UpdatePartitions(
        self, request: storage_pb2.UpdatePartitionsRequest, context: Any
    ) -> storage_pb2.UpdatePartitionsResponse:
        if request.controller_epoch < self.max_controller_epoch:
            return storage_pb2.UpdatePartitionsResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        self.max_controller_epoch = request.controller_epoch
        self.updates.append(request)
        return storage_pb2.UpdatePartitionsResponse()

    async def StopReplicas(
        self, request: storage_pb2.StopReplicasRequest, context: Any
    ) -> storage_pb2.StopReplicasResponse:
        if request.controller_epoch < self.max_controller_epoch:
            return storage_pb2.StopReplicasResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        self.stops.append(request)
        if self.fail_stop_replicas:
            return storage_pb2.StopReplicasResponse(
                partitions=[
                    storage_pb2.PartitionError(
                        topic=p.topic,
                        partition=p.partition,
                        error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                    )
                    for p in request.partitions
                ]
            )
        return storage_pb2.StopReplicasResponse()

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> FakeStorage:
        self._server = grpc.aio.server()
        storage_pb2_grpc.add_StorageServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        await self.register()
        return self

    async def register(self) -> None:
        self._zk = AsyncZk(self.zk_connect, 4000)
        await self._zk.start()
        reg = layout.BrokerRegistration(self.broker_id, "127.0.0.1", self.port, self.rack)
        await self._zk.create(
            layout.broker_path(self.broker_id), reg.to_json(), ephemeral=True, makepath=True
        )

    async def deregister(self) -> None:
        """The node dies as far as ZooKeeper is concerned (its session closes)."""
        if self._zk is not None:
            await self._zk.stop()
            self._zk = None

    async def stop(self) -> None:
        await self.deregister()
        if self._server is not None:
            await self._server.stop(None)

    # ---- inspection -----------------------------------------------------------------------
    def states(self, topic: str) -> list[tuple[int, storage_pb2.PartitionState]]:
        """(controller epoch, partition state) of every order received for ``topic``."""
        return [
            (u.controller_epoch, p) for u in self.updates for p in u.partitions if p.topic == topic
        ]

    def latest(self, topic: str, partition: int) -> storage_pb2.PartitionState | None:
        found = [p for _, p in self.states(topic) if p.partition == partition]
        return found[-1] if found else None


async def controller_stub(
    zk: AsyncZk, controller_id: int | None = None
) -> tuple[controller_pb2_grpc.ControllerStub, grpc.aio.Channel]:
    """A stub to ``controller_id``, or to the active controller."""
    if controller_id is None:
        data, _ = await zk.get(layout.CONTROLLER)
        controller_id = int(layout.loads(data)["brokerid"])
    data, _ = await zk.get(layout.controller_endpoint_path(controller_id))
    ep = layout.Endpoint.from_json(controller_id, data)
    channel = grpc.aio.insecure_channel(ep.address)
    return controller_pb2_grpc.ControllerStub(channel), channel


async def active_controller(zk: AsyncZk) -> tuple[int, int] | None:
    """(controller id, epoch) of the active controller, or None."""
    got = await zk.get_or_none(layout.CONTROLLER)
    if got is None:
        return None
    epoch = await zk.get_or_none(layout.CONTROLLER_EPOCH)
    return int(layout.loads(got[0])["brokerid"]), int(epoch[0]) if epoch else 0
