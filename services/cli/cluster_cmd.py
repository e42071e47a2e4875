"""``kafka-py cluster up``: a local cluster in the foreground until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from services.cli import elastic_cmd
from services.cli.cluster_control import ControlServer
from services.cli.common import CliError, UsageError
from services.cli.console_process import DEFAULT_PORT as DEFAULT_CONSOLE_PORT
from services.cli.console_process import LocalConsole
from services.cli.local_cluster import (
    LocalCluster,
    LocalClusterError,
    LocalClusterInterrupted,
    ProcessInfo,
)
from services.cli.local_cluster.prometheus import PrometheusOptions
from services.cli.local_scaler import LocalScaler
from services.cli.supervisor import Supervisor

DEFAULT_DATA_DIR = "./.kafka-py-data"
TICK_S = 0.5


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    cluster = sub.add_parser(
        "cluster", help="run a local cluster", description="Run a local kafka-py cluster."
    )
    ops = cluster.add_subparsers(dest="cluster_op", metavar="{up,restart,decommission,autoscaler}")
    ops.required = True
    p = ops.add_parser(
        "up",
        help="start ZooKeeper and every service; Ctrl-C stops them",
        description="Start a local cluster in the foreground; Ctrl-C or SIGTERM "
        "stops every process.",
    )
    p.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help=f"where data and logs live (default {DEFAULT_DATA_DIR})",
    )
    p.add_argument(
        "--port", type=int, default=9092, help="Kafka port of the first gateway (0 = any)"
    )
    p.add_argument("--zk-port", type=int, default=2181, help="ZooKeeper client port (0 = any)")
    p.add_argument("--host", default="127.0.0.1", help="address every process binds")
    p.add_argument("--storage-nodes", type=int, default=3)
    p.add_argument("--controllers", type=int, default=2)
    p.add_argument("--gateways", type=int, default=1)
    p.add_argument(
        "--group-coordinators",
        type=int,
        default=2,
        help="group coordinator processes (consumer groups; 0 = none)",
    )
    p.add_argument(
        "--transaction-coordinators",
        type=int,
        default=1,
        help="transaction coordinator processes (transactional producers; 0 = none)",
    )
    p.add_argument(
        "--zones",
        default="zone-a,zone-b,zone-c",
        help="comma-separated zones given in turn to storage nodes, group coordinators and "
        "gateways",
    )
    p.add_argument("--num-partitions", type=int, help="controllers' num.partitions (default 1)")
    p.add_argument(
        "--default-replication-factor",
        type=int,
        help="controllers' default.replication.factor (default 1)",
    )
    p.add_argument(
        "--autoscale",
        action="store_true",
        help="let the controller add and remove storage nodes (kafkapy.autoscaler.enable); "
        "decommission and rebalancing work without it",
    )
    p.add_argument(
        "--secure",
        action="store_true",
        help="mutual TLS between the services (a CA and certificates made in <data-dir>/certs "
        "by 'certs init') and ZooKeeper digest auth with znode ACLs; default plaintext",
    )
    p.add_argument(
        "--zookeeper-tls",
        action="store_true",
        help="ZooKeeper on a TLS-only port (secureClientPort, client certificates required) and "
        "every service connecting with Kafka's zookeeper.ssl.* settings (a CA and certificates "
        "made in <data-dir>/certs); default plaintext",
    )
    p.add_argument(
        "--prometheus",
        action="store_true",
        help="also run Debian's prometheus, scraping every service (file-based discovery "
        "kept in step with the processes) and evaluating the alert rules",
    )
    p.add_argument(
        "--prometheus-port", type=int, default=9090, help="its HTTP port (0 = any free port)"
    )
    p.add_argument(
        "--scrape-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how often Prometheus scrapes each service (default 5)",
    )
    p.add_argument(
        "--evaluation-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how often Prometheus evaluates the alert rules (default 5)",
    )
    p.add_argument(
        "--rules-file",
        metavar="FILE",
        help="alert rules to load (default deploy/prometheus/kafka-py-rules.yml)",
    )
    p.add_argument(
        "--console-port",
        type=int,
        default=DEFAULT_CONSOLE_PORT,
        help=f"port of the web console (default {DEFAULT_CONSOLE_PORT}, any free one when busy)",
    )
    p.add_argument("--no-console", action="store_true", help="do not start the web console")
    p.add_argument("--start-timeout", type=float, default=60.0, metavar="SECONDS")
    p.add_argument(
        "--max-restarts",
        type=int,
        default=5,
        help="restarts allowed per process within 10 minutes (0 = never restart)",
    )
    elastic_cmd.add_parsers(ops)

    r = ops.add_parser(
        "restart",
        help="restart the storage nodes of a running local cluster one at a time",
        description="Rolling restart of a local cluster started by 'kafka-py cluster up': one "
        "storage node at a time, a controlled shutdown (leadership moves away first), a start "
        "with the same data dir, then a wait until no partition is under-replicated and the "
        "node leads its preferred partitions again.",
    )
    r.add_argument(
        "--rolling",
        required=True,
        metavar="storage",
        help="what to restart (only 'storage' is supported)",
    )
    r.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help=f"the running cluster's data dir (default {DEFAULT_DATA_DIR})",
    )
    r.add_argument(
        "--stop-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long a node may take to stop before it is killed (default 120)",
    )
    r.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait per node for its start, full ISRs and its preferred "
        "leadership (default 300)",
    )


def process_table(procs: list[ProcessInfo], host: str) -> list[str]:
    """One aligned line per process for the ready banner."""
    rows: list[tuple[str, ...]] = []
    for p in procs:
        kind = {
            "zookeeper": "zookeeper",
            "gateway": "kafka",
            "storage": "grpc",
            "controller": "grpc",
            "group_coordinator": "grpc",
            "transaction_coordinator": "grpc",
        }.get(p.role, p.role)
        admin = f"admin http://{host}:{p.admin_port}" if p.admin_port else ""
        rows.append(
            (
                p.name,
                f"pid {p.pid}",
                f"{kind} {host}:{p.port}",
                admin,
                p.zone or "",
                f"log {p.log_path}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))] if rows else []
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]


def run_up(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    for name in ("storage_nodes", "controllers", "gateways"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("group_coordinators", "transaction_coordinators"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 0")
    for name in ("port", "zk_port"):
        if not 0 <= getattr(args, name) <= 65535:
            raise UsageError(
                f"--{name.replace('_', '-')} must be a port number (0 = any free port)"
            )
    zones = tuple(z.strip() for z in args.zones.split(",") if z.strip())
    if not zones:
        raise UsageError("--zones needs at least one zone")
    data_dir = Path(args.data_dir).expanduser().resolve()
    # the controller's node provisioner is this process (LocalScaler applies its scale spec)
    controller_flags: list[str] = ["--kafkapy.autoscaler.provisioner", "local"]
    if args.autoscale:
        controller_flags += ["--kafkapy.autoscaler.enable", "true"]
    for flag, value in (
        ("num.partitions", args.num_partitions),
        ("default.replication.factor", args.default_replication_factor),
    ):
        if value is not None:
            if value < 1:
                raise UsageError(f"--{flag.replace('.', '-')} must be at least 1")
            controller_flags += [f"--{flag}", str(value)]

    prometheus = None
    if args.prometheus:
        if not 0 <= args.prometheus_port <= 65535:
            raise UsageError("--prometheus-port must be a port number (0 = any free port)")
        for name in ("scrape_interval", "evaluation_interval"):
            if getattr(args, name) < 0.001:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 0.001 s")
        prometheus = PrometheusOptions(
            port=args.prometheus_port,
            scrape_interval_s=args.scrape_interval,
            evaluation_interval_s=args.evaluation_interval,
            rules=Path(args.rules_file).expanduser() if args.rules_file else None,
        )

    def say(msg: str) -> None:
        print(f"kafka-py: {time.strftime('%H:%M:%S')} {msg}", file=err, flush=True)

    cluster = LocalCluster(
        data_dir,
        gateways=args.gateways,
        storage_nodes=args.storage_nodes,
        controllers=args.controllers,
        group_coordinators=args.group_coordinators,
        transaction_coordinators=args.transaction_coordinators,
        zones=zones,
        gateway_port=args.port,
        zk_port=args.zk_port,
        host=args.host,
        extra={"controller": controller_flags},
        secure=args.secure,
        zookeeper_tls=args.zookeeper_tls,
        prometheus=prometheus,
    )
    stopping = False
    console: LocalConsole | None = None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            cluster.hurry()  # a second Ctrl-C: SIGKILL what is left
            return
        stopping = True
        cluster.interrupt()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    say(
        f"starting ZooKeeper, {args.controllers} controller(s), {args.storage_nodes} storage "
        f"node(s), {args.group_coordinators} group coordinator(s), "
        f"{args.transaction_coordinators} transaction coordinator(s), {args.gateways} gateway(s); "
        f"data dir {data_dir}"
    )
    try:
        try:
            cluster.start(timeout=args.start_timeout)
        except LocalClusterInterrupted:
            say("start-up interrupted; everything is stopped")
            return 0
        except LocalClusterError as exc:
            raise CliError(exc.one_line()) from None
        print(f"kafka-py cluster ready: bootstrap {cluster.bootstrap}", file=out)
        print(f"data dir: {data_dir}", file=out)
        print(f"zookeeper: {cluster.zk_connect}", file=out)
        if cluster.security is not None:
            print(f"internal mTLS certificates: {cluster.security.certs_dir}", file=out)
        if cluster.zk_tls is not None:
            print(f"zookeeper TLS certificates: {cluster.zk_tls.certs_dir}", file=out)
        if cluster.prometheus_url:
            print(f"prometheus: {cluster.prometheus_url}", file=out)
        print("processes:", file=out)
        for line in process_table(cluster.processes(), args.host):
            print(line, file=out)
        if not args.no_console:
            console = LocalConsole(
                cluster.bootstrap,
                cluster.zk_connect,
                args.host,
                args.console_port,
                cluster.logs_dir / "console.log",
                cluster.zk_tls.flags() if cluster.zk_tls is not None else (),
            )
            ready = console.wait_ready(args.start_timeout)
            state = "" if ready else f" (not answering yet: see {cluster.logs_dir}/console.log)"
            print(f"console: {console.url}{state}", file=out)
        print("Press Ctrl-C to stop.", file=out, flush=True)
        supervisor = Supervisor(
            cluster, say, max_restarts=args.max_restarts, ready_timeout=args.start_timeout
        )
        control = ControlServer(cluster, say)  # `kafka-py cluster restart` from elsewhere
        scaler = LocalScaler(cluster, say, ready_timeout=args.start_timeout)
        while not stopping:
            time.sleep(TICK_S)
            if not stopping:
                try:
                    control.poll()
                    scaler.tick()
                    supervisor.tick()
                    cluster.sync_monitoring()
                except LocalClusterInterrupted:
                    break
        scaler.close()
        say("stopping")
    finally:
        if console is not None:
            console.stop()
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    say("stopped")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.cluster_op == "restart":
        from services.cli.cluster_restart import run_restart

        return run_restart(args)
    if args.cluster_op == "decommission":
        return elastic_cmd.run_decommission(args, sys.stdout)
    if args.cluster_op == "autoscaler":
        return elastic_cmd.run_autoscaler(args, sys.stdout)
    return run_up(args)
