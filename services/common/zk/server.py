"""A local ZooKeeper server process (Debian's ``zookeeper`` package), for local mode and tests."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ZK_CLASSPATH = [
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-simple.jar",
    "/usr/share/java/netty-handler.jar",
    "/usr/share/java/netty-transport.jar",
    "/usr/share/java/netty-common.jar",
    "/usr/share/java/netty-buffer.jar",
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport-native-epoll.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
    "/usr/share/java/commons-cli.jar",
]
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"


@dataclass(frozen=True, slots=True)
class ServerTls:
    """ZooKeeper on ``secureClientPort`` only (Netty), with PEM stores: ``keystore`` holds the
    server's certificate chain and its private key (unencrypted), ``truststore`` the CA(s)
    client certificates must chain to (``ssl.clientAuth=need``). ``client_keystore`` (same
    form) is what the readiness probe presents."""

    keystore: Path
    truststore: Path
    client_keystore: Path

    def probe_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False  # a probe of our own child on loopback
        ctx.load_verify_locations(self.truststore)
        ctx.load_cert_chain(self.client_keystore)
        return ctx


def ruok(host: str, port: int, timeout: float = 1.0, tls: ssl.SSLContext | None = None) -> bool:
    """True when the server answers the ``srvr`` four-letter word (over TLS with ``tls``)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            s = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
            s.sendall(b"srvr")
            return s.recv(64).startswith(b"Zookeeper version")
    except OSError:  # ssl.SSLError included
        return False


class ZooKeeperProcess:
    """Runs one standalone ZooKeeper on ``host:port`` with its data in ``data_dir``; with
    ``tls``, ``port`` is its ``secureClientPort`` and there is no plaintext port."""

    def __init__(
        self,
        data_dir: Path,
        port: int = 2181,
        host: str = "127.0.0.1",
        tls: ServerTls | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            f"dataDir={self.data_dir}\n" + self._listener_config() + "tickTime=500\n"
            "minSessionTimeout=1000\n"
            "maxSessionTimeout=60000\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=srvr,ruok,stat,mntr\n"
            "autopurge.snapRetainCount=3\n"
            "autopurge.purgeInterval=1\n"
        )
        return cfg

    def _listener_config(self) -> str:
        if self.tls is None:
            return f"clientPort={self.port}\nclientPortAddress={self.host}\n"
        # ZooKeeper 3.8 reads PEM stores itself (X509Util's PEMFileLoader); unknown zoo.cfg keys
        # become zookeeper.* system properties, which is where Netty and X509Util look
        return (
            f"secureClientPort={self.port}\n"
            f"secureClientPortAddress={self.host}\n"
            f"serverCnxnFactory={NETTY_FACTORY}\n"
            f"ssl.keyStore.location={self.tls.keystore}\n"
            "ssl.keyStore.type=PEM\n"
            f"ssl.trustStore.location={self.tls.truststore}\n"
            "ssl.trustStore.type=PEM\n"
            "ssl.clientAuth=need\n"
        )

    def _answers(self, timeout: float) -> bool:
        ctx = self.tls.probe_context() if self.tls is not None else None
        return ruok(self.host, self.port, timeout, ctx)

    def start(self, timeout: float = 30.0) -> None:
        missing = [p for p in ZK_CLASSPATH[:2] if not os.path.exists(p)]
        if missing:
            raise ZooKeeperError(
                "ZooKeeper is not installed (Debian package 'zookeeper'): run make install"
            )
        if ruok(self.host, self.port, 0.3):  # plaintext: anything answering is a clash
            raise ZooKeeperError(f"something already listens on {self.connect}")
        cfg = self._write_config()
        classpath = ":".join(p for p in ZK_CLASSPATH if os.path.exists(p))
        log = open(self.data_dir / "zookeeper.out", "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [
                "java",
                "-Xms64m",
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-cp",
                classpath,
                MAIN_CLASS,
                str(cfg),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ZooKeeperError(
                    f"ZooKeeper exited with {self.proc.returncode}; see {self.data_dir}/zookeeper.out"
                )
            if self._answers(0.3):
                return
            time.sleep(0.05)
        self.stop()
        raise ZooKeeperError(f"ZooKeeper did not start on {self.connect} within {timeout:.0f}s")

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
