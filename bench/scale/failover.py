"""The partitions row's controller failover alone (``controller_failover_s``), repeated, with
where its time went. ``python -m bench.scale.failover [--partitions N ...] [--rf 1 3]
[--runs 3]``: per replication factor and size, one cluster of the partitions row's shape
(``storage_nodes_for``, 2 controllers) gets the partitions, then the active controller is
killed ``--runs`` times (each killed one restarts as the standby before the next kill). Each
run prints the time until CreateTopics works again; the phases the new controller logged,
counted from the kill (elected, serving, states loaded, failover finished, the topic created,
the last storage node's acknowledgement of the full state); and the CPU seconds the new
controller and the storage nodes spent from the kill until 10 s after CreateTopics worked,
beside the storage nodes' CPU seconds in the 10 s before the kill.

``--after-restarts``: the kill comes where the full suite's partitions row has it, right after
that row's storage-0 kill -9 + restart and storage-1 clean stop + restart (``_storage_death``,
``_storage_restarts``), so the restarted nodes are still bringing their replicas back into the
ISRs (and the controller still working through the ISR-change notices) when the controller
dies; each run also prints those steps' times and the ISR-change notices pending at the kill.
``--controller-log-level debug`` adds the controller's debug timings to the phases. Prints
only. Run it under the heavy-run lock at 10,000 partitions:
``flock /tmp/kafkapy-heavy.lock timeout -s INT 900 python -m bench.scale.failover``."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bench.cpu import cpu_seconds
from bench.scale.__main__ import cluster
from bench.scale.partitions import (
    _controller_failover,
    _storage_death,
    _storage_restarts,
    all_led,
    create_topics,
    storage_nodes_for,
)
from services.cli.zk_view import connected
from services.common.zk import layout

IDLE_S = 10.0  # the storage nodes' CPU over this long before the kill: their idle cost
AFTER_S = 10.0  # CPU is read this long after CreateTopics worked again

#: log events of the new active controller, in the order a failover reaches them
PHASES = {
    "elected as active controller": "elected",
    "controller serving, loading partition states": "serving",
    "controller context loaded": "loaded",
    "controller failover finished": "finished",
    "created topic": "created",
}


def phases(log: Path, offset: int, killed_at: float) -> dict[str, Any]:
    """Seconds from the kill to each of PHASES the log shows after ``offset``, plus the
    duration fields (``*_s``) those lines carry."""
    out: dict[str, Any] = {}
    with log.open("rb") as f:
        f.seek(offset)
        for raw in f:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            event = line.get("event", "")
            at = datetime.fromisoformat(line.get("timestamp", "1970-01-01T00:00:00+00:00"))
            since_kill = round(at.timestamp() - killed_at, 2)
            if event == "full state acknowledged":  # one per storage node: the last one
                out["full_state_acked"] = since_kill
                out["full_state_ack_max_s"] = max(out.get("full_state_ack_max_s", 0), line["ack_s"])
                continue
            if event == "controller event" and since_kill >= 0:  # debug level: the slow ones
                if (
                    line["wait_s"] + line["run_s"] >= 0.05
                    and len(out.setdefault("events", [])) < 30
                ):
                    out["events"].append(
                        (line["controller_event"], since_kill, line["wait_s"], line["run_s"])
                    )
                continue
            name = PHASES.get(event)
            if name is None or name in out:
                continue
            out[name] = since_kill
            out.update({k: v for k, v in line.items() if k.endswith("_s")})
    return out


def storage_pids(pids: dict[str, int]) -> list[int]:
    return [pid for name, pid in pids.items() if name.startswith("storage-")]


def pending_isr_notices(zk_connect: str) -> int:
    """ISR-change notices no controller has consumed yet."""
    with connected(zk_connect, 30) as client:
        return len(client.get_children(layout.ISR_CHANGE_NOTIFICATION))


def failover_runs(
    c: Any,
    partitions: int,
    rf: int,
    runs: int,
    idle_s: float = IDLE_S,
    after_s: float = AFTER_S,
    after_restarts: bool = False,
) -> list[dict[str, Any]]:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    names = create_topics(admin, f"fo-{rf}-{uuid.uuid4().hex[:6]}", partitions, rf)
    deadline = time.monotonic() + 600
    while not all_led(c.zk_connect, names, partitions):
        if time.monotonic() > deadline:
            raise RuntimeError("partitions not led after 600 s")
        time.sleep(1)
    rows = []
    for _ in range(runs):
        standby = 1 - (c.active_controller_index() or 0)
        log = c.log_path("controller", standby)
        offset = log.stat().st_size
        load = os.getloadavg()[0]
        pids = c.pids()
        watched = {"controller": [pids[f"controller-{standby}"]], "storage": storage_pids(pids)}
        idle_from = cpu_seconds(watched["storage"])
        time.sleep(idle_s)
        storage_idle = cpu_seconds(watched["storage"]) - idle_from
        restarts: dict[str, Any] = {}
        if after_restarts:  # what the partitions row does before its controller failover
            restarts.update(_storage_death(c, c.zk_connect, names, rf))
            restarts.update(_storage_restarts(c))
            restarts["isr_notices_at_kill"] = pending_isr_notices(c.zk_connect)
            watched["storage"] = storage_pids(c.pids())  # the restarted nodes' new pids
        cpu_before = {k: cpu_seconds(v) for k, v in watched.items()}
        killed_at = time.time()
        failover_s = _controller_failover(c, admin)
        time.sleep(after_s)  # the new controller finishes its failover, the old one is standby
        row: dict[str, Any] = {
            "failover_s": round(failover_s, 2),
            "load1": round(load, 1),
            f"storage_cpu_s_{idle_s:g}s_before": round(storage_idle, 2),
            **{k: round(v, 2) if isinstance(v, float) else v for k, v in restarts.items()},
        }
        for k, v in watched.items():
            row[f"{k}_cpu_s"] = round(cpu_seconds(v) - cpu_before[k], 2)
        row.update(phases(log, offset, killed_at))
        rows.append(row)
        print(f"  {partitions} partitions RF {rf}: {row}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[10_000])
    parser.add_argument("--rf", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--after-restarts",
        action="store_true",
        help="kill the controller right after the partitions row's storage restarts",
    )
    parser.add_argument("--controller-log-level", default="info", help="e.g. debug")
    parser.add_argument("--keep-logs", type=Path, help="copy the services' logs here at the end")
    args = parser.parse_args()
    extra = {"controller": ["--log.level", args.controller_log_level]}
    for rf in args.rf:
        for n in args.partitions:
            nodes = storage_nodes_for(n, rf)
            with cluster(storage_nodes=nodes, controllers=2, extra=extra) as c:
                rows = failover_runs(c, n, rf, args.runs, after_restarts=args.after_restarts)
                if args.keep_logs is not None:
                    keep = args.keep_logs / f"{n}-rf{rf}"
                    keep.mkdir(parents=True, exist_ok=True)
                    for name in c.pids():
                        role, _, index = name.rpartition("-")
                        if role in ("controller", "storage", "gateway"):
                            shutil.copy(c.log_path(role, int(index)), keep / f"{name}.log")
            times = [r["failover_s"] for r in rows]
            print(
                f"{n} partitions, RF {rf}, {nodes} storage nodes: failover "
                f"{', '.join(f'{t:.2f}' for t in times)} s (median "
                f"{statistics.median(times):.2f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
