"""The partitions row's controller failover alone (``controller_failover_s``), repeated, with
where its time went. ``python -m bench.scale.failover [--partitions N ...] [--rf 1 3]
[--runs 3]``: per replication factor and size, one cluster of the partitions row's shape
(``storage_nodes_for``, 2 controllers) gets the partitions, then the active controller is
killed ``--runs`` times (each killed one restarts as the standby before the next kill). Each
run prints the time until CreateTopics works again; the phases the new controller logged,
counted from the kill (elected, serving, states loaded, failover finished, the topic created,
the last storage node's acknowledgement of the full state); and the CPU seconds the new
controller and the storage nodes spent from the kill until 10 s after CreateTopics worked,
beside the storage nodes' CPU seconds in the 10 s before the kill. Prints only. Run it under the heavy-run lock at 10,000 partitions:
``flock /tmp/kafkapy-heavy.lock timeout -s INT 900 python -m bench.scale.failover``."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bench.cpu import cpu_seconds
from bench.scale.__main__ import cluster
from bench.scale.partitions import _controller_failover, all_led, create_topics, storage_nodes_for

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
            name = PHASES.get(event)
            if name is None or name in out:
                continue
            out[name] = since_kill
            out.update({k: v for k, v in line.items() if k.endswith("_s")})
    return out


def storage_pids(pids: dict[str, int]) -> list[int]:
    return [pid for name, pid in pids.items() if name.startswith("storage-")]


def failover_runs(
    c: Any, partitions: int, rf: int, runs: int, idle_s: float = IDLE_S, after_s: float = AFTER_S
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
        cpu_before = {k: cpu_seconds(v) for k, v in watched.items()}
        storage_idle = cpu_before["storage"] - idle_from
        killed_at = time.time()
        failover_s = _controller_failover(c, admin)
        time.sleep(after_s)  # the new controller finishes its failover, the old one is standby
        row: dict[str, Any] = {
            "failover_s": round(failover_s, 2),
            "load1": round(load, 1),
            f"storage_cpu_s_{idle_s:g}s_before": round(storage_idle, 2),
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
    args = parser.parse_args()
    for rf in args.rf:
        for n in args.partitions:
            nodes = storage_nodes_for(n, rf)
            with cluster(storage_nodes=nodes, controllers=2) as c:
                rows = failover_runs(c, n, rf, args.runs)
            times = [r["failover_s"] for r in rows]
            print(
                f"{n} partitions, RF {rf}, {nodes} storage nodes: failover "
                f"{', '.join(f'{t:.2f}' for t in times)} s (median "
                f"{statistics.median(times):.2f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
