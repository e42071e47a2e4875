"""The storage node process (``python -m services.storage``) with a real ZooKeeper, over gRPC."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from services.common.errors import ErrorCode
from services.common.records.batch import iter_headers
from services.common.records.record import Record, build_batch, iter_batch_records
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.common.rpc.kafkapy.v1 import storage_pb2_grpc as pb_grpc
from services.common.runtime import new_channel
from services.common.zk import layout
from services.common.zk.client import AsyncZk
from services.common.zk.server import free_port
from services.storage.log.meta_properties import MetaProperties, write_meta_properties
from services.storage.registration import BrokerRegistrar, get_or_create_cluster_id

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT_MS = 2000
BROKER_ID = 7


class NodeProcess:
    def __init__(self, zk_connect: str, log_dir: Path, out: Path, *extra: str) -> None:
        self.admin_port = free_port()
        self.out = out
        args = [
            sys.executable,
            "-m",
            "services.storage",
            "--broker.id",
            str(BROKER_ID),
            "--zookeeper.connect",
            zk_connect,
            "--log.dirs",
            str(log_dir),
            "--listeners",
            "GRPC://127.0.0.1:0",
            "--broker.rack",
            "zone-b",
            "--admin.port",
            str(self.admin_port),
            "--log.format",
            "json",
            "--zookeeper.session.timeout.ms",
            str(SESSION_TIMEOUT_MS),
            *extra,
        ]
        with open(out, "ab") as f:
            self.proc = subprocess.Popen(
                args, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def wait(self, timeout: float = 15.0) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def processes() -> Iterator[list[NodeProcess]]:
    started: list[NodeProcess] = []
    yield started
    for p in started:
        p.stop()


@pytest.fixture
async def zk(zk_connect: str) -> AsyncIterator[AsyncZk]:
    client = AsyncZk(zk_connect)
    await client.start()
    yield client
    await client.stop()


async def wait_registered(
    zk: AsyncZk, node: NodeProcess, within_s: float = 15.0, not_owner: int | None = None
) -> tuple[dict[str, object], int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        assert node.proc.poll() is None, node.output()
        found = await zk.get_or_none(layout.broker_path(BROKER_ID))
        if found is not None and found[1].ephemeralOwner != not_owner:
            return json.loads(found[0]), found[1].ephemeralOwner
        await asyncio.sleep(0.05)
    raise AssertionError(f"broker not registered in time:\n{node.output()}")


def http_get(port: int, path: str) -> tuple[int, str]:
    """GET on the admin server, retrying while it is still starting to listen."""
    deadline = time.monotonic() + 5
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def state(leader_epoch: int) -> pb.PartitionState:
    return pb.PartitionState(
        topic="events",
        partition=0,
        leader=BROKER_ID,
        leader_epoch=leader_epoch,
        isr=[BROKER_ID],
        replicas=[BROKER_ID],
        topic_id=bytes(range(16)),
        config={"segment.bytes": "100000"},
    )


async def fetch_all(stub: pb_grpc.StorageStub, epoch: int) -> list[bytes | None]:
    resp = await stub.Fetch(
        pb.FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            partitions=[
                pb.PartitionFetch(
                    topic="events",
                    partition=0,
                    fetch_offset=0,
                    partition_max_bytes=1 << 20,
                    current_leader_epoch=epoch,
                )
            ],
        )
    )
    part = resp.partitions[0]
    assert part.error_code == 0, part
    return [rec.value for _, rec in iter_batch_records(part.records)]


async def test_storage_node_lifecycle(
    zk_connect: str, zk: AsyncZk, tmp_path: Path, processes: list[NodeProcess]
) -> None:
    log_dir = tmp_path / "data"
    node = NodeProcess(zk_connect, log_dir, tmp_path / "node1.out")
    processes.append(node)
    reg, owner = await wait_registered(zk, node)
    assert reg["rack"] == "zone-b" and reg["host"] == "127.0.0.1"
    assert reg["endpoints"] == [f"GRPC://127.0.0.1:{reg['port']}"]
    cluster = layout.loads((await zk.get(layout.CLUSTER_ID))[0])
    assert len(cluster["id"]) == 22
    meta = (log_dir / "meta.properties").read_text()
    assert f"cluster.id={cluster['id']}" in meta and f"broker.id={BROKER_ID}" in meta
    assert await asyncio.to_thread(http_get, node.admin_port, "/readyz") == (
        200,
        '{"status":"ready"}',
    )

    async with new_channel(f"127.0.0.1:{reg['port']}") as channel:
        stub = pb_grpc.StorageStub(channel)
        resp = await stub.UpdatePartitions(
            pb.UpdatePartitionsRequest(controller_id=1, controller_epoch=3, partitions=[state(1)])
        )
        assert resp.error_code == 0 and resp.partitions[0].error_code == 0
        stale = await stub.UpdatePartitions(
            pb.UpdatePartitionsRequest(controller_id=1, controller_epoch=2, partitions=[state(2)])
        )
        assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH

        records = build_batch(
            [Record(timestamp=1_000, value=b"one"), Record(timestamp=2_000, value=b"two")]
        )
        appended = await stub.Append(
            pb.AppendRequest(
                acks=-1,
                timeout_ms=5000,
                partitions=[
                    pb.PartitionAppend(
                        topic="events", partition=0, records=records, current_leader_epoch=1
                    ),
                    pb.PartitionAppend(
                        topic="nope", partition=0, records=records, current_leader_epoch=-1
                    ),
                ],
            )
        )
        ok, missing = appended.partitions
        assert (ok.error_code, ok.base_offset, ok.log_append_time_ms) == (0, 0, -1)
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert await fetch_all(stub, 1) == [b"one", b"two"]

        offsets = await stub.ListOffsets(
            pb.ListOffsetsRequest(
                partitions=[
                    pb.PartitionOffsetQuery(
                        topic="events", partition=0, timestamp=t, current_leader_epoch=1
                    )
                    for t in (-2, -1, 1_500, -3)
                ]
            )
        )
        assert [(o.error_code, o.offset) for o in offsets.partitions] == [
            (0, 0),
            (0, 2),
            (0, 1),
            (0, 1),
        ]
        assert offsets.partitions[2].timestamp == 2_000

        # long poll woken by an append from another call
        poll = asyncio.ensure_future(
            stub.Fetch(
                pb.FetchRequest(
                    replica_id=-1,
                    max_wait_ms=5000,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    partitions=[
                        pb.PartitionFetch(
                            topic="events",
                            partition=0,
                            fetch_offset=2,
                            partition_max_bytes=1 << 20,
                            current_leader_epoch=-1,
                        )
                    ],
                )
            )
        )
        await asyncio.sleep(0.1)
        started = time.monotonic()
        await stub.Append(
            pb.AppendRequest(
                acks=1,
                timeout_ms=5000,
                partitions=[
                    pb.PartitionAppend(
                        topic="events",
                        partition=0,
                        current_leader_epoch=-1,
                        records=build_batch([Record(timestamp=3_000, value=b"three")]),
                    )
                ],
            )
        )
        polled = (await asyncio.wait_for(poll, 5)).partitions[0]
        assert time.monotonic() - started < 1.0
        assert [h.base_offset for h in iter_headers(polled.records)] == [2]

    status, metrics = await asyncio.to_thread(http_get, node.admin_port, "/metrics")
    assert status == 200
    assert 'kafka_server_brokertopicmetrics_messagesin_total{topic="events"} 3.0' in metrics
    assert "kafka_server_replicamanager_leadercount 1.0" in metrics

    # kill -9: no clean-shutdown marker; the restart recovers the log and keeps the data
    node.proc.send_signal(signal.SIGKILL)
    node.wait()
    assert not (log_dir / ".kafka_cleanshutdown").exists()
    node2 = NodeProcess(zk_connect, log_dir, tmp_path / "node2.out")
    processes.append(node2)
    reg2, _ = await wait_registered(zk, node2, not_owner=owner)
    assert '"clean_shutdown": false' in node2.output()
    async with new_channel(f"127.0.0.1:{reg2['port']}") as channel:
        stub = pb_grpc.StorageStub(channel)
        resp = await stub.UpdatePartitions(
            pb.UpdatePartitionsRequest(controller_id=1, controller_epoch=4, partitions=[state(2)])
        )
        assert resp.partitions[0].error_code == 0
        assert await fetch_all(stub, 2) == [b"one", b"two", b"three"]

    # SIGTERM: deregister, close logs, write the marker, exit 0
    node2.proc.send_signal(signal.SIGTERM)
    assert node2.wait() == 0, node2.output()
    assert (log_dir / ".kafka_cleanshutdown").exists()
    assert await zk.exists(layout.broker_path(BROKER_ID)) is None
    assert "events 0 3" in (log_dir / "replication-offset-checkpoint").read_text()


async def test_refuses_a_log_dir_of_another_cluster(
    zk_connect: str, tmp_path: Path, processes: list[NodeProcess]
) -> None:
    log_dir = tmp_path / "data"
    write_meta_properties(
        log_dir, MetaProperties(broker_id=BROKER_ID, cluster_id="AAAAAAAAAAAAAAAAAAAAAA")
    )
    node = NodeProcess(zk_connect, log_dir, tmp_path / "node.out")
    processes.append(node)
    assert node.wait() == 1
    errors = [line for line in node.output().splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "doesn't match the stored cluster.id" in errors[0]


def test_bad_flag_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "services.storage", "--broker.id", "1", "--log.segment.bytes", "x"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ},
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: invalid setting log.segment.bytes: Value error, Invalid value x for "
        "configuration segment.bytes: Not a number of type INT"
    ]


async def test_deprecated_log_message_format_version_is_accepted_with_a_warning(
    zk_connect: str, zk: AsyncZk, tmp_path: Path, processes: list[NodeProcess]
) -> None:
    """Kafka 3.x accepts the deprecated broker setting (ignored: magic 2); the node starts,
    registers and says so in its log."""
    node = NodeProcess(
        zk_connect, tmp_path / "logs", tmp_path / "node.out", "--log.message.format.version", "2.8"
    )
    processes.append(node)
    await wait_registered(zk, node)
    warnings = [
        json.loads(line)
        for line in node.output().splitlines()
        if line.startswith("{") and '"deprecated setting"' in line
    ]
    assert [w["warning"].split(" is ")[0] for w in warnings] == ["log.message.format.version"]


def test_log_message_format_version_must_be_a_version() -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "services.storage", "--broker.id", "1"]
        + ["--log.message.format.version", "newest"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2
    assert "Version `newest` is not a valid version" in bad.stderr


async def test_registration_comes_back_after_session_expiry(zk_connect: str, zk: AsyncZk) -> None:
    node_zk = AsyncZk(zk_connect, session_timeout_ms=SESSION_TIMEOUT_MS)
    await node_zk.start()
    await node_zk.ensure_layout()
    try:
        registrar = BrokerRegistrar(
            node_zk,
            BROKER_ID,
            lambda: layout.BrokerRegistration(BROKER_ID, "h", 1, "zone-c"),
            SESSION_TIMEOUT_MS,
        )
        await registrar.register()
        first_owner = (await zk.exists(layout.broker_path(BROKER_ID))).ephemeralOwner
        assert first_owner == node_zk.session_id
        # expire the node's session: another client attaches to it and closes it
        intruder = KazooClient(
            hosts=zk_connect.partition("/")[0], client_id=node_zk.client.client_id
        )
        await asyncio.to_thread(intruder.start)
        await asyncio.to_thread(intruder.stop)
        await asyncio.to_thread(intruder.close)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            stat = await zk.exists(layout.broker_path(BROKER_ID))
            # the node shows up a moment before the registrar has read it back and says so
            if (
                stat is not None
                and stat.ephemeralOwner not in (first_owner, 0)
                and registrar.registered
            ):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("broker was not re-registered after session expiry")
        assert stat.ephemeralOwner == node_zk.session_id
        data = layout.loads((await zk.get(layout.broker_path(BROKER_ID)))[0])
        assert data["rack"] == "zone-c"
        await registrar.deregister()
        assert await zk.exists(layout.broker_path(BROKER_ID)) is None
    finally:
        await node_zk.stop()


async def test_cluster_id_created_once_under_races(zk_connect: str) -> None:
    clients = [AsyncZk(zk_connect) for _ in range(4)]
    await asyncio.gather(*(c.start() for c in clients))
    try:
        ids = await asyncio.gather(*(get_or_create_cluster_id(c) for c in clients))
        assert len(set(ids)) == 1 and len(ids[0]) == 22
        stored = layout.loads((await clients[0].get(layout.CLUSTER_ID))[0])
        assert stored == {"version": "1", "id": ids[0]}
    finally:
        await asyncio.gather(*(c.stop() for c in clients))
