"""What the console reads and changes, through the same admin layers as the CLI.

Topics, configs, offsets and groups go through confluent-kafka's AdminClient (so the console is
one more Kafka admin client of the gateways); partition leaders, replicas and ISRs and the
registered nodes come from ZooKeeper, as ``kafka-py topics --describe`` reads them. Every method
blocks; the REST layer runs them in threads. Failures are ``CliError`` with a ``kind``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from services.cli.common import CliError, client_logger, kafka_cli_error
from services.cli.group_admin import GroupAdmin
from services.cli.topics import INTERNAL_TOPICS
from services.cli.zk_view import ClusterState, NodesView, PartitionState, read_nodes, read_state
from services.common.zk import layout


class ConsoleAdmin:
    def __init__(self, conf: Mapping[str, Any], zk_connect: str, timeout_s: float) -> None:
        self.conf = dict(conf)
        self.timeout = timeout_s
        self.admin = AdminClient(self.conf)
        self.groups = GroupAdmin(self.admin, timeout_s)
        self._zk_connect = zk_connect
        self._zk: KazooClient | None = None
        self._zk_lock = threading.Lock()

    # ---- ZooKeeper ----------------------------------------------------------------------------
    def _zk_client(self) -> KazooClient:
        with self._zk_lock:
            if self._zk is None or not self._zk.connected:
                if self._zk is not None:
                    self._zk.stop()
                    self._zk.close()
                client = KazooClient(
                    hosts=self._zk_connect,
                    timeout=self.timeout,
                    read_only=True,
                    logger=client_logger(False),
                )
                try:
                    client.start(timeout=self.timeout)
                except KazooTimeoutError:
                    client.close()
                    raise CliError(
                        f"cannot reach ZooKeeper at {self._zk_connect}", kind="unavailable"
                    ) from None
                self._zk = client
            return self._zk

    def _zk_read(self, names: Sequence[str] | None) -> tuple[NodesView, ClusterState]:
        client = self._zk_client()
        try:
            if names is None:
                names = sorted(client.get_children(layout.BROKER_TOPICS))
            return read_nodes(client), read_state(client, list(names))
        except CliError:
            raise
        except Exception as exc:  # a session lost mid-read: the next call reconnects
            raise CliError(f"ZooKeeper read failed: {exc}", kind="unavailable") from None

    def close(self) -> None:
        with self._zk_lock:
            if self._zk is not None:
                self._zk.stop()
                self._zk.close()
                self._zk = None

    # ---- cluster ------------------------------------------------------------------------------
    def overview(self) -> dict[str, Any]:
        nodes, state = self._zk_read(None)
        leaders: dict[int, int] = {}
        replicas: dict[int, int] = {}
        under = offline = partitions = 0
        for topic in state.topics.values():
            for p in topic.partitions:
                partitions += 1
                if p.leader is None:
                    offline += 1
                else:
                    leaders[p.leader] = leaders.get(p.leader, 0) + 1
                if len(p.isr) < len(p.replicas):
                    under += 1
                for r in p.replicas:
                    replicas[r] = replicas.get(r, 0) + 1
        storage = [
            {
                "id": i,
                "address": reg.address,
                "zone": reg.rack,
                "live": True,
                "leaders": leaders.get(i, 0),
                "replicas": replicas.get(i, 0),
            }
            for i, reg in sorted(nodes.storage.items())
        ]
        # nodes that hold replicas but are not registered are down
        storage += [
            {
                "id": i,
                "address": None,
                "zone": None,
                "live": False,
                "leaders": leaders.get(i, 0),
                "replicas": n,
            }
            for i, n in sorted(replicas.items())
            if i not in nodes.storage
        ]
        gateways = [
            {"id": i, "address": ep.address, "zone": ep.rack}
            for i, ep in sorted(nodes.gateways.items())
        ]
        return {
            "controller_id": nodes.controller_id,
            "storage_nodes": storage,
            "gateways": gateways,
            "topics": len(state.topics),
            "partitions": partitions,
            "under_replicated_partitions": under,
            "offline_partitions": offline,
        }

    # ---- topics -------------------------------------------------------------------------------
    def topics(self) -> list[dict[str, Any]]:
        _, state = self._zk_read(None)
        return [
            {
                "name": t.name,
                "internal": t.name in INTERNAL_TOPICS,
                "partitions": len(t.partitions),
                "replication_factor": len(t.partitions[0].replicas) if t.partitions else 0,
                "under_replicated_partitions": sum(
                    len(p.isr) < len(p.replicas) for p in t.partitions
                ),
                "offline_partitions": sum(p.leader is None for p in t.partitions),
                "marked_for_deletion": t.marked_for_deletion,
            }
            for t in sorted(state.topics.values(), key=lambda t: t.name)
        ]

    def topic(self, name: str) -> dict[str, Any]:
        _, state = self._zk_read([name])
        topic = state.topics.get(name)
        if topic is None:
            raise CliError(f"topic '{name}' does not exist", kind="not_found")
        parts = sorted(topic.partitions, key=lambda p: p.partition)
        tps = [(name, p.partition) for p in parts]
        try:
            earliest = self.groups.lookup(tps, "earliest")
            latest = self.groups.lookup(tps, "latest")
        except CliError:
            earliest = latest = {}  # offsets unknown while a partition has no leader
        return {
            "name": name,
            "topic_id": topic.topic_id,
            "internal": name in INTERNAL_TOPICS,
            "marked_for_deletion": topic.marked_for_deletion,
            "partitions": [_partition_doc(p, earliest, latest, name) for p in parts],
            "configs": self.topic_configs(name),
        }

    def topic_configs(self, name: str) -> list[dict[str, Any]]:
        futures = self.admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, name)], request_timeout=self.timeout
        )
        entries: Mapping[str, Any] = self.groups.wait(next(iter(futures.values())))
        return [
            {
                "name": k,
                "value": None if e.is_sensitive else e.value,
                "source": _source_name(e.source),
                "is_default": bool(e.is_default),
                "read_only": bool(e.is_read_only),
                "sensitive": bool(e.is_sensitive),
            }
            for k, e in sorted(entries.items())
        ]

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> None:
        try:
            new = NewTopic(
                name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                config=dict(configs),
            )
            fut = self.admin.create_topics(
                [new], operation_timeout=self.timeout, request_timeout=self.timeout
            )[name]
        except (ValueError, TypeError) as exc:  # refused by the client library before sending
            raise CliError(str(exc)) from None
        self.groups.wait(fut)

    def delete_topic(self, name: str) -> None:
        if name not in self._topic_names():
            raise CliError(f"topic '{name}' does not exist", kind="not_found")
        fut = self.admin.delete_topics(
            [name], operation_timeout=self.timeout, request_timeout=self.timeout
        )[name]
        self.groups.wait(fut)

    def alter_topic_configs(
        self, name: str, sets: Mapping[str, str], deletes: Sequence[str]
    ) -> list[dict[str, Any]]:
        if name not in self._topic_names():
            raise CliError(f"topic '{name}' does not exist", kind="not_found")
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()
        ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
        if entries:
            try:
                resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
                futures = self.admin.incremental_alter_configs([resource])
            except (ValueError, TypeError) as exc:
                raise CliError(str(exc)) from None
            self.groups.wait(next(iter(futures.values())))
        return self.topic_configs(name)

    def _topic_names(self) -> set[str]:
        try:
            return set(self.admin.list_topics(timeout=self.timeout).topics)
        except KafkaException as exc:
            raise kafka_cli_error(exc) from None

    # ---- groups -------------------------------------------------------------------------------
    def group_list(self) -> list[dict[str, str]]:
        return [{"group": g, "state": s} for g, s in self.groups.list_groups()]

    def group(self, name: str) -> dict[str, Any]:
        (doc,) = self.groups.group_docs([name])
        if doc["state"] == "Dead":
            raise CliError(f"Consumer group '{name}' does not exist.", kind="not_found")
        doc["total_lag"] = sum(r["lag"] or 0 for r in doc["offsets"])
        doc["members"] = [
            {**m, "assignment": [{"topic": t, "partition": p} for t, p in m["assignment"]]}
            for m in doc["members"]
        ]
        return doc

    def total_lag(self, name: str) -> int:
        return sum(int(r["lag"] or 0) for r in self.groups.offset_rows(name, []))

    def reset_offsets(
        self,
        group: str,
        scenario: str,
        value: str | None,
        topics: Sequence[str],
        all_topics: bool,
        execute: bool,
    ) -> list[dict[str, Any]]:
        described = self.groups.describe([group])[group]
        self.groups.require_inactive(group, described)
        plan = self.groups.plan(group, scenario, value, topics, all_topics)
        if execute:
            self.groups.apply(group, plan)
        return [{"topic": t, "partition": p, "new_offset": o} for (t, p), o in sorted(plan.items())]


def _source_name(source: Any) -> str:
    """Kafka's ConfigSource name (``DYNAMIC_TOPIC_CONFIG``...) of librdkafka's number."""
    try:
        return str(ConfigSource(int(source)).name)
    except (ValueError, TypeError):
        return "UNKNOWN"


def _partition_doc(
    p: PartitionState,
    earliest: Mapping[tuple[str, int], int],
    latest: Mapping[tuple[str, int], int],
    topic: str,
) -> dict[str, Any]:
    return {
        "partition": p.partition,
        "leader": p.leader,
        "replicas": p.replicas,
        "isr": p.isr,
        "adding": p.adding,
        "removing": p.removing,
        "under_replicated": len(p.isr) < len(p.replicas),
        "earliest_offset": earliest.get((topic, p.partition)),
        "latest_offset": latest.get((topic, p.partition)),
    }
