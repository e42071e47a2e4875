"""The group coordinator as a real process: registration, health, metrics, the Forward RPC's
refusals, a duplicate node.id, SIGTERM; then, once ``__consumer_offsets`` exists, the shards it
loads, a group served through Forward (join, sync, commit, fetch), a JoinGroup whose RPC is
cancelled, a commit that survives a restart, and a shard moved away (resigned, NOT_COORDINATOR).
(Groups served end to end through the gateway are in test_consumer_groups.py; coordinator
failover in tests/e2e.)"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_support import running_cluster, wait_for
from kazoo.client import KazooClient

from services.cli.local_cluster import LocalCluster
from services.cli.probes import http_ready
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey, decode_response_body, encode_request_body
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2 as pb
from services.common.rpc.kafkapy.v1 import group_coordinator_pb2_grpc
from services.common.zk.layout import (
    CONSUMER_OFFSETS_TOPIC,
    GROUP_COORDINATOR_SHARDS,
    ShardMap,
    ShardOwner,
    group_coordinator_path,
    group_partition,
)

pytestmark = pytest.mark.integration

ROLE = "group_coordinator"
OFFSETS_PARTITIONS = 4  # a small __consumer_offsets keeps the loads cheap
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("gc-process"),
        gateways=1,
        storage_nodes=1,
        controllers=1,
        group_coordinators=1,
        extra={
            "controller": ["--offsets.topic.num.partitions", str(OFFSETS_PARTITIONS)],
            "group_coordinator": ["--group.initial.rebalance.delay.ms", "0"],
        },
    ) as c:
        yield c


def forward(
    address: str, api_key: int, version: int, body: bytes, timeout: float = 10
) -> pb.ForwardResponse:
    async def call() -> pb.ForwardResponse:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = group_coordinator_pb2_grpc.GroupCoordinatorStub(channel)
            return await stub.Forward(
                pb.ForwardRequest(
                    api_key=api_key,
                    api_version=version,
                    request=body,
                    client_id="probe",
                    client_host="/127.0.0.1",
                ),
                timeout=timeout,
            )

    return asyncio.run(call())


def test_registers_and_serves_health_and_metrics(small_cluster: LocalCluster) -> None:
    zk = KazooClient(hosts=small_cluster.zk_connect)
    zk.start()
    try:
        data, stat = zk.get(group_coordinator_path(0))
        reg = json.loads(data)
        assert stat.ephemeralOwner != 0
        assert f"{reg['host']}:{reg['port']}" == small_cluster.address(ROLE, 0)
        assert reg["rack"] == "zone-a"
    finally:
        zk.stop()
    base = small_cluster.admin_url(ROLE, 0)
    with urllib.request.urlopen(base + "/readyz", timeout=5) as r:
        assert r.status == 200
    with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
        text = r.read().decode()
    assert "kafka_coordinator_group_groupmetadatamanager_numgroups " in text
    assert "kafkapy_group_coordinator_shards " in text


def test_forward_refuses_what_it_cannot_handle(small_cluster: LocalCluster) -> None:
    address = small_cluster.address(ROLE, 0)
    # not a group API, and a group API at a version it does not serve
    got = forward(address, ApiKey.PRODUCE, 9, b"")
    assert got.error_code == ErrorCode.UNSUPPORTED_VERSION and got.error_message
    got = forward(address, ApiKey.JOIN_GROUP, 42, b"")
    assert got.error_code == ErrorCode.UNSUPPORTED_VERSION
    # a body that does not decode
    got = forward(address, ApiKey.HEARTBEAT, 4, b"\xff\xff\xff")
    assert got.error_code == ErrorCode.INVALID_REQUEST and "malformed" in got.error_message
    # a well-formed request: answered inside the Kafka response (the process keeps serving)
    body = encode_request_body(
        ApiKey.HEARTBEAT,
        4,
        {
            "group_id": "nobody-home",
            "generation_id": 1,
            "member_id": "m",
            "group_instance_id": None,
        },
    )
    got = forward(address, ApiKey.HEARTBEAT, 4, body)
    assert got.error_code == 0
    response, _ = decode_response_body(ApiKey.HEARTBEAT, 4, got.response)
    assert response["error_code"] in (
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
    )


def _run_coordinator(cluster: LocalCluster, node_id: int, tmp: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "services.group_coordinator",
            "--node.id", str(node_id), "--listeners", "GRPC://127.0.0.1:0",
            "--zookeeper.connect", cluster.zk_connect, "--admin.port", "0",
            "--zookeeper.session.timeout.ms", "3000", "--log.format", "json",
        ],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )  # fmt: skip


def test_duplicate_node_id_is_refused_in_one_line(
    small_cluster: LocalCluster, tmp_path: Path
) -> None:
    proc = _run_coordinator(small_cluster, 0, tmp_path)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    text = out.decode()
    assert "already registered" in text and "node.id 0" in text, text[-2000:]


def test_bad_setting_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "services.group_coordinator", "--node.id", "-3"],
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "node.id" in lines[0], lines


def test_sigterm_deregisters_and_exits_0(small_cluster: LocalCluster, tmp_path: Path) -> None:
    proc = _run_coordinator(small_cluster, 7, tmp_path)
    zk = KazooClient(hosts=small_cluster.zk_connect)
    zk.start()
    try:
        deadline = time.monotonic() + 30
        while zk.exists(group_coordinator_path(7)) is None:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "node 7 never registered"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert zk.exists(group_coordinator_path(7)) is None
    finally:
        if proc.poll() is None:
            proc.kill()
        zk.stop()


# ---- with __consumer_offsets: shards, groups, restart, moves ----------------------------------
SESSION_MS = 10000
REBALANCE_MS = 20000
PROTOCOL = [{"name": "range", "metadata": b"subscription"}]


def log_size(cluster: LocalCluster) -> int:
    return cluster.log_path(ROLE, 0).stat().st_size


def logged_since(cluster: LocalCluster, start: int, text: str) -> bool:
    with open(cluster.log_path(ROLE, 0), "rb") as f:
        f.seek(start)
        return text in f.read().decode(errors="replace")


def call(
    cluster: LocalCluster, api_key: int, version: int, body: dict[str, Any], timeout: float = 30
) -> dict[str, Any]:
    """A group request through Forward; the decoded Kafka response body."""
    raw = encode_request_body(api_key, version, body)
    got = forward(cluster.address(ROLE, 0), api_key, version, raw, timeout)
    assert got.error_code == 0, got.error_message
    response, _ = decode_response_body(api_key, version, got.response)
    return response


def join(
    cluster: LocalCluster, group: str, member_id: str = "", timeout: float = 30
) -> dict[str, Any]:
    body = {
        "group_id": group,
        "session_timeout": SESSION_MS,
        "rebalance_timeout": REBALANCE_MS,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": PROTOCOL,
    }
    return call(cluster, ApiKey.JOIN_GROUP, 5, body, timeout)


def join_as_new_member(cluster: LocalCluster, group: str) -> dict[str, Any]:
    """KIP-394: the first JoinGroup (v4+) only hands out a member id."""
    first = join(cluster, group)
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and first["member_id"]
    return join(cluster, group, str(first["member_id"]))


def heartbeat(cluster: LocalCluster, group: str, member_id: str, generation: int) -> int:
    body = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member_id,
        "group_instance_id": None,
    }
    return int(call(cluster, ApiKey.HEARTBEAT, 4, body)["error_code"])


def fetch_offsets(cluster: LocalCluster, group: str, topic: str) -> dict[str, Any]:
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1]}]}
    return call(cluster, ApiKey.OFFSET_FETCH, 5, body)


def read_shard_map(zk: KazooClient) -> ShardMap | None:
    if zk.exists(GROUP_COORDINATOR_SHARDS) is None:
        return None
    data, _ = zk.get(GROUP_COORDINATOR_SHARDS)
    return ShardMap.from_json(data) if data else None


def group_in(partition: int, prefix: str) -> str:
    return next(
        g
        for i in range(10_000)
        if group_partition(g := f"{prefix}-{i}", OFFSETS_PARTITIONS) == partition
    )


@pytest.fixture(scope="module")
def offsets_topic(small_cluster: LocalCluster) -> Iterator[KazooClient]:
    """``__consumer_offsets`` created by hand (admin API); the controller places its shards on
    coordinator 0, which loads them. Yields a ZooKeeper client."""
    start = log_size(small_cluster)
    admin = AdminClient({"bootstrap.servers": small_cluster.bootstrap})
    topic = NewTopic(
        CONSUMER_OFFSETS_TOPIC, OFFSETS_PARTITIONS, 1, config={"cleanup.policy": "compact"}
    )
    admin.create_topics([topic], operation_timeout=30)[CONSUMER_OFFSETS_TOPIC].result(60)
    zk = KazooClient(hosts=small_cluster.zk_connect)
    zk.start()
    try:
        wait_for(
            "the shard map",
            lambda: (m := read_shard_map(zk)) is not None and len(m.shards) == OFFSETS_PARTITIONS,
        )
        elected = [
            f"Elected as the group coordinator for partition {p}" for p in range(OFFSETS_PARTITIONS)
        ]
        wait_for(
            "every shard loaded",
            lambda: all(logged_since(small_cluster, start, line) for line in elected),
        )
        yield zk
    finally:
        zk.stop()


def test_loads_the_shards_placed_here(
    small_cluster: LocalCluster, offsets_topic: KazooClient
) -> None:
    shard_map = read_shard_map(offsets_topic)
    assert shard_map is not None and shard_map.partitions == OFFSETS_PARTITIONS
    assert {s.owner for s in shard_map.shards.values()} == {0}
    base = small_cluster.admin_url(ROLE, 0)
    port = int(base.rsplit(":", 1)[1])
    wait_for("ready", lambda: http_ready("127.0.0.1", port, "/readyz", timeout=1.0))
    with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
        text = r.read().decode()
    assert f"kafkapy_group_coordinator_shards {float(OFFSETS_PARTITIONS)}" in text
    assert "kafkapy_group_coordinator_shard_load_seconds_count" in text


def test_group_through_forward_and_commit_survives_restart(
    small_cluster: LocalCluster, offsets_topic: KazooClient
) -> None:
    group, topic = "forwarded-group", "orders"
    # the topic must exist: a coordinator drops the offsets of topics ZooKeeper does not have
    # when it loads a shard (deleted topics; the gateway refuses commits to unknown ones)
    admin = AdminClient({"bootstrap.servers": small_cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)], operation_timeout=30)[topic].result(60)
    joined = join_as_new_member(small_cluster, group)
    assert joined["error_code"] == 0
    member, generation = str(joined["member_id"]), int(joined["generation_id"])
    assert generation == 1 and joined["leader"] == member
    assert [m["member_id"] for m in joined["members"]] == [member]
    synced = call(
        small_cluster,
        ApiKey.SYNC_GROUP,
        3,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member,
            "group_instance_id": None,
            "assignments": [{"member_id": member, "assignment": b"my-partitions"}],
        },
    )
    assert synced["error_code"] == 0 and synced["assignment"] == b"my-partitions"
    assert heartbeat(small_cluster, group, member, generation) == 0
    committed = call(
        small_cluster,
        ApiKey.OFFSET_COMMIT,
        8,
        {
            "group_id": group,
            "generation_id_or_member_epoch": generation,
            "member_id": member,
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 42,
                            "committed_leader_epoch": 3,
                            "committed_metadata": "meta",
                        }
                    ],
                }
            ],
        },
    )
    assert [p["error_code"] for t in committed["topics"] for p in t["partitions"]] == [0]

    def offsets() -> dict[int, tuple[int, str]]:
        got = fetch_offsets(small_cluster, group, topic)
        if got["error_code"] != 0:  # the shard is being taken again (new epoch)
            return {}
        return {
            p["partition_index"]: (p["committed_offset"], p["metadata"])
            for t in got["topics"]
            for p in t["partitions"]
            if p["error_code"] == 0
        }

    assert offsets() == {0: (42, "meta"), 1: (-1, "")}

    # SIGTERM, start again: the controller gives the shards a new epoch (a new registration),
    # the coordinator replays them and the commit is back
    partition = group_partition(group, OFFSETS_PARTITIONS)
    old_map = read_shard_map(offsets_topic)
    assert old_map is not None
    start = log_size(small_cluster)
    small_cluster.kill(ROLE, 0, signal.SIGTERM)
    assert small_cluster.wait_exit(ROLE, 0, timeout=30) == 0
    small_cluster.start_process(ROLE, 0, timeout=60)
    wait_for(
        "a new epoch",
        lambda: (
            (m := read_shard_map(offsets_topic)) is not None
            and m.shards[partition].epoch > old_map.shards[partition].epoch
        ),
    )
    wait_for(
        "the group's shard loaded again",
        lambda: logged_since(
            small_cluster, start, f"Elected as the group coordinator for partition {partition}"
        ),
    )
    wait_for("the committed offset", lambda: offsets() == {0: (42, "meta"), 1: (-1, "")})

    # the restarted coordinator knows the group (its member is not lost with the process)
    def described() -> dict[str, Any] | None:
        body = {"groups": [group], "include_authorized_operations": False}
        (g,) = call(small_cluster, ApiKey.DESCRIBE_GROUPS, 5, body)["groups"]
        return g if g["error_code"] == 0 else None

    g = wait_for("the group described", described)
    assert g["group_state"] == "Stable"
    assert [m["member_id"] for m in g["members"]] == [member]


def test_a_cancelled_join_leaves_the_member_pending(
    small_cluster: LocalCluster, offsets_topic: KazooClient
) -> None:
    group = "cancelled-join"
    first = join_as_new_member(small_cluster, group)
    a, generation = str(first["member_id"]), int(first["generation_id"])
    sync = {
        "group_id": group,
        "generation_id": generation,
        "member_id": a,
        "group_instance_id": None,
        "assignments": [{"member_id": a, "assignment": b"all"}],
    }
    assert call(small_cluster, ApiKey.SYNC_GROUP, 3, sync)["error_code"] == 0
    # member b joins the stable group: the join waits for a to rejoin; b's gateway gives up
    b_first = join(small_cluster, group)
    b = str(b_first["member_id"])
    with pytest.raises(grpc.RpcError) as caught:
        join(small_cluster, group, b, timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    described = call(
        small_cluster,
        ApiKey.DESCRIBE_GROUPS,
        5,
        {"groups": [group], "include_authorized_operations": False},
    )
    (g,) = described["groups"]
    assert g["group_state"] == "PreparingRebalance"
    assert sorted(m["member_id"] for m in g["members"]) == sorted([a, b])
    # a learns of the rebalance and rejoins: the new generation has both members (b stayed)
    assert heartbeat(small_cluster, group, a, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoined = join(small_cluster, group, a)
    assert rejoined["error_code"] == 0 and rejoined["generation_id"] == generation + 1
    assert sorted(m["member_id"] for m in rejoined["members"]) == sorted([a, b])


def test_a_shard_moved_away_is_resigned(
    small_cluster: LocalCluster, offsets_topic: KazooClient
) -> None:
    zk = offsets_topic
    partition = 1
    group = group_in(partition, "moved")
    joined = join_as_new_member(small_cluster, group)
    member, generation = str(joined["member_id"]), int(joined["generation_id"])
    sync = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
        "assignments": [{"member_id": member, "assignment": b"mine"}],
    }
    assert call(small_cluster, ApiKey.SYNC_GROUP, 3, sync)["error_code"] == 0  # now in the log
    data, stat = zk.get(GROUP_COORDINATOR_SHARDS)
    shard_map = ShardMap.from_json(data)
    here = shard_map.shards[partition]
    assert here.owner == 0

    def place(owner: int, epoch: int, version: int) -> int:
        shards = dict(shard_map.shards)
        shards[partition] = ShardOwner(owner, epoch, here.producer_id, here.session)
        moved = ShardMap(shard_map.partitions, shards, shard_map.topic_id)
        return int(zk.set(GROUP_COORDINATOR_SHARDS, moved.to_json(), version=version).version)

    start = log_size(small_cluster)
    version = place(99, here.epoch + 1, stat.version)  # another coordinator, a new epoch
    wait_for(
        "the resignation",
        lambda: logged_since(
            small_cluster, start, f"Resigned as the group coordinator for partition {partition}"
        ),
    )
    assert heartbeat(small_cluster, group, member, generation) == ErrorCode.NOT_COORDINATOR
    assert join(small_cluster, group, member)["error_code"] == ErrorCode.NOT_COORDINATOR
    # the other shards stay here
    other = group_in(0, "stays")
    assert join(small_cluster, other)["error_code"] == ErrorCode.MEMBER_ID_REQUIRED

    # placed here again (epoch + 2): loaded again from the log, the group comes back
    start = log_size(small_cluster)
    place(0, here.epoch + 2, version)
    wait_for(
        "the re-election",
        lambda: logged_since(
            small_cluster, start, f"Elected as the group coordinator for partition {partition}"
        ),
    )
    described = call(
        small_cluster,
        ApiKey.DESCRIBE_GROUPS,
        5,
        {"groups": [group], "include_authorized_operations": False},
    )
    (g,) = described["groups"]
    assert g["error_code"] == 0 and g["group_state"] == "Stable"
    assert [m["member_id"] for m in g["members"]] == [member]


def test_a_placement_for_an_earlier_registration_is_not_taken(
    small_cluster: LocalCluster, offsets_topic: KazooClient
) -> None:
    """The shard map stamps each owner with the czxid of its registration znode: an entry made
    for an earlier registration of this node id (a previous process, a lost session) is left
    alone until the controller places the shard for the current one."""
    zk = offsets_topic
    partition = 2
    group = group_in(partition, "stale")
    data, stat = zk.get(GROUP_COORDINATOR_SHARDS)
    shard_map = ShardMap.from_json(data)
    here = shard_map.shards[partition]
    assert here.owner == 0 and here.session != 0

    def place(owner: int, epoch: int, session: int, version: int) -> int:
        shards = dict(shard_map.shards)
        shards[partition] = ShardOwner(owner, epoch, here.producer_id, session)
        moved = ShardMap(shard_map.partitions, shards, shard_map.topic_id)
        return int(zk.set(GROUP_COORDINATOR_SHARDS, moved.to_json(), version=version).version)

    start = log_size(small_cluster)
    version = place(99, here.epoch + 1, here.session, stat.version)
    wait_for(
        "the resignation",
        lambda: logged_since(
            small_cluster, start, f"Resigned as the group coordinator for partition {partition}"
        ),
    )
    start = log_size(small_cluster)
    version = place(0, here.epoch + 2, here.session - 1, version)  # an older registration's
    time.sleep(1.5)  # the map change reaches the coordinator within milliseconds
    assert not logged_since(
        small_cluster, start, f"Elected as the group coordinator for partition {partition}"
    )
    assert join(small_cluster, group)["error_code"] == ErrorCode.NOT_COORDINATOR

    place(0, here.epoch + 3, here.session, version)  # this registration's: taken
    wait_for(
        "the election",
        lambda: logged_since(
            small_cluster, start, f"Elected as the group coordinator for partition {partition}"
        ),
    )
    assert join(small_cluster, group)["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
