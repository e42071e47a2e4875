"""kill -9 of the active controller: a standby takes over within 5 s and admin works again;
storage nodes reject orders carrying a stale controller epoch."""

from __future__ import annotations

import json
import signal
import time

import grpc
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from services.cli.local_cluster import LocalCluster
from services.common.errors import ErrorCode
from services.common.rpc.kafkapy.v1 import storage_pb2, storage_pb2_grpc

pytestmark = pytest.mark.e2e


def test_active_controller_failover(fault_cluster: LocalCluster) -> None:
    zk = KazooClient(hosts=fault_cluster.zk_connect)
    zk.start(10)
    try:
        old = json.loads(zk.get("/controller")[0])["brokerid"]
        old_epoch = int(zk.get("/controller_epoch")[0])
        victim = fault_cluster.active_controller_index()
        killed_at = time.monotonic()
        fault_cluster.kill("controller", victim, signal.SIGKILL)
        new = None
        while time.monotonic() - killed_at < 10:
            try:
                data = zk.get("/controller")[0]
            except NoNodeError:
                data = None
            if data and json.loads(data)["brokerid"] != old:
                new = json.loads(data)["brokerid"]
                break
            time.sleep(0.05)
        takeover = time.monotonic() - killed_at
        assert new is not None, "no standby took over"
        assert takeover < 5.0, f"takeover took {takeover:.2f}s"
        new_epoch = int(zk.get("/controller_epoch")[0])
        assert new_epoch == old_epoch + 1

        standby = 1 - victim
        log_text = (fault_cluster.data_dir / "logs" / f"controller-{standby}.log").read_text()
        assert "elected" in log_text and str(new_epoch) in log_text

        admin = AdminClient({"bootstrap.servers": fault_cluster.bootstrap})
        admin.create_topics([NewTopic("after-failover", 3, 1)])["after-failover"].result(30)
        md = admin.list_topics("after-failover", timeout=10)
        assert len(md.topics["after-failover"].partitions) == 3

        # A storage node rejects an order that carries the deposed controller's epoch.
        broker = sorted(zk.get_children("/brokers/ids"))[0]
        reg = json.loads(zk.get(f"/brokers/ids/{broker}")[0])
        channel = grpc.insecure_channel(f"{reg['host']}:{reg['port']}")
        stub = storage_pb2_grpc.StorageStub(channel)
        resp = stub.UpdatePartitions(
            storage_pb2.UpdatePartitionsRequest(
                controller_id=old,
                controller_epoch=old_epoch,
                partitions=[
                    storage_pb2.PartitionState(
                        topic="after-failover",
                        partition=0,
                        leader=int(broker),
                        leader_epoch=99,
                        isr=[int(broker)],
                        replicas=[int(broker)],
                    )
                ],
            ),
            timeout=10,
        )
        assert resp.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
        channel.close()
    finally:
        zk.stop()
        zk.close()
