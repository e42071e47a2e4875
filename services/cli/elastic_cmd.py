"""``kafka-py cluster decommission`` and ``kafka-py cluster autoscaler status``: requests to the
active controller's Elastic gRPC service, found through ZooKeeper (``/controller`` then
``/kafka-py/controllers/<id>``)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any, TextIO

import grpc
from kazoo.exceptions import NoNodeError

from services.cli.common import CliError, UsageError
from services.cli.zk_client import add_zk_tls_argument, open_zk, tool_zk_security
from services.common.errors import ErrorCode
from services.common.internal_tls import tool_channel
from services.common.rpc.kafkapy.v1 import elastic_pb2 as pb
from services.common.rpc.kafkapy.v1 import elastic_pb2_grpc
from services.common.settings import ConfigError
from services.common.zk import layout
from services.common.zk.security import ZkSecurity

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"
RETRY_S = 0.5


def add_parsers(ops: Any) -> None:
    d = ops.add_parser(
        "decommission",
        help="move every replica off storage nodes, then remove them",
        description="Drain storage nodes (their replicas are reassigned by the controller's "
        "planner, rack-aware and throttled), then have the provisioner stop them. Refused "
        "when the other nodes cannot hold the data.",
    )
    d.add_argument(
        "--broker", type=int, action="append", required=True, metavar="ID",
        help="storage node id (repeatable)",
    )  # fmt: skip
    d.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    d.add_argument("--wait", action="store_true", help="wait until the nodes are drained")
    _common(d)
    a = ops.add_parser(
        "autoscaler",
        help="the storage autoscaler",
        description="What the active controller's rebalancer and autoscaler see and do.",
    )
    a_ops = a.add_subparsers(dest="autoscaler_op", metavar="{status}")
    a_ops.required = True
    st = a_ops.add_parser("status", help="nodes, target, plan, moves in flight, last decision")
    st.add_argument("--output", choices=("text", "json"), default="text")
    _common(st)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--zookeeper",
        default=DEFAULT_ZOOKEEPER,
        help=f"ZooKeeper connect string of the cluster (default {DEFAULT_ZOOKEEPER})",
    )
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS")
    add_zk_tls_argument(p)


class ControllerFinder:
    """The active controller's gRPC address, read from ZooKeeper."""

    def __init__(self, connect: str, timeout: float, security: ZkSecurity | None = None) -> None:
        self.zk = open_zk(connect, min(timeout, 10.0), security)

    def address(self) -> str | None:
        try:
            data, _ = self.zk.get(layout.CONTROLLER)
            cid = int(layout.loads(data)["brokerid"])
            ep, _ = self.zk.get(layout.controller_endpoint_path(cid))
        except (NoNodeError, KeyError, ValueError, TypeError):
            return None
        return layout.Endpoint.from_json(cid, ep).address

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()


def call_active(
    args: argparse.Namespace, method: str, request: Any, ok: Callable[[Any], bool] | None = None
) -> Any:
    """Call ``method`` on the active controller, retrying NOT_CONTROLLER until ``--timeout``."""
    deadline = time.monotonic() + args.timeout
    finder = ControllerFinder(
        args.zookeeper, args.timeout, tool_zk_security(args.zk_tls_config_file)
    )
    last = "no active controller"
    try:
        while True:
            address = finder.address()
            if address is not None:
                try:
                    channel = tool_channel(address)  # mTLS from KAFKAPY_INTERNAL_SSL_*
                except ConfigError as exc:
                    raise CliError(str(exc)) from None
                with channel:
                    stub = elastic_pb2_grpc.ElasticStub(channel)
                    try:
                        resp = getattr(stub, method)(
                            request, timeout=max(0.5, deadline - time.monotonic())
                        )
                    except grpc.RpcError as exc:
                        last = f"controller at {address}: {exc.code().name}"
                    else:
                        if resp.error_code != ErrorCode.NOT_CONTROLLER:
                            return resp
                        last = f"controller at {address} is not the active one"
            if time.monotonic() >= deadline:
                raise CliError(f"{last} (after {args.timeout:g}s)")
            time.sleep(RETRY_S)
    finally:
        finder.close()


