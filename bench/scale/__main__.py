"""``python -m bench.scale [section ...]`` (``make bench-scale``): the scale suite, printed and
written to docs/benchmarks.md's "Scale" section (only when every section ran). ``BENCH_SCALE``
(default 1.0) scales every base size; each row runs at 1x, 4x and 16x of it (partitions,
connections and groups on a fresh cluster per size; the many-client and replication sizes share
one cluster), with the peer (Tansu) beside kafka-py wherever it can run the same workload.
Sections: partitions, connections, groups, clients, replication."""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.peers import tansu_running
from bench.scale import clients, connections, groups, partitions
from bench.scale.procs import admin_ports, role_pids
from services.cli.local_cluster import LocalCluster

SCALE = float(os.environ.get("BENCH_SCALE", "1.0"))
GROWTH = (1, 4, 16)
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"


def sized(base: int) -> list[int]:
    return [max(1, int(base * SCALE * g)) for g in GROWTH]


@contextmanager
def cluster(**options: Any) -> Iterator[LocalCluster]:
    data = Path(tempfile.mkdtemp(prefix="kafka-py-scale-"))
    c = LocalCluster(data, gateway_port=0, zk_port=0, **options)
    try:
        c.start(timeout=180)
        yield c
    finally:
        c.stop()
        shutil.rmtree(data, ignore_errors=True)


