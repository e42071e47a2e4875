"""ZooKeeper paths and JSON payloads, laid out exactly as Kafka lays them out.

Our own additions live under ``/kafka-py`` (gateways, controller endpoints).
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_SEQID = "/brokers/seqid"
BROKER_TOPICS = "/brokers/topics"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CLIENTS = "/config/clients"
CONFIG_USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
KAFKA_PY = "/kafka-py"
GATEWAYS = f"{KAFKA_PY}/gateways"
CONTROLLERS = f"{KAFKA_PY}/controllers"
GROUP_COORDINATORS = f"{KAFKA_PY}/group-coordinators"
GROUP_COORDINATOR_IDS = f"{GROUP_COORDINATORS}/ids"
# The active controller's placement of __consumer_offsets partitions on group coordinators.
GROUP_COORDINATOR_SHARDS = f"{GROUP_COORDINATORS}/shards"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_COORDINATORS = f"{KAFKA_PY}/transaction-coordinators"
TRANSACTION_COORDINATOR_IDS = f"{TRANSACTION_COORDINATORS}/ids"
# The active controller's placement of __transaction_state partitions on transaction coordinators.
TRANSACTION_COORDINATOR_SHARDS = f"{TRANSACTION_COORDINATORS}/shards"
TRANSACTION_STATE_TOPIC = "__transaction_state"
# Internal topics whose partitions the controller places on coordinators.
SHARDED_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})

PERSISTENT_PATHS = (
    "/consumers",
    BROKER_IDS,
    BROKER_TOPICS,
    BROKER_SEQID,
    CONFIG_CHANGES,
    CONFIG_TOPICS,
    CONFIG_BROKERS,
    CONFIG_CLIENTS,
    CONFIG_USERS,
    DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    LOG_DIR_EVENT_NOTIFICATION,
    GATEWAYS,
    CONTROLLERS,
    GROUP_COORDINATOR_IDS,
    TRANSACTION_COORDINATOR_IDS,
)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(entity: str) -> str:
    """``/config/brokers/<id>`` or ``/config/brokers/<default>`` (dynamic broker configs)."""
    return f"{CONFIG_BROKERS}/{entity}"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def config_change_prefix() -> str:
    """Prefix of the persistent sequential ``/config/changes/config_change_<seq>`` znodes."""
    return f"{CONFIG_CHANGES}/config_change_"


def gateway_path(node_id: int) -> str:
    return f"{GATEWAYS}/{node_id}"


def controller_endpoint_path(controller_id: int) -> str:
    return f"{CONTROLLERS}/{controller_id}"


def group_coordinator_path(node_id: int) -> str:
    return f"{GROUP_COORDINATOR_IDS}/{node_id}"


@dataclass(frozen=True, slots=True)
class CoordinatorKind:
    """A family of coordinators that own the partitions ("shards") of one internal topic."""

    name: str  # "group" | "transaction" (log events, metric names)
    topic: str
    root: str

    @property
    def ids(self) -> str:
        return f"{self.root}/ids"

    @property
    def shards(self) -> str:
        return f"{self.root}/shards"

    def path(self, node_id: int) -> str:
        return f"{self.ids}/{node_id}"


GROUP = CoordinatorKind("group", CONSUMER_OFFSETS_TOPIC, GROUP_COORDINATORS)
TRANSACTION = CoordinatorKind("transaction", TRANSACTION_STATE_TOPIC, TRANSACTION_COORDINATORS)


def now_ms_str() -> str:
    return str(int(time.time() * 1000))


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def loads(data: bytes | None) -> Any:
    return json.loads(data) if data else None


# ---- payloads -------------------------------------------------------------------------


def cluster_id_json(cluster_id: str) -> bytes:
    return dumps({"version": "1", "id": cluster_id})


def controller_json(controller_id: int) -> bytes:
    return dumps({"version": 1, "brokerid": controller_id, "timestamp": now_ms_str()})


STATIC_CONFIGS_KEY = "kafkapy_static_configs"


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """``/brokers/ids/<id>``: a storage node (internal endpoint is gRPC)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    timestamp: str = field(default_factory=now_ms_str)
    # the node's explicitly set dynamic-capable broker configs (kafka-py key, so gateways can
    # report STATIC_BROKER_CONFIG for this broker id; Kafka's tools ignore unknown keys)
    static_configs: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "listener_security_protocol_map": {"GRPC": "PLAINTEXT"},
            "endpoints": [f"GRPC://{self.host}:{self.port}"],
            "jmx_port": -1,
            "features": {},
            "host": self.host,
            "port": self.port,
            "timestamp": self.timestamp,
            "version": 5,
        }
        if self.rack is not None:
            body["rack"] = self.rack
        if self.static_configs:
            body[STATIC_CONFIGS_KEY] = dict(self.static_configs)
        return dumps(body)

    @classmethod
    def from_json(cls, broker_id: int, data: bytes) -> BrokerRegistration:
        d = loads(data)
        static = d.get(STATIC_CONFIGS_KEY) or {}
        return cls(
            broker_id,
            d["host"],
            int(d["port"]),
            d.get("rack"),
            d.get("timestamp", ""),
            tuple(sorted((str(k), str(v)) for k, v in static.items())),
        )

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """``/kafka-py/gateways/<id>`` and ``/kafka-py/controllers/<id>``.

    ``host``/``port`` are the first listener's; a gateway with several listeners also lists
    each as ``NAME://host:port`` under ``endpoints`` (as Kafka's broker registration does)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    listeners: tuple[tuple[str, str, int], ...] = ()  # (name, host, port)

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "version": 1,
            "host": self.host,
            "port": self.port,
            "rack": self.rack,
            "timestamp": now_ms_str(),
        }
        if self.listeners:
            body["endpoints"] = [
                f"{n}://[{h}]:{p}" if ":" in h else f"{n}://{h}:{p}" for n, h, p in self.listeners
            ]
        return dumps(body)

    @classmethod
    def from_json(cls, node_id: int, data: bytes) -> Endpoint:
        d = loads(data)
        listeners = []
        for item in d.get("endpoints") or ():
            name, _, rest = str(item).partition("://")
            host, _, port = rest.rpartition(":")
            listeners.append((name, host.strip("[]"), int(port)))
        return cls(node_id, d["host"], int(d["port"]), d.get("rack"), tuple(listeners))

    def for_listener(self, name: str | None) -> Endpoint:
        """This node as a client of listener ``name`` sees it (itself without that listener)."""
        if name is None:
            return self
        for n, h, p in self.listeners:
            if n == name:
                return Endpoint(self.node_id, h, p, self.rack, self.listeners)
        return self

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def topic_assignment_json(
    partitions: dict[int, list[int]],
    topic_id: str | None = None,
    adding: dict[int, list[int]] | None = None,
    removing: dict[int, list[int]] | None = None,
) -> bytes:
    """``/brokers/topics/<t>``; ``adding``/``removing``: the replicas of partitions being
    reassigned (KIP-455), only partitions with some listed, as Kafka writes them."""

    def per_partition(m: dict[int, list[int]] | None) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted((m or {}).items()) if r}

    body: dict[str, Any] = {
        "version": 3 if topic_id else 2,
        "partitions": {str(p): list(r) for p, r in sorted(partitions.items())},
        "adding_replicas": per_partition(adding),
        "removing_replicas": per_partition(removing),
    }
    if topic_id:
        body["topic_id"] = topic_id
    return dumps(body)


def parse_topic_assignment(data: bytes) -> tuple[dict[int, list[int]], str | None]:
    d = loads(data) or {}
    parts = {int(p): [int(b) for b in r] for p, r in d.get("partitions", {}).items()}
    return parts, d.get("topic_id")


def parse_topic_reassignment(data: bytes) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """(adding_replicas, removing_replicas) of ``/brokers/topics/<t>``, by partition."""
    d = loads(data) or {}

    def per_partition(key: str) -> dict[int, list[int]]:
        return {int(p): [int(b) for b in r] for p, r in (d.get(key) or {}).items() if r}

    return per_partition("adding_replicas"), per_partition("removing_replicas")


def reassign_partitions_json(moves: dict[tuple[str, int], list[int]]) -> bytes:
    """The legacy ``/admin/reassign_partitions`` znode (kafka-reassign-partitions.sh's file)."""
    return dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": list(r)}
                for (t, p), r in sorted(moves.items())
            ],
        }
    )


