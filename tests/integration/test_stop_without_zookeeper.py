"""SIGTERM stops every service promptly while it is still trying to reach a ZooKeeper that
accepts connections but never answers (as a SIGSTOPped one does): the start is cancelled, the
process exits 0 (issue 12 §2: shutdown must be bounded whatever ZooKeeper does)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.zk.server import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


class SilentZooKeeper:
    """Accepts TCP connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()
        for c in self._conns:
            c.close()


@pytest.fixture
def silent_zk() -> Iterator[SilentZooKeeper]:
    zk = SilentZooKeeper()
    yield zk
    zk.close()


def flags(role: str, tmp_path: Path) -> list[str]:
    listen = ["--listeners", "127.0.0.1:0"]
    return {
        "controller": ["--controller.id", "0", *listen],
        "storage": ["--broker.id", "0", *listen, "--log.dirs", str(tmp_path / "log")],
        "group_coordinator": ["--node.id", "0", *listen],
        "gateway": ["--node.id", "0", *listen],
    }[role]


@pytest.mark.parametrize("role", ["controller", "storage", "group_coordinator", "gateway"])
def test_sigterm_while_connecting_to_zookeeper(
    role: str, silent_zk: SilentZooKeeper, tmp_path: Path
) -> None:
    out = tmp_path / "out.log"
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                f"services.{role}",
                *flags(role, tmp_path),
                "--zookeeper.connect",
                silent_zk.address,
                "--zookeeper.session.timeout.ms",
                "18000",
                "--admin.port",
                str(free_port()),
            ],  # fmt: skip
            cwd=REPO,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        assert silent_zk.accepted.wait(60), out.read_text()  # it is waiting for an answer
        time.sleep(0.5)
        stopped = time.monotonic()
        proc.terminate()
        code = proc.wait(30)
        took = time.monotonic() - stopped
        assert code == 0, out.read_text()
        # kazoo alone waits 15 s for the connection (and up to 18 s more to close it)
        assert took < 10.0, f"{took:.1f}s\n{out.read_text()}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