def table(title: str, rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    keys = list(dict.fromkeys(k for r in rows for k in r))  # every row's columns, in order

    def fmt(v: Any) -> str:
        if not isinstance(v, float):
            return str(v)
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"

    lines = [f"### {title}", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def section(title: str, run: Callable[[], list[dict[str, Any]]], note: str = "") -> str:
    started = time.monotonic()
    try:
        rows = run()
    except Exception as exc:  # noqa: BLE001 - one section failing must not hide the others
        failed = f"### {title}\n\nfailed: {type(exc).__name__}: {exc}\n"
        print(failed, flush=True)
        return failed
    text = table(title, rows) + (f"\n{note}\n" if note else "")
    text += f"\n({time.monotonic() - started:.0f} s)\n"
    print(text, flush=True)
    return text


def run_partitions() -> list[dict[str, Any]]:
    """kafka-py's rows (RF 1 then RF 3), then the peer's RF 1 rows (a fresh peer per size)."""
    rows = []
    for rf in (1, 3):
        nodes = partitions.storage_nodes_for(max(sized(625)), rf)
        for n in sized(625):
            with cluster(storage_nodes=nodes, controllers=2) as c:
                row = partitions.measure(c, n, rf)
                rows.append({"broker": "kafka-py", "storage_nodes": nodes, **row})
    for n in sized(625):
        with tansu_running() as peer:
            rows.append(
                {"broker": peer.name, **partitions.measure_peer(peer.bootstrap, peer.pids(), n)}
            )
    return rows


def run_connections() -> list[dict[str, Any]]:
    rows = []
    for idle in sized(125):
        with cluster(storage_nodes=1, controllers=1) as c:
            topic = clients.create_topic(c.bootstrap, 1, 1)
            rows.append({"broker": "kafka-py", **connections.measure(c, topic, idle, active=200)})
        with tansu_running() as peer:
            topic = clients.create_topic(peer.bootstrap, 1, 1)
            (pid,) = peer.pids()
            row = connections.measure_at(peer.bootstrap, pid, topic, idle, active=200)
            rows.append({"broker": peer.name, **row})
    return rows


def run_groups() -> list[dict[str, Any]]:
    """Each size on kafka-py, then the same commits on a fresh peer (no coordinator to kill)."""
    rows = []
    for n in sized(62):
        with cluster(storage_nodes=3, controllers=1, group_coordinators=2) as c:
            rows.append({"broker": "kafka-py", **groups.measure(c, n, 100)})
        with tansu_running() as peer:
            row, _readable = groups.commit_load(peer.bootstrap, peer.pids(), n, 100)
            rows.append({"broker": peer.name, **row, "coordinator_failover_s": "n/a"})
    return rows


#: many-client rows: 1+1, 4+4 and 16+16 producer + consumer processes, the same records in all
#: (the 8+8 workload's; each consumer reads all of them)
CLIENT_RECORDS = {100: 1_000_000, 1024: 200_000}


def run_many_clients() -> list[dict[str, Any]]:
    """Each workload on kafka-py then on the peer, back to back (both brokers stay up for the
    whole section, each workload on a topic of its own, deleted after), so load drift hits both
    alike."""
    rows = []
    with cluster(storage_nodes=3, controllers=1) as c, tansu_running() as peer:
        for size, records in CLIENT_RECORDS.items():
            total = max(1000, int(records * SCALE))
            for acks in ("1", "all"):
                for n in GROWTH:
                    ours = clients.many_clients(
                        c.bootstrap,
                        role_pids(c),
                        *(n, n, 48, size, total // n, acks),
                        storage_admin=admin_ports(c, "storage"),
                    )
                    theirs = clients.many_clients(
                        peer.bootstrap, {"tansu": peer.pids()}, n, n, 48, size, total // n, acks
                    )
                    rows.append(clients.beside_peer(ours, theirs, peer.name))
    return rows


def run_replication() -> list[dict[str, Any]]:
    """1, 4 and 16 producer processes on 6, 24 and 96 partitions, the same records in all."""
    records = max(2000, int(500_000 * SCALE))
    rows = []
    with cluster(storage_nodes=3, controllers=1) as c:
        for g in GROWTH:
            rows.append(
                clients.replication(
                    c.bootstrap, role_pids(c), g, 6 * g, 1024, records, admin_ports(c, "storage")
                )
            )
    return rows


def load() -> str:
    return ", ".join(f"{v:.1f}" for v in os.getloadavg())


def write_doc(text: str, note: str = "") -> None:
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    block = (
        f"{BEGIN}\n## Scale (`make bench-scale`, BENCH_SCALE={SCALE:g}; {machine})\n\n"
        f"{note}{text}{END}"
    )
    doc = DOC.read_text() if DOC.exists() else ""
    if BEGIN in doc and END in doc:
        doc = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _m: block, doc, flags=re.S)
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(doc)


PEER_NO_FAULTS = (
    "Tansu rows: RF 1, no restart or failover columns. Peer cannot run those: one process "
    "with in-memory storage, no storage node or controller to kill (a restart loses its data), "
    "and at RF 3 it names itself as all three replicas."
)
PEER_NO_REPLICAS = (
    "Peer cannot run this: Tansu is one broker whose memory storage keeps one copy (it accepts "
    "RF 3 but names itself as all three replicas), so it has no follower, ISR or acks=all wait."
)
PEER_GROUPS = (
    "Tansu rows: the same commits; its coordinator_cores are the whole broker's. Peer cannot "
    "run the failover: one process, no coordinator to kill (a restart loses its offsets)."
)
CLIENTS_NOTE = (
    "Growth: 1+1, 4+4 and 16+16 producer + consumer processes (the issue's 8+8 lies between "
    "the 4x and 16x rows), the same records written in all, each consumer reading all of them; "
    "the peer's MB/s and CPU per GB beside kafka-py's, and x_peer = kafka-py / peer MB/s."
)
REPLICATION_NOTE = (
    "Growth: 1, 4 and 16 producer processes on 6, 24 and 96 partitions, the same 1 KiB records "
    "in all. " + PEER_NO_REPLICAS
)

SECTIONS: dict[str, tuple[str, Callable[[], list[dict[str, Any]]], str]] = {
    "partitions": ("Partitions (1x/4x/16x; RF 1 then RF 3)", run_partitions, PEER_NO_FAULTS),
    "connections": ("Connections on one gateway (1x/4x/16x idle)", run_connections, ""),
    "groups": ("Consumer groups (1x/4x/16x; 100 partitions each)", run_groups, PEER_GROUPS),
    "clients": (
        "Many clients (1x/4x/16x processes), 48 partitions",
        run_many_clients,
        CLIENTS_NOTE,
    ),
    "replication": (
        "Replication: RF 3 acks=all vs RF 1 acks=1 (1x/4x/16x producers)",
        run_replication,
        REPLICATION_NOTE,
    ),
}


def load_reading(load_before: str, cores: int | None = None) -> str:
    """How to read the run's figures from the 1-minute load average at its start: the load at
    the end includes the suite's own clusters and client processes, so only the start tells
    whether other work shared the machine."""
    cores = cores or os.cpu_count() or 1
    if float(load_before.split(",")[0]) <= cores / 2:
        return "The machine was quiet at the start; the load at the end is the suite's own."
    return (
        f"A load above {cores / 2:g} at the start means other work shared the {cores} cores: "
        "times and rates are inflated; rerun on a quiet machine for reference numbers."
    )


def main(names: list[str]) -> None:
    unknown = set(names) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    started, load_before = time.monotonic(), load()
    at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [section(*SECTIONS[n]) for n in names or SECTIONS]
    total = time.monotonic() - started
    print(
        f"whole suite: {total:.0f} s; load average {load_before} at the start, {load()} at the end"
    )
    if names and set(names) != set(SECTIONS):
        return  # a partial run leaves the doc alone
    note = (
        f"{at}, whole suite {total / 60:.1f} min. Load average (1, 5, 15 min) {load_before} at "
        f"the start and {load()} at the end. {load_reading(load_before)} Each section's time "
        "is under its table.\n\n"
    )
    write_doc("\n".join(parts), note)


if __name__ == "__main__":
    main(sys.argv[1:])
