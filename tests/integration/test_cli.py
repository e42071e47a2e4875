"""The `kafka-py` command against a real local cluster (real services, real ZooKeeper).

Every command runs as its own process (`python -m services.cli`, what the `kafka-py` console
script runs), so exit codes, stdout and stderr are checked exactly as a user sees them.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from kafka_support import cli_ok as ok
from kafka_support import kafka_py, one_line, unique_topic_name, zk_partition_state

from services.cli.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

READY = re.compile(r"^kafka-py cluster ready: bootstrap (\S+)$")


def eventually(check: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached within {timeout}s")


# ---- topics -------------------------------------------------------------------------------
def test_topics_create_list_describe_alter_delete(cluster: LocalCluster) -> None:
    bs = ["--bootstrap-server", cluster.bootstrap]
    name = unique_topic_name("cli-topics")
    assert (
        ok(
            "topics",
            *bs,
            "create",
            "--topic",
            name,
            "--partitions",
            "2",
            "--replication-factor",
            "2",
            "--config",
            "retention.ms=123456",
        )
        == f"Created topic {name}.\n"
    )

    again = kafka_py("topics", *bs, "create", "--topic", name)
    assert again.returncode == 1
    assert "TOPIC_ALREADY_EXISTS" in one_line(again.stderr)
    assert ok("topics", *bs, "create", "--topic", name, "--if-not-exists") == ""
    assert name in ok("topics", *bs, "list").splitlines()

    def described() -> list[str]:
        return ok("topics", *bs, "describe", "--topic", name).splitlines()

    lines = described()
    assert re.fullmatch(
        rf"Topic: {name}(\tTopicId: \S+)?\tPartitionCount: 2\tReplicationFactor: 2"
        r"\tConfigs: (\S+,)?retention\.ms=123456(,\S+)?",
        lines[0],
    ), lines[0]
    assert len(lines) == 3
    for p, line in enumerate(lines[1:]):
        m = re.fullmatch(
            rf"\tTopic: {name}\tPartition: {p}\tLeader: (\d+)\tReplicas: (\d+),(\d+)"
            r"\tIsr: ([\d,]+)",
            line,
        )
        assert m, line
        # Storage node ids, as the controller wrote them (kafka-topics.sh's meaning), not the
        # gateway that Metadata names as leader.
        state = zk_partition_state(cluster.zk_connect, name, p)
        assert int(m.group(1)) == state["leader"]
        assert [int(i) for i in m.group(4).split(",")] == state["isr"]
        assert int(m.group(1)) in {int(m.group(2)), int(m.group(3))}
        assert m.group(2) != m.group(3) and {int(m.group(2)), int(m.group(3))} <= {0, 1, 2}

    assert (
        ok(
            "topics",
            *bs,
            "alter",
            "--topic",
            name,
            "--partitions",
            "3",
            "--config",
            "retention.ms=5000",
            "--config",
            "cleanup.policy=compact",
        )
        == ""
    )
    eventually(lambda: "PartitionCount: 3" in described()[0], what="3 partitions")
    head = described()[0]
    assert "retention.ms=5000" in head and "cleanup.policy=compact" in head
    ok("topics", *bs, "alter", "--topic", name, "--delete-config", "cleanup.policy")
    eventually(lambda: "cleanup.policy" not in described()[0], what="config deleted")

    assert ok("topics", *bs, "delete", "--topic", name) == ""
    eventually(lambda: name not in ok("topics", *bs, "list").splitlines(), what="topic gone")
    gone = kafka_py("topics", *bs, "describe", "--topic", name)
    assert gone.returncode == 1 and f"topic '{name}' does not exist" in one_line(gone.stderr)


def test_topics_create_with_replica_assignment(cluster: LocalCluster) -> None:
    bs = ["--bootstrap-server", cluster.bootstrap]
    name = unique_topic_name("cli-assign")
    ok("topics", *bs, "create", "--topic", name, "--replica-assignment", "0:1,1:2")
    lines = ok("topics", *bs, "describe", "--topic", name).splitlines()
    assert "PartitionCount: 2\tReplicationFactor: 2" in lines[0]
    assert "\tPartition: 0\t" in lines[1] and "\tReplicas: 0,1\t" in lines[1]
    assert "\tPartition: 1\t" in lines[2] and "\tReplicas: 1,2\t" in lines[2]
    ok("topics", *bs, "delete", "--topic", name)


# ---- console producer / consumer, dump-log, perf -----------------------------------------
def test_console_round_trip_with_keys_and_headers(cluster: LocalCluster) -> None:
    bs = ["--bootstrap-server", cluster.bootstrap]
    name = unique_topic_name("cli-console")
    ok("topics", *bs, "create", "--topic", name, "--partitions", "1", "--replication-factor", "1")
    before = int(time.time() * 1000) - 1000
    res = kafka_py(
        "console-producer",
        *bs,
        "--topic",
        name,
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--header",
        "h=1",
        "--header",
        "trace=abc",
        "--acks",
        "all",
        "--compression-type",
        "gzip",
        stdin=b"k1:v1\nk2:value:with:colons\n:no-key-text\n",
    )
    assert res.returncode == 0, res.stderr
    out = ok(
        "console-consumer",
        *bs,
        "--topic",
        name,
        "--from-beginning",
        "--max-messages",
        "3",
        "--timeout-ms",
        "20000",
        "--property",
        "print.key=true",
        "--property",
        "print.headers=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.timestamp=true",
    )
    rows = [line.split("\t") for line in out.splitlines()]
    assert [r[1:] for r in rows] == [
        ["Partition:0", "Offset:0", "h:1,trace:abc", "k1", "v1"],
        ["Partition:0", "Offset:1", "h:1,trace:abc", "k2", "value:with:colons"],
        ["Partition:0", "Offset:2", "h:1,trace:abc", "", "no-key-text"],
    ]
    for r in rows:
        kind, ts = r[0].split(":")
        assert kind == "CreateTime" and before <= int(ts) <= int(time.time() * 1000)

    # Offsets, partitions and timestamps select where reading starts.
    tail = ok(
        "console-consumer",
        *bs,
        "--topic",
        name,
        "--partition",
        "0",
        "--offset",
        "2",
        "--max-messages",
        "1",
        "--timeout-ms",
        "20000",
    )
    assert tail == "no-key-text\n"
    future = str(int(time.time() * 1000) + 3_600_000)
    res = kafka_py(
        "console-consumer", *bs, "--topic", name, "--from-timestamp", future, "--timeout-ms", "1500"
    )
    assert res.returncode == 0 and res.stdout == ""
    assert "Processed a total of 0 messages" in res.stderr

    # The records are on disk in Kafka's format: dump-log reads the segment back.
    segments = [
        d / f"{name}-0" / "00000000000000000000.log"
        for d in (cluster.storage_dir(i) for i in range(3))
    ]
    segment = next(p for p in segments if p.exists())
    dumped = ok("dump-log", "--files", str(segment), "--print-data-log")
    assert f"Dumping {segment}" in dumped
    assert "key: k2 payload: value:with:colons" in dumped
    ok("topics", *bs, "delete", "--topic", name)


def test_perf_produce_then_consume(cluster: LocalCluster) -> None:
    bs = ["--bootstrap-server", cluster.bootstrap]
    name = unique_topic_name("cli-perf")
    ok("topics", *bs, "create", "--topic", name, "--partitions", "2", "--replication-factor", "1")
    out = ok(
        "perf",
        "produce",
        *bs,
        "--topic",
        name,
        "--num-records",
        "2000",
        "--record-size",
        "200",
        "--acks",
        "1",
        "--linger-ms",
        "5",
        timeout=120,
    )
    assert re.fullmatch(
        r"2000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg "
        r"latency, [\d.]+ ms max latency, [\d.]+ ms 50th, [\d.]+ ms 95th, [\d.]+ ms "
        r"99th, [\d.]+ ms 99.9th\.\n",
        out,
    ), out
    out = ok(
        "perf",
        "consume",
        *bs,
        "--topic",
        name,
        "--messages",
        "2000",
        "--timeout",
        "20000",
        timeout=120,
    )
    header, row = out.splitlines()
    assert header.startswith("start.time, end.time, data.consumed.in.MB")
    assert row.split(", ")[4] == "2000"
    ok("topics", *bs, "delete", "--topic", name)


# ---- bad input ----------------------------------------------------------------------------
def test_create_without_topic_is_one_line_exit_2() -> None:
    res = kafka_py("topics", "--bootstrap-server", "127.0.0.1:9", "create")
    assert res.returncode == 2
    assert "--topic" in one_line(res.stderr)


def test_unreachable_bootstrap_fails_quickly() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for argv in (
        ["topics", "list"],
        ["console-consumer", "--topic", "t"],
        ["perf", "consume", "--topic", "t", "--messages", "1"],
    ):
        t0 = time.monotonic()
        res = kafka_py(*argv, "--bootstrap-server", f"127.0.0.1:{port}", timeout=30)
        assert res.returncode == 1, res.stderr
        assert "cannot connect" in one_line(res.stderr)
        assert time.monotonic() - t0 < 10


# ---- cluster up ---------------------------------------------------------------------------
class ClusterUp:
    """`kafka-py cluster up` as a child process; stdout and stderr are read line by line."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        argv = [
            "cluster",
            "up",
            "--data-dir",
            str(data_dir),
            "--port",
            "0",
            "--zk-port",
            "0",
            "--storage-nodes",
            "1",
            "--controllers",
            "1",
            "--gateways",
            "1",
            "--group-coordinators",
            "1",
        ]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.err_lines: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._pumps = [
            threading.Thread(
                target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True
            ),
            threading.Thread(
                target=self._pump, args=(self.proc.stderr, self.err_lines.append), daemon=True
            ),
        ]
        for t in self._pumps:
            t.start()

    @staticmethod
    def _pump(stream: IO[str], sink: Callable[[str], None]) -> None:
        for line in stream:
            sink(line.rstrip("\n"))

    def wait_ready(self, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.seen.append(line)
            if m := READY.match(line):
                return m.group(1)
        raise AssertionError(f"no ready line; stdout: {self.seen}; stderr: {self.err_lines}")

    def pids(self, timeout: float = 120.0) -> dict[str, int]:
        """Process list printed after the ready line (read until 'Press Ctrl-C', which follows
        the web console's start: up to the command's start timeout on a loaded machine)."""
        out: dict[str, int] = {}
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            self.seen.append(line)
            if line.startswith("Press Ctrl-C"):
                return out
            if m := re.match(r"^\s+(\S+)\s+pid (\d+)\s", line):
                out[m.group(1)] = int(m.group(2))

    def stop(self, sig: int) -> tuple[int, str]:
        """Send ``sig``; returns the exit code and everything written to stderr."""
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        for t in self._pumps:
            t.join(10)
        return code, "\n".join(self.err_lines)

    def kill(self) -> None:
        """Teardown: Ctrl-C first, so that ``cluster up`` stops the services it started (a
        SIGKILL would leave them running in their own process groups), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def cluster_up(tmp_path: Path) -> Iterator[Callable[[], ClusterUp]]:
    started: list[ClusterUp] = []

    def start() -> ClusterUp:
        started.append(ClusterUp(tmp_path / "data"))
        return started[-1]

    yield start
    for c in started:
        c.kill()


def _alive_in_groups(pgids: set[int]) -> list[int]:
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and (int(entry) in pgids or int(fields[2]) in pgids):
            alive.append(int(entry))
    return alive


def test_cluster_up_runs_stops_cleanly_and_keeps_data(
    cluster_up: Callable[[], ClusterUp], tmp_path: Path
) -> None:
    first = cluster_up()
    bootstrap = first.wait_ready()
    pids = first.pids()
    assert set(pids) == {
        "zookeeper",
        "controller-0",
        "storage-0",
        "group_coordinator-0",
        "transaction_coordinator-0",
        "gateway-0",
    }
    assert any(
        line.startswith("data dir: ") and str(tmp_path / "data") in line for line in first.seen
    )
    bs = ["--bootstrap-server", bootstrap]
    name = unique_topic_name("cli-up")
    ok("topics", *bs, "create", "--topic", name, "--partitions", "1", "--replication-factor", "1")
    ok("console-producer", *bs, "--topic", name, stdin=b"kept across restarts\n")

    code, err = first.stop(signal.SIGINT)
    assert code == 0, err
    assert "Traceback" not in err
    assert _alive_in_groups(set(pids.values())) == []

    second = cluster_up()
    # Same data dir: the same ports, unless another program took one since (then a new one, and
    # the ready line names the bootstrap to use; test_cli_local_cluster covers both).
    bs = ["--bootstrap-server", second.wait_ready()]
    second.pids()
    assert name in ok("topics", *bs, "list").splitlines()
    out = ok(
        "console-consumer",
        *bs,
        "--topic",
        name,
        "--from-beginning",
        "--max-messages",
        "1",
        "--timeout-ms",
        "20000",
    )
    assert out == "kept across restarts\n"
    code, err = second.stop(signal.SIGTERM)
    assert code == 0, err


def test_cluster_up_restarts_a_dead_service(cluster_up: Callable[[], ClusterUp]) -> None:
    up = cluster_up()
    bootstrap = up.wait_ready()
    pids = up.pids()
    # the web console runs next to the cluster, its URL in the banner
    (url,) = [line.split()[1] for line in up.seen if line.startswith("console: http://")]
    with urllib.request.urlopen(url + "api/cluster", timeout=30) as answer:
        overview = json.loads(answer.read())
    assert [n["id"] for n in overview["storage_nodes"] if n["live"]] == [0]
    os.killpg(pids["storage-0"], signal.SIGKILL)
    bs = ["--bootstrap-server", bootstrap]
    name = unique_topic_name("cli-restart")

    def usable() -> bool:
        res = kafka_py(
            "topics",
            *bs,
            "create",
            "--topic",
            name,
            "--partitions",
            "1",
            "--replication-factor",
            "1",
            "--if-not-exists",
        )
        return res.returncode == 0

    eventually(usable, timeout=60, what="cluster usable after storage-0 was killed")
    code, err = up.stop(signal.SIGINT)
    assert code == 0
    assert "storage-0 exited unexpectedly" in err and "restarting storage-0" in err


def test_cluster_up_interrupted_during_start_up(cluster_up: Callable[[], ClusterUp]) -> None:
    up = cluster_up()
    eventually(
        lambda: any("starting ZooKeeper" in line for line in up.err_lines),
        timeout=30,
        what="start-up begun",
    )
    time.sleep(0.5)
    code, err = up.stop(signal.SIGINT)
    assert code == 0, err
    assert "start-up interrupted" in err and "Traceback" not in err
    started = json.loads((up.data_dir / "pids.json").read_text()).values()
    assert _alive_in_groups(set(started)) == []
