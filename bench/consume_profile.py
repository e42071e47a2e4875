"""The single-client 1 KiB consume row of ``make bench`` alone, with each Fetch's timeline.

Starts one broker (kafka-py's local cluster or Tansu, as bench/run.py does), serves the bench's
warm-up, produces the row's topic (200,000 x 1 KiB on 6 partitions, bench/run.py's ``p1k_a1``)
and then reads it ``--runs`` times with bench/workloads.py's consumer, measuring MB/s and
broker CPU-seconds per GB (and, for kafka-py, each process's share). With ``--timeline`` one
more read runs with librdkafka's ``protocol`` debug log, which gives, per Fetch, when the client
sent it, when the whole answer had arrived, its size, and the client's gap before the next.

    python -m bench.consume_profile [--peer kafka-py|tansu] [--runs 3] [--timeline [N]]
        [--fetch-node-max-bytes N]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import uuid

from bench.cpu import cpu_seconds
from bench.peers import KafkaPyPeer, Peer, TansuPeer
from bench.prom import counters
from bench.run import PARTITIONS, ROOT, SCENARIOS, create_topic, run_workload, warm_up

# librdkafka's default log line: %7|<unix time>|PROTOCOL|<client>| [thrd:...]: <text>
_LINE = re.compile(r"\|(?P<ts>\d+\.\d+)\|(?P<fac>\w+)\|[^|]*\|.*?: (?P<text>.*)$")
_SENT = re.compile(r"Sent FetchRequest \(v(?P<v>\d+), (?P<n>\d+) bytes @ \d+, CorrId (?P<c>\d+)\)")
_RECV = re.compile(
    r"Received FetchResponse \(v\d+, (?P<n>\d+) bytes, CorrId (?P<c>\d+), rtt (?P<rtt>[\d.]+)ms\)"
)


def _scenario(key: str) -> object:
    return next(sc for sc in SCENARIOS if sc.key == key)


def fetch_timeline(log: str) -> list[dict[str, float]]:
    """Each Fetch's (sent, received, bytes, rtt) from librdkafka's protocol log, in send order;
    ``gap_ms`` is the time from its answer to the next Fetch sent."""
    sent: dict[int, float] = {}
    rows: list[dict[str, float]] = []
    for line in log.splitlines():
        m = _LINE.search(line)
        if m is None:
            continue
        ts, text = float(m["ts"]), m["text"]
        if s := _SENT.search(text):
            sent[int(s["c"])] = ts
        elif r := _RECV.search(text):
            corr = int(r["c"])
            rows.append(
                {
                    "corr": corr,
                    "sent": sent.get(corr, ts),
                    "received": ts,
                    "bytes": int(r["n"]),
                    "rtt_ms": float(r["rtt"]),
                }
            )
    rows.sort(key=lambda row: row["sent"])
    for row, nxt in zip(rows, rows[1:], strict=False):
        row["gap_ms"] = (nxt["sent"] - row["received"]) * 1000
    return rows


def timeline_run(peer: Peer, topic: str, count: int) -> None:
    """One read with librdkafka's protocol log; prints the timeline."""
    code = (
        "import sys, time, confluent_kafka as ck\n"
        f"c = ck.Consumer({{'bootstrap.servers': {peer.bootstrap!r}, 'group.id': 'bench-tl',"
        " 'enable.auto.commit': False, 'fetch.max.bytes': 52428800,"
        " 'max.partition.fetch.bytes': 10485760, 'debug': 'protocol'})\n"
        f"c.assign([ck.TopicPartition({topic!r}, p, 0) for p in range({PARTITIONS})])\n"
        "got = 0; t = time.time(); sys.stderr.write(f'%7|{t:.3f}|START|x| [thrd:app]: start\\n')\n"
        f"while got < {count}:\n"
        "    got += sum(1 for m in c.consume(10000, 1.0) if m.error() is None)\n"
        "t = time.time(); sys.stderr.write(f'%7|{t:.3f}|END|x| [thrd:app]: end\\n')\n"
        "c.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    marks = dict(
        (m["fac"], float(m["ts"]))
        for line in out.stderr.splitlines()
        if (m := _LINE.search(line)) and m["fac"] in ("START", "END")
    )
    rows = fetch_timeline(out.stderr)
    start = marks.get("START", rows[0]["sent"] if rows else 0.0)
    print(f"\n{peer.name} Fetch timeline (ms from the consumer's start; librdkafka protocol log):")
    print("  corr     sent  received   rtt_ms      MiB  gap_ms")
    for row in rows:
        if row["bytes"] < 1024:
            continue  # empty answers at the end
        print(
            f"  {row['corr']:4d} {(row['sent'] - start) * 1000:8.1f} "
            f"{(row['received'] - start) * 1000:9.1f} {row['rtt_ms']:8.1f} "
            f"{row['bytes'] / 2**20:8.2f} {row.get('gap_ms', 0.0):7.1f}"
        )
    if "END" in marks:
        print(f"  all {count} records consumed at {(marks['END'] - start) * 1000:.1f} ms")