def _status(args: argparse.Namespace) -> dict[str, Any]:
    resp = call_active(args, "AutoscalerStatus", pb.AutoscalerStatusRequest())
    if resp.error_code:
        raise CliError(resp.error_message or ErrorCode(resp.error_code).name)
    return dict(json.loads(resp.status_json))


def run_decommission(args: argparse.Namespace, out: TextIO) -> int:
    ids = sorted(set(args.broker))
    if any(b < 0 for b in ids):
        raise UsageError("--broker must be a storage node id (>= 0)")
    resp = call_active(
        args, "Decommission", pb.DecommissionRequest(broker_ids=ids, dry_run=args.dry_run)
    )
    if resp.error_code:
        raise CliError(resp.error_message or ErrorCode(resp.error_code).name)
    summary = json.loads(resp.plan_json)
    verb = "would move" if args.dry_run else "moving"
    print(
        f"decommission of {', '.join(map(str, ids))}: {verb} {summary['moves']} partition(s), "
        f"{summary['bytes_to_copy']} bytes to copy; replicas per node after: "
        + ", ".join(f"{k}={v}" for k, v in summary["replicas"].items()),
        file=out,
        flush=True,
    )
    if args.wait and not args.dry_run:
        while True:
            status = _status(args)
            if not set(ids) & set(status["draining"]):
                print(f"decommission of {', '.join(map(str, ids))}: done", file=out)
                return 0
            time.sleep(RETRY_S)
    return 0


def run_autoscaler(args: argparse.Namespace, out: TextIO) -> int:
    status = _status(args)
    if args.output == "json":
        print(json.dumps(status, indent=2), file=out)
        return 0
    a = status["autoscaler"]
    mode = "off" if not a["enabled"] else ("dry run" if a["dry_run"] else "on")
    print(
        f"autoscaler: {mode}; provisioner {a['provisioner']}; disk target "
        f"{a['disk_target_percent']:g}% (hysteresis {a['hysteresis_percent']:g}); nodes "
        f"{a['min_nodes']}..{a['max_nodes']}; cooldown {a['cooldown_ms'] / 1000:g}s "
        f"({a['cooldown_left_ms'] / 1000:.0f}s left)",
        file=out,
    )
    print(
        f"target nodes: {status['target_nodes']}  draining: {status['draining'] or '-'}", file=out
    )
    print("nodes:", file=out)
    for n in status["nodes"]:
        used = "-" if n["used_bytes"] is None else f"{n['used_bytes']}/{n['capacity_bytes']} B"
        pct = "" if n["used_percent"] is None else f" ({n['used_percent']:.1f}%)"
        flags = ("" if n["live"] else " DOWN") + (" DRAINING" if n["draining"] else "")
        print(
            f"  {n['id']:>4}  zone {n['zone'] or '-':<8} replicas {n['replicas']:>4}  leaders "
            f"{n['leaders']:>4}  disk {used}{pct}  in {n['bytes_in_per_sec']:.0f} B/s{flags}",
            file=out,
        )
    moving = status["moves_in_flight"]
    print(f"moves in flight: {len(moving)}", file=out)
    for m in moving[:20]:
        print(f"  {m['topic']}-{m['partition']} -> {m['target']}", file=out)
    plan = status["plan"]
    if plan:
        print(f"plan: {plan['moves']} move(s), {plan['bytes_to_copy']} bytes to copy", file=out)
    if status["plan_error"]:
        print(f"plan refused: {status['plan_error']}", file=out)
    for key, label in (("last_decision", "last action"), ("evaluation", "now")):
        d = status[key]
        print(
            f"{label}: {d['decision'] or '-'}" + (f": {d['reason']}" if d["reason"] else ""),
            file=out,
        )
    return 0
