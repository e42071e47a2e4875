"""The web console next to a local cluster: ``kafka-py cluster up`` starts it after the cluster
is ready and stops it first (it is a client of the cluster, not part of it)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

DEFAULT_PORT = 8080


def free_port(host: str, wanted: int) -> int:
    """``wanted`` when it can be bound on ``host``, else any free port."""
    for port in (wanted, 0) if wanted else (0,):
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise OSError(f"no free port on {host}")


class LocalConsole:
    def __init__(
        self,
        bootstrap: str,
        zk_connect: str,
        host: str,
        port: int,
        log: Path,
        zk_flags: Sequence[str] = (),
    ) -> None:
        self.port = free_port(host, port)
        self.url = f"http://{host}:{self.port}/"
        self._log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.console",
                "--bootstrap.servers",
                bootstrap,
                "--zookeeper.connect",
                zk_connect,
                "--console.host",
                host,
                "--console.port",
                str(self.port),
                *zk_flags,  # ZooKeeper TLS of the cluster
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._proc.poll() is None:
            try:
                with urllib.request.urlopen(self.url + "api/info", timeout=2) as answer:
                    if answer.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        return False

    def stop(self, timeout: float = 10.0) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()