def _gateway_counters(peer: Peer) -> dict[str, float]:
    """The gateway's Fetch requests and parked-call outcomes so far (kafka-py only)."""
    if not isinstance(peer, KafkaPyPeer):
        return {}
    port = int(peer.cluster.admin_url("gateway").rsplit(":", 1)[1])
    samples = counters({"gateway": port}).get("gateway", {})
    return {
        key.split("{")[1].rstrip("}") if "{" in key else key: value
        for key, value in samples.items()
        if key.startswith(
            (
                "kafkapy_gateway_fetch_parked_calls",
                'kafka_network_requestmetrics_requests_total{request="FetchConsumer"',
            )
        )
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--peer", choices=["kafka-py", "tansu"], default="kafka-py")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--timeline", type=int, nargs="?", const=1, default=0, help="reads with it")
    p.add_argument(
        "--fetch-node-max-bytes",
        type=int,
        default=None,
        help="the gateway's kafkapy.fetch.node.max.bytes (default: its own default)",
    )
    args = p.parse_args()
    peer: Peer = KafkaPyPeer() if args.peer == "kafka-py" else TansuPeer()
    if args.fetch_node_max_bytes is not None and isinstance(peer, KafkaPyPeer):
        flag = ["--kafkapy.fetch.node.max.bytes", str(args.fetch_node_max_bytes)]
        peer.cluster.extra["gateway"] += flag
    produce, consume = _scenario("p1k_a1"), _scenario("c1k")
    peer.start()
    try:
        warm_up(peer)
        topic = f"bench-c1k-{uuid.uuid4().hex[:6]}"
        create_topic(peer.bootstrap, topic)
        run_workload(peer, produce, topic)  # type: ignore[arg-type]
        count = int(consume.args[consume.args.index("--count") + 1])  # type: ignore[attr-defined]
        pids = peer.cluster.pids() if isinstance(peer, KafkaPyPeer) else {}
        for i in range(args.runs):
            before = {name: cpu_seconds([pid]) for name, pid in pids.items()}
            seen = _gateway_counters(peer)
            r = run_workload(peer, consume, topic)  # type: ignore[arg-type]
            split = {name: cpu_seconds([pid]) - before[name] for name, pid in pids.items()}
            busy = {k: round(v / (r["mb"] / 1000), 3) for k, v in split.items() if v > 0.005}
            print(
                json.dumps(
                    {
                        "peer": peer.name,
                        "run": i + 1,
                        "mb_per_s": round(r["mb_per_s"], 1),
                        "cpu_s_per_gb": round(r["cpu_s_per_gb"], 3),
                        "cpu_s_per_gb_by_process": busy,
                        "gateway_counters": {
                            k: v - seen.get(k, 0.0) for k, v in _gateway_counters(peer).items()
                        },
                    }
                ),
                flush=True,
            )
        for _ in range(args.timeline):
            timeline_run(peer, topic, count)
    finally:
        peer.stop()


if __name__ == "__main__":
    main()