def parse_reassign_partitions(data: bytes) -> dict[tuple[str, int], list[int]]:
    """``{"version":1,"partitions":[{"topic","partition","replicas"[,"log_dirs"]}]}``; raises
    ValueError when malformed."""
    try:
        d = json.loads(data)
        out: dict[tuple[str, int], list[int]] = {}
        for entry in d["partitions"]:
            replicas = entry["replicas"]
            if not isinstance(replicas, list) or not all(isinstance(b, int) for b in replicas):
                raise ValueError(f"replicas must be a list of broker ids: {replicas!r}")
            out[(str(entry["topic"]), int(entry["partition"]))] = list(replicas)
        return out
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"malformed reassignment JSON: {exc}") from None


@dataclass(frozen=True, slots=True)
class PartitionStateZk:
    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int

    def to_json(self) -> bytes:
        return dumps(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "version": 1,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> PartitionStateZk:
        d = loads(data)
        return cls(
            int(d["leader"]),
            int(d["leader_epoch"]),
            [int(b) for b in d["isr"]],
            int(d["controller_epoch"]),
        )


def topic_config_json(config: dict[str, str]) -> bytes:
    return dumps({"version": 1, "config": dict(config)})


def parse_topic_config(data: bytes | None) -> dict[str, str]:
    d = loads(data) or {}
    return {str(k): str(v) for k, v in d.get("config", {}).items()}


def config_change_json(entity_path: str) -> bytes:
    return dumps({"version": 2, "entity_path": entity_path})


def producer_id_block_json(broker_id: int, block_start: int, block_end: int) -> bytes:
    return dumps(
        {
            "version": 1,
            "broker": broker_id,
            "block_start": str(block_start),
            "block_end": str(block_end),
        }
    )


# ---- topic ids (Kafka's Uuid: 16 bytes, string = base64url without padding) -----------


def topic_id_to_str(topic_id: bytes) -> str:
    return base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode()


def topic_id_from_str(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_topic_id() -> bytes:
    """A random topic id as Kafka's ``Uuid.randomUuid`` makes it (never zero, the metadata
    topic's id, or one whose string form starts with '-')."""
    while True:
        raw = bytearray(os.urandom(16))
        raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
        raw[8] = (raw[8] & 0x3F) | 0x80  # IETF variant
        candidate = bytes(raw)
        if int.from_bytes(candidate, "big") > 1 and not topic_id_to_str(candidate).startswith("-"):
            return candidate


@dataclass(frozen=True, slots=True)
class ShardOwner:
    """Who serves one ``__consumer_offsets`` partition. ``epoch`` goes up by one each time the
    owner changes; it is also the producer epoch of the owner's appends (with ``producer_id``),
    so storage rejects a former owner's writes once the new owner has written (fencing).
    ``session`` is the czxid of the owner's registration znode: an owner that registers again
    (a restarted process) is a new owner, with a new epoch."""

    owner: int
    epoch: int
    producer_id: int
    session: int = 0


@dataclass(frozen=True, slots=True)
class ShardMap:
    """``/kafka-py/group-coordinators/shards``:
    ``{"version":1,"partitions":50,"shards":{"0":{"owner":1,"epoch":3,"producer_id":4000},...}}``.
    ``partitions`` is the partition count of ``__consumer_offsets`` (the group hash modulus);
    ``topic_id`` the topic the shards belong to (optional key: a recreated topic starts over)."""

    partitions: int
    shards: dict[int, ShardOwner]
    topic_id: str = ""

    def to_json(self) -> bytes:
        topic_id = {"topic_id": self.topic_id} if self.topic_id else {}
        return dumps(
            {
                "version": 1,
                "partitions": self.partitions,
                **topic_id,
                "shards": {
                    str(p): {
                        "owner": s.owner,
                        "epoch": s.epoch,
                        "producer_id": s.producer_id,
                        "session": s.session,
                    }
                    for p, s in sorted(self.shards.items())
                },
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> ShardMap:
        d = loads(data)
        shards = {
            int(p): ShardOwner(
                int(s["owner"]), int(s["epoch"]), int(s["producer_id"]), int(s.get("session", 0))
            )
            for p, s in d.get("shards", {}).items()
        }
        return cls(int(d["partitions"]), shards, str(d.get("topic_id") or ""))


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit wrap-around), signed."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def shard_of(key: str, partitions: int) -> int:
    """The internal-topic partition of a group or transactional id: Kafka's
    ``Utils.abs(key.hashCode) % partitions`` (``Utils.abs`` maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def group_partition(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's
    ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`` (``Utils.abs`` maps
    Integer.MIN_VALUE to 0)."""
    return shard_of(group_id, partitions)
