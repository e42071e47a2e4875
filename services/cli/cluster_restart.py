"""``kafka-py cluster restart --rolling storage``: a rolling restart of a running local cluster.

The cluster runs in another process (``kafka-py cluster up``); this one finds it through the
data dir: ``cluster.json`` (host, ZooKeeper and gateway ports), ``pids.json`` (which storage
nodes exist) and the control channel (``services.cli.cluster_control``) that asks the cluster's
owner to restart one process. Progress goes to stdout, one line per step.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from services.cli.cluster_control import ControlClient, ControlError, Status
from services.cli.common import CliError, UsageError
from services.cli.local_cluster.layout import STATE_FILE
from services.cli.local_cluster.processes import PIDS_FILE
from services.cli.local_cluster.security import zk_tls_of
from services.cli.rolling_restart import (
    ClusterView,
    RollingRestart,
    RollingRestartError,
    TopicPartition,
)
from services.common.zk.security import ZkSecurity

ROLLING_ROLES = ("storage",)


def _read(path: Path) -> dict[str, Any]:
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None
    if not isinstance(body, dict):
        raise CliError(f"{path} is not a kafka-py cluster state file")
    return body


def cluster_addresses(data_dir: Path) -> tuple[str, str, list[int]]:
    """(ZooKeeper connect string, Kafka bootstrap, storage node ids) of the cluster in
    ``data_dir``."""
    state = _read(data_dir / STATE_FILE)
    pids = _read(data_dir / PIDS_FILE)
    try:
        host = str(state["host"])
        zk = f"{host}:{int(state['zookeeper']['port'])}"
        gateways = sorted(state.get("gateway", {}).items(), key=lambda kv: int(kv[0]))
        bootstrap = ",".join(f"{host}:{int(v['port'])}" for _, v in gateways)
    except (KeyError, TypeError, ValueError):
        raise CliError(f"{data_dir / STATE_FILE} is not a kafka-py cluster state file") from None
    storage = sorted(int(name.rpartition("-")[2]) for name in pids if name.startswith("storage-"))
    if not storage or not bootstrap:
        raise CliError(f"the cluster in {data_dir} has no storage node or no gateway")
    return zk, bootstrap, storage


def _elect_preferred(bootstrap: str, partitions: list[TopicPartition], timeout_s: float) -> None:
    """A preferred leader election through a gateway (what kafka-leader-election.sh sends);
    per-partition refusals are left to the caller's wait."""
    from confluent_kafka import ElectionType, KafkaException
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": int(timeout_s * 1000),
            "log_level": 3,  # librdkafka's notices stay off the progress output
        }
    )
    tps = [KafkaTopicPartition(t, p) for t, p in partitions]
    try:
        admin.elect_leaders(ElectionType.PREFERRED, tps).result(timeout=timeout_s + 5)
    except (KafkaException, TimeoutError):
        pass


def run_restart(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    if args.rolling not in ROLLING_ROLES:
        raise UsageError(f"--rolling {args.rolling}: only 'storage' can be restarted")
    for name in ("stop_timeout", "timeout"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    data_dir = Path(args.data_dir).expanduser().resolve()
    client = ControlClient(data_dir)
    try:
        client.check()
    except ControlError as exc:
        raise CliError(str(exc)) from None
    zk_connect, bootstrap, storage = cluster_addresses(data_dir)

    def say(msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {msg}", file=out, flush=True)

    def restart(broker_id: int) -> None:
        name = f"storage-{broker_id}"

        def on_status(status: Status) -> None:
            if status.state == "starting":
                how = f"exit code {status.exit_code}" + (
                    f", {status.detail}" if status.detail else ""
                )
                say(f"{name}: stopped after {status.stop_s}s ({how}); starting")
            elif status.state == "done":
                say(f"{name}: started")

        try:
            client.restart(
                name,
                stop_timeout=args.stop_timeout,
                timeout=args.stop_timeout + args.timeout + 10,
                on_status=on_status,
            )
        except ControlError as exc:
            raise RollingRestartError(str(exc)) from None

    try:
        view = ClusterView(zk_connect, security=ZkSecurity(tls=zk_tls_of(data_dir)))
    except RollingRestartError as exc:
        raise CliError(str(exc)) from None
    try:
        RollingRestart(
            view,
            restart,
            lambda parts: _elect_preferred(bootstrap, parts, 30.0),
            say,
            sync_timeout=args.timeout,
        ).run(storage)
    except RollingRestartError as exc:
        raise CliError(str(exc)) from None
    finally:
        view.close()
    return 0
