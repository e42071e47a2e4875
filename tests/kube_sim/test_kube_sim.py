"""The chart's workloads run from the real image (podman), with the rendered args, env, volumes
and probes, on three simulated zones whose Node labels an emulated Kubernetes API serves.

Every workload becomes ready through its own /readyz; real clients on the host (confluent-kafka,
kafka-python, kcat) produce and read back through the gateway's published port; each
partition's three replicas sit in three different zones, read from ZooKeeper and the storage
nodes' registered racks (which the nodes learnt through zone discovery)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chart_support import ROOT, render
from kafka_support import (
    Rec,
    assert_partition_logs,
    consume_confluent,
    make_text_records,
    produce_confluent,
)
from kube_api import ZONE_LABEL, emulated_api
from podsim import Simulation, podman

ZONES = {"node-zone-a": "zone-a", "node-zone-b": "zone-b", "node-zone-c": "zone-c"}
VERSION = "0.1.0"
RECORDS = 10_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _podman_works() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (scripts/install-deps.sh installs it)"
    proc = subprocess.run(["podman", "info"], capture_output=True, text=True, check=False)
    return None if proc.returncode == 0 else f"podman cannot run here: {proc.stderr.strip()[:200]}"


@pytest.fixture(scope="module")
def images() -> None:
    reason = _podman_works()
    if reason:
        pytest.skip(reason)
    if os.geteuid() != 0 and not os.environ.get("BASE_IMAGE"):
        pytest.skip("the debootstrap base image needs root; set BASE_IMAGE to a python base image")
    start = time.monotonic()
    subprocess.run([str(ROOT / "scripts" / "build-image.sh")], check=True, timeout=1800)
    print(f"images ready in {time.monotonic() - start:.0f} s")


@pytest.fixture(scope="module")
def sim(images: None) -> Iterator[tuple[Simulation, int]]:
    prefix = f"kpsim{os.getpid()}"
    subnet = f"10.213.{os.getpid() % 200 + 20}.0/24"
    gw_port = _free_port()
    nodes = {name: {ZONE_LABEL: zone} for name, zone in ZONES.items()}
    with emulated_api(nodes, host="0.0.0.0") as url:
        host_ip = subnet.replace(".0/24", ".1")
        api_url = f"http://{host_ip}:{url.rsplit(':', 1)[1]}"
        values: dict[str, Any] = {
            "global": {
                "image": {
                    "repository": "localhost/kafka-py",
                    "tag": VERSION,
                    "pullPolicy": "Never",
                },
                "zookeeper": {"replicas": 1},
                "zones": {"apiUrl": api_url},
            },
            "zookeeper": {
                "image": {"repository": "localhost/kafka-py-zookeeper", "tag": VERSION},
                "heapMb": 256,
            },
            "storage": {"replicas": 3},
            "controller": {"replicas": 2},
            "groupCoordinator": {"replicas": 1},
            "transactionCoordinator": {"replicas": 1},
            "gateway": {
                "replicas": 1,
                "port": gw_port,
                "autoscaling": {"enabled": False},
                "service": {"mode": "LoadBalancer", "advertisedHost": "127.0.0.1"},
            },
        }
        s = Simulation(
            render(values), prefix, subnet, ZONES, namespace="kafka",
            publish={"kafka-py-gateway": gw_port},
        )  # fmt: skip
        try:
            s.create_network()
            start = time.monotonic()
            s.start_all(["zookeeper"])
            s.wait_ready([p for p in s.pods if s.component(p) == "zookeeper"], 120)
            s.start_all(
                ["storage", "controller", "gateway", "group-coordinator", "transaction-coordinator"]
            )
            s.wait_ready(s.pods, 240)
            print(f"kube-sim: {len(s.pods)} pods ready in {time.monotonic() - start:.0f} s")
            yield s, gw_port
        finally:
            s.teardown()


def test_workloads_ready_and_clients_round_trip_across_zones(sim: tuple[Simulation, int]) -> None:
    s, port = sim
    bootstrap = f"127.0.0.1:{port}"
    assert {s.component(p) for p in s.pods} == {
        "zookeeper", "storage", "controller", "gateway", "group-coordinator",
        "transaction-coordinator",
    }  # fmt: skip
    assert len(s.pods) == 9

    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "kube-sim"
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)

    # confluent-kafka: idempotent, acks=all, 10,000 records over 3 partitions
    records = [r for p in range(3) for r in make_text_records(f"c{p}", RECORDS // 3 + (p == 0), p)]
    produce_confluent(bootstrap, topic, records, timeout=180)
    # kafka-python: 10,000 more, acks=all
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    futures = [
        producer.send(topic, value=f"kp-{i}".encode(), partition=i % 3) for i in range(RECORDS)
    ]
    producer.flush(120)
    assert all(f.get(timeout=60) for f in futures)
    producer.close()

    # every partition holds exactly what was produced, in order, at offsets 0..n-1: nothing
    # lost, nothing duplicated
    kp = [Rec(i % 3, None, f"kp-{i}".encode(), (), 0) for i in range(RECORDS)]
    got = consume_confluent(bootstrap, topic, [0, 1, 2], 2 * RECORDS, timeout=180)
    assert_partition_logs(records + kp, got, check_timestamps=False)

    kcat = subprocess.run(
        ["kcat", "-L", "-b", bootstrap, "-m", "10"], capture_output=True, text=True, timeout=60
    )
    assert kcat.returncode == 0 and f"127.0.0.1:{port}" in kcat.stdout, kcat.stdout + kcat.stderr

    # replicas in three zones: the assignment from ZooKeeper, each storage node's rack from its
    # registration (learnt through zone discovery from the emulated API)
    from kazoo.client import KazooClient

    zk_pod = next(p for p in s.pods if s.component(p) == "zookeeper")
    zk = KazooClient(hosts=f"{zk_pod.ip}:2181")
    zk.start(timeout=30)
    try:
        racks = {
            int(b): json.loads(zk.get(f"/brokers/ids/{b}")[0])["rack"]
            for b in zk.get_children("/brokers/ids")
        }
        assignment = json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"]
    finally:
        zk.stop()
    storage = {p.ordinal: p.zone for p in s.pods if s.component(p) == "storage"}
    assert racks == storage, (racks, storage)
    for partition, replicas in assignment.items():
        assert sorted(racks[r] for r in replicas) == ["zone-a", "zone-b", "zone-c"], partition

    # the brokers clients see are the gateway (its advertised address); the gateway itself (a
    # generated id above 1000) took its node's zone (node-zone-a) as its rack
    nodes = admin.describe_cluster(request_timeout=10).result(15).nodes
    assert {(n.host, n.port) for n in nodes} == {("127.0.0.1", port)}
    assert [n.rack for n in nodes if n.id > 1000] == ["zone-a"], nodes


def test_images_are_what_the_chart_expects() -> None:
    """The image's user and entrypoint match the chart's security context and args."""
    if _podman_works():
        pytest.skip(_podman_works())
    out = podman("image", "inspect", f"localhost/kafka-py:{VERSION}")
    cfg = json.loads(out)[0]["Config"]
    assert cfg["User"] == "10001:10001"
    assert cfg["Entrypoint"] == ["/usr/bin/tini", "--", "kafka-py"]
    labels = cfg["Labels"]
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.revision"] not in ("", "unknown")
    assert Path(ROOT / "deploy" / "image" / "Containerfile").is_file()


def _isr_complete(zk_host: str, topic: str, partitions: int, replicas: int) -> bool:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zk_host)
    zk.start(timeout=30)
    try:
        states = [
            json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])
            for p in range(partitions)
        ]
    finally:
        zk.stop()
    return all(len(s["isr"]) == replicas for s in states)


def test_a_deleted_storage_pod_comes_back_with_its_volume(sim: tuple[Simulation, int]) -> None:
    """Delete storage-1 (SIGTERM with the pod's grace period: the controlled shutdown runs)
    while an idempotent acks=all producer writes; start it again on the same volume as the
    StatefulSet controller would: it becomes ready, rejoins every ISR, and every partition holds
    exactly what was acknowledged, once, in order."""
    import threading

    from confluent_kafka.admin import AdminClient, NewTopic

    s, port = sim
    bootstrap = f"127.0.0.1:{port}"
    topic = "kube-sim-delete-pod"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(
        60
    )
    zk_host = f"{next(p for p in s.pods if s.component(p) == 'zookeeper').ip}:2181"
    pod = next(p for p in s.pods if s.component(p) == "storage" and p.ordinal == 1)

    before = [r for p in range(3) for r in make_text_records(f"before{p}", 1000, p)]
    during = [r for p in range(3) for r in make_text_records(f"during{p}", 1000, p)]
    after = [r for p in range(3) for r in make_text_records(f"after{p}", 1000, p)]
    produce_confluent(bootstrap, topic, before, timeout=120)
    errors: list[BaseException] = []

    def produce_during() -> None:
        try:
            produce_confluent(bootstrap, topic, during, config={"linger.ms": 50}, timeout=240)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    writer = threading.Thread(target=produce_during)
    writer.start()
    grace = str(pod.spec["terminationGracePeriodSeconds"])
    podman("stop", "-t", grace, pod.container, timeout=int(grace) + 30)
    podman("rm", pod.container)
    s.start(pod)  # same name, same volume: what the StatefulSet controller does
    s.wait_ready([pod], 120)
    writer.join(300)
    assert not writer.is_alive() and not errors, errors
    produce_confluent(bootstrap, topic, after, timeout=120)

    deadline = time.monotonic() + 120
    while not _isr_complete(zk_host, topic, 3, 3):
        assert time.monotonic() < deadline, "storage-1 did not rejoin every ISR"
        time.sleep(1)
    got = consume_confluent(bootstrap, topic, [0, 1, 2], len(before + during + after), timeout=180)
    assert_partition_logs(before + during + after, got, check_timestamps=False)


def _zk_json(zk_host: str, path: str) -> dict[str, Any]:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zk_host)
    zk.start(timeout=30)
    try:
        return dict(json.loads(zk.get(path)[0]))
    finally:
        zk.stop()


def test_killing_the_active_controllers_pod_hands_over(sim: tuple[Simulation, int]) -> None:
    """kill -9 of the active controller's container while an acks=all producer writes: the
    standby controller takes over (/controller names it), the Deployment's replacement pod
    starts with a new generated id and becomes ready, a topic can be created, nothing produced
    is lost or duplicated."""
    import threading

    from confluent_kafka.admin import AdminClient, NewTopic

    s, port = sim
    bootstrap = f"127.0.0.1:{port}"
    zk_host = f"{next(p for p in s.pods if s.component(p) == 'zookeeper').ip}:2181"
    active = int(_zk_json(zk_host, "/controller")["brokerid"])
    host = _zk_json(zk_host, f"/kafka-py/controllers/{active}")["host"]
    pod = next(p for p in s.pods if s.component(p) == "controller" and p.ip == host)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "kube-sim-controller-kill"
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)
    during = [r for p in range(3) for r in make_text_records(f"ck{p}", 1000, p)]
    errors: list[BaseException] = []

    def produce_during() -> None:
        try:
            produce_confluent(bootstrap, topic, during, config={"linger.ms": 50}, timeout=240)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    writer = threading.Thread(target=produce_during)
    writer.start()
    podman("kill", "-s", "KILL", pod.container)
    podman("rm", "-f", pod.container)
    deadline = time.monotonic() + 90
    while True:
        try:
            now = int(_zk_json(zk_host, "/controller")["brokerid"])
        except Exception:  # noqa: BLE001 - no /controller between two terms
            now = active
        if now != active:
            break
        assert time.monotonic() < deadline, "no other controller took over"
        time.sleep(0.5)
    s.start(pod)  # the Deployment's replacement pod (a new generated id)
    s.wait_ready([pod], 120)
    writer.join(300)
    assert not writer.is_alive() and not errors, errors
    later = "kube-sim-after-failover"
    admin.create_topics([NewTopic(later, 1, 3)])[later].result(60)
    got = consume_confluent(bootstrap, topic, [0, 1, 2], len(during), timeout=180)
    assert_partition_logs(during, got, check_timestamps=False)
