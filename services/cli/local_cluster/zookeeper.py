"""The local cluster's ZooKeeper: starting its process, and reading who the active controller
is."""

from __future__ import annotations

import json
import time
from pathlib import Path

from services.cli.local_cluster.errors import process_failed
from services.cli.local_cluster.layout import ZOOKEEPER
from services.common.zk.security import NO_SECURITY, ZkSecurity, kazoo_client
from services.common.zk.server import ZooKeeperError, ZooKeeperProcess


def start_zookeeper(zk: ZooKeeperProcess, deadline: float) -> None:
    """Start ``zk`` and wait until it serves, or raise LocalClusterError quoting its log."""
    try:
        zk.start(timeout=max(1.0, deadline - time.monotonic()))
    except ZooKeeperError as exc:
        raise process_failed(f"zookeeper: {exc}", ZOOKEEPER, zk_log_path(zk)) from None


def zk_log_path(zk: ZooKeeperProcess) -> Path:
    return zk.data_dir / "zookeeper.out"


def active_controller_id(
    connect: str, timeout: float, security: ZkSecurity = NO_SECURITY
) -> int | None:
    """``brokerid`` in ZooKeeper's ``/controller``, or None when no controller is active."""
    from kazoo.exceptions import NoNodeError

    zk = kazoo_client(connect, security, timeout=timeout)
    zk.start(timeout)
    try:
        data, _ = zk.get("/controller")
    except NoNodeError:
        return None
    finally:
        zk.stop()
        zk.close()
    return int(json.loads(data)["brokerid"])
