"""A service's view of cluster metadata, kept up to date by ZooKeeper watches.

What is cached: topics (assignment, topic id, partition states, config overrides), storage
brokers (``/brokers/ids``), gateways, controller and group coordinator endpoints and the
placement of ``__consumer_offsets`` partitions on group coordinators (``/kafka-py/...``), the
active controller and the cluster id.

Consistency: a topic is published only once its assignment, the state of every assigned
partition and its config znode have all been read. When partitions are added to a published
topic, the new ones appear only when all of their states are loaded. Published objects are
immutable and replaced wholesale, so a handler reading the cache between two awaits sees one
consistent version. ``wait_for`` lets admin handlers wait until a change is visible.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from services.common.logging import get_logger
from services.common.zk import layout
from services.common.zk.client import AsyncZk, ZnodeStat
from services.common.zk.watches import WatchSet

log = get_logger("metadata")

# Kafka's internal topics (Topic.isInternal): clients cannot produce to them directly.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int  # ZooKeeper version of the state znode


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None
    partitions: Mapping[int, PartitionInfo]
    config: Mapping[str, str]  # overrides only

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


def parse_topic_id(raw: Any) -> uuid.UUID | None:
    """Kafka stores ``Uuid.toString()`` (22-char URL-safe base64); canonical UUIDs also accepted."""
    if not isinstance(raw, str) or not raw:
        return None
    try:
        if len(raw) == 36:
            return uuid.UUID(raw)
        data = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
    except (ValueError, binascii.Error):
        return None
    return uuid.UUID(bytes=data) if len(data) == 16 else None


@dataclass(slots=True)
class _TopicRaw:
    """What has been read so far for one topic (not necessarily consistent yet)."""

    assignment: dict[int, tuple[int, ...]] | None = None
    topic_id: uuid.UUID | None = None
    states: dict[int, tuple[int, int, tuple[int, ...], int]] = field(default_factory=dict)
    config: dict[str, str] | None = None

    def build(self, name: str, old: TopicInfo | None) -> TopicInfo | None:
        if self.assignment is None or self.config is None:
            return None
        assigned = self.assignment.keys()
        if assigned <= self.states.keys():
            parts: Iterable[int] = sorted(assigned)
        elif old is not None:
            parts = [p for p in sorted(old.partitions) if p in assigned and p in self.states]
        else:
            return None
        partitions: dict[int, PartitionInfo] = {}
        for p in parts:
            leader, epoch, isr, version = self.states[p]
            partitions[p] = PartitionInfo(p, self.assignment[p], leader, epoch, isr, version)
        return TopicInfo(
            name, self.topic_id, MappingProxyType(partitions), MappingProxyType(dict(self.config))
        )


class MetadataCache:
    """Cluster metadata for request handlers.

    ``apply_*`` methods take raw znode data; the ZooKeeper watches call them, and unit tests
    can call them directly without a ZooKeeper.
    """

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.brokers: dict[int, layout.BrokerRegistration] = {}
        self.gateways: dict[int, layout.Endpoint] = {}
        self.controllers: dict[int, layout.Endpoint] = {}
        self.group_coordinators: dict[int, layout.Endpoint] = {}
        self.shard_map: layout.ShardMap | None = None  # __consumer_offsets partition owners
        self.transaction_coordinators: dict[int, layout.Endpoint] = {}
        self.txn_shard_map: layout.ShardMap | None = None  # __transaction_state partition owners
        self.version = 0
        self.loaded = False
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, str] = {}
        self._raw: dict[str, _TopicRaw] = {}
        self._changed: asyncio.Event | None = None
        self._removal_listeners: list[Callable[[str], None]] = []

    # ---- reads ------------------------------------------------------------------------
    @property
    def topics(self) -> Mapping[str, TopicInfo]:
        return self._topics

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        name = self._by_id.get(topic_id)
        return self._topics.get(name) if name is not None else None

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        t = self._topics.get(topic)
        return t.partitions.get(partition) if t is not None else None

    def on_topic_removed(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(name)`` when a topic's name leaves ``/brokers/topics`` (its deletion
        completed)."""
        self._removal_listeners.append(callback)

    def changed(self) -> Coroutine[Any, Any, bool]:
        """An awaitable that completes at the next change of anything in the cache. This call
        arms it, not the first await, so a change between the two is not missed (a caller that
        looks at the cache in between would otherwise sleep through it)."""
        return self._event().wait()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until ``predicate()`` is true (checked after every change); False on timeout."""
        if predicate():
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return predicate()
            event = self._event()
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                return predicate()
            if predicate():
                return True

    # ---- updates ----------------------------------------------------------------------
    def apply_topic_names(self, names: Iterable[str]) -> tuple[set[str], set[str]]:
        """The children of /brokers/topics; returns (added, removed) names."""
        current = set(names)
        known = set(self._raw)
        added, removed = current - known, known - current
        for name in added:
            self._raw[name] = _TopicRaw()
        for name in removed:
            del self._raw[name]
            self._publish(name)
            # here, not in _publish: a deletion removes the assignment znode too, and its watch
            # may unpublish the topic before the name leaves /brokers/topics
            for cb in self._removal_listeners:
                cb(name)
        return added, removed

    def apply_assignment(self, topic: str, data: bytes | None) -> set[int]:
        """/brokers/topics/<t>; returns the assigned partitions (empty when the znode is gone)."""
        raw = self._raw.get(topic)
        if raw is None:
            return set()
        if data is None:
            raw.assignment = None
        else:
            try:
                parts, topic_id = layout.parse_topic_assignment(data)
            except (ValueError, TypeError, AttributeError) as exc:
                log.warning("bad_topic_assignment", topic=topic, error=repr(exc))
                return set(raw.assignment or ())
            raw.assignment = {p: tuple(r) for p, r in parts.items()}
            raw.topic_id = parse_topic_id(topic_id)
            for p in [p for p in raw.states if p not in raw.assignment]:
                del raw.states[p]
        self._publish(topic)
        return set(raw.assignment or ())

    def apply_partition_state(
        self, topic: str, partition: int, data: bytes | None, version: int = 0
    ) -> None:
        raw = self._raw.get(topic)
        if raw is None:
            return
        if data is None:
            raw.states.pop(partition, None)
        else:
            try:
                st = layout.PartitionStateZk.from_json(data)
            except (ValueError, TypeError, KeyError) as exc:
                log.warning(
                    "bad_partition_state", topic=topic, partition=partition, error=repr(exc)
                )
                return
            raw.states[partition] = (st.leader, st.leader_epoch, tuple(st.isr), version)
        self._publish(topic)

    def apply_topic_config(self, topic: str, data: bytes | None) -> None:
        raw = self._raw.get(topic)
        if raw is None:
            return
        try:
            raw.config = layout.parse_topic_config(data)
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("bad_topic_config", topic=topic, error=repr(exc))
            raw.config = {}
        self._publish(topic)

    def apply_broker(self, broker_id: int, data: bytes | None) -> None:
        if data is None:
            changed = self.brokers.pop(broker_id, None) is not None
        else:
            try:
                reg = layout.BrokerRegistration.from_json(broker_id, data)
            except (ValueError, TypeError, KeyError) as exc:
                log.warning("bad_broker_registration", broker_id=broker_id, error=repr(exc))
                return
            changed = self.brokers.get(broker_id) != reg
            self.brokers[broker_id] = reg
        if changed:
            self._bump()

    def apply_gateway(self, node_id: int, data: bytes | None) -> None:
        self._apply_endpoint(self.gateways, node_id, data)

    def apply_controller_endpoint(self, controller_id: int, data: bytes | None) -> None:
        self._apply_endpoint(self.controllers, controller_id, data)

    def apply_group_coordinator(self, node_id: int, data: bytes | None) -> None:
        self._apply_endpoint(self.group_coordinators, node_id, data)

    def apply_transaction_coordinator(self, node_id: int, data: bytes | None) -> None:
        self._apply_endpoint(self.transaction_coordinators, node_id, data)

    def coordinators(self, kind: layout.CoordinatorKind) -> dict[int, layout.Endpoint]:
        """The registered coordinators of ``kind``."""
        if kind == layout.TRANSACTION:
            return self.transaction_coordinators
        return self.group_coordinators

    def shard_map_of(self, kind: layout.CoordinatorKind) -> layout.ShardMap | None:
        return self.txn_shard_map if kind == layout.TRANSACTION else self.shard_map

    def apply_shard_map(
        self, data: bytes | None, kind: layout.CoordinatorKind = layout.GROUP
    ) -> None:
        shard_map = None
        if data:
            try:
                shard_map = layout.ShardMap.from_json(data)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                log.warning("bad_shard_map", kind=kind.name, error=repr(exc))
                return
        if shard_map != self.shard_map_of(kind):
            if kind == layout.TRANSACTION:
                self.txn_shard_map = shard_map
            else:
                self.shard_map = shard_map
            self._bump()

    def apply_controller(self, data: bytes | None) -> None:
        controller_id = -1
        if data:
            try:
                controller_id = int(json.loads(data)["brokerid"])
            except (ValueError, TypeError, KeyError) as exc:
                log.warning("bad_controller_znode", error=repr(exc))
        if controller_id != self.controller_id:
            log.info("active controller changed", controller=controller_id)
            self.controller_id = controller_id
            self._bump()

    def apply_cluster_id(self, data: bytes | None) -> None:
        cluster_id = None
        if data:
            try:
                cluster_id = str(json.loads(data)["id"])
            except (ValueError, TypeError, KeyError) as exc:
                log.warning("bad_cluster_id", error=repr(exc))
        if cluster_id != self.cluster_id:
            self.cluster_id = cluster_id
            self._bump()

    # ---- internals ----------------------------------------------------------------------
    def _apply_endpoint(
        self, target: dict[int, layout.Endpoint], node_id: int, data: bytes | None
    ) -> None:
        if data is None:
            changed = target.pop(node_id, None) is not None
        else:
            try:
                ep = layout.Endpoint.from_json(node_id, data)
            except (ValueError, TypeError, KeyError) as exc:
                log.warning("bad_endpoint", node_id=node_id, error=repr(exc))
                return
            changed = target.get(node_id) != ep
            target[node_id] = ep
        if changed:
            self._bump()

    def _publish(self, name: str) -> None:
        raw = self._raw.get(name)
        old = self._topics.get(name)
        new = raw.build(name, old) if raw is not None else None
        if new is None and old is None:
            return
        if new is None:
            assert old is not None
            del self._topics[name]
            if old.topic_id is not None and self._by_id.get(old.topic_id) == name:
                del self._by_id[old.topic_id]
        else:
            if old is not None and old.topic_id != new.topic_id and old.topic_id is not None:
                self._by_id.pop(old.topic_id, None)
            self._topics[name] = new
            if new.topic_id is not None:
                self._by_id[new.topic_id] = name
        self._bump()

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _bump(self) -> None:
        self.version += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None


class ZkMetadataSync:
    """Feeds a MetadataCache from ZooKeeper watches."""

    def __init__(self, zk: AsyncZk, cache: MetadataCache) -> None:
        self._zk = zk
        self._cache = cache
        self._watches = WatchSet(zk)

    async def start(self, load_timeout_s: float = 30.0) -> None:
        """Register the watches and wait (bounded) until the first snapshot is loaded."""
        w, c = self._watches, self._cache
        w.data(layout.CLUSTER_ID, lambda d, s: c.apply_cluster_id(d))
        w.data(layout.CONTROLLER, lambda d, s: c.apply_controller(d))
        self._watch_dir(layout.BROKER_IDS, c.apply_broker)
        self._watch_dir(layout.GATEWAYS, c.apply_gateway)
        self._watch_dir(layout.CONTROLLERS, c.apply_controller_endpoint)
        self._watch_dir(layout.GROUP_COORDINATOR_IDS, c.apply_group_coordinator)
        w.data(layout.GROUP_COORDINATOR_SHARDS, lambda d, s: c.apply_shard_map(d))
        self._watch_dir(layout.TRANSACTION_COORDINATOR_IDS, c.apply_transaction_coordinator)
        w.data(
            layout.TRANSACTION_COORDINATOR_SHARDS,
            lambda d, s: c.apply_shard_map(d, layout.TRANSACTION),
        )
        w.children(layout.BROKER_TOPICS, self._on_topics)
        try:
            await asyncio.wait_for(w.wait_all_fired(), load_timeout_s)
        except TimeoutError:
            log.warning("metadata_initial_load_timeout", pending=w.unfired)
        c.loaded = True
        log.info(
            "metadata_loaded",
            topics=len(c.topics),
            brokers=sorted(c.brokers),
            gateways=sorted(c.gateways),
            controller=c.controller_id,
        )

    def stop(self) -> None:
        self._watches.stop_all()

    def _watch_dir(self, path: str, apply: Callable[[int, bytes | None], None]) -> None:
        known: set[int] = set()

        def on_children(children: list[str]) -> None:
            ids = {int(c) for c in children if c.isdigit()}
            for node_id in ids - known:
                self._watches.data(f"{path}/{node_id}", _bind_data(apply, node_id))
            for node_id in known - ids:
                self._watches.stop("data", f"{path}/{node_id}")
                apply(node_id, None)
            known.clear()
            known.update(ids)

        self._watches.children(path, on_children)

    def _on_topics(self, names: list[str]) -> None:
        added, removed = self._cache.apply_topic_names(names)
        for topic in removed:
            self._watches.stop("data", layout.topic_path(topic))
            self._watches.stop("data", layout.topic_config_path(topic))
            self._watches.stop_prefix(layout.partitions_path(topic) + "/")
        for topic in added:
            self._watches.data(layout.topic_path(topic), _bind_data(self._on_assignment, topic))
            self._watches.data(
                layout.topic_config_path(topic), _bind_data(self._cache.apply_topic_config, topic)
            )

    def _on_assignment(self, topic: str, data: bytes | None) -> None:
        partitions = self._cache.apply_assignment(topic, data)
        for p in partitions:
            path = layout.partition_state_path(topic, p)
            # thousands change at once (a restarted node's replicas rejoining the ISRs): their
            # reads must not hold the others (the active controller's) back
            self._watches.data(path, functools.partial(self._on_state, topic, p), pooled=True)

    def _on_state(
        self, topic: str, partition: int, data: bytes | None, stat: ZnodeStat | None
    ) -> None:
        self._cache.apply_partition_state(topic, partition, data, stat.version if stat else 0)


K = TypeVar("K")


def _bind_data(
    apply: Callable[[K, bytes | None], Any], key: K
) -> Callable[[bytes | None, ZnodeStat | None], None]:
    """A data-watch callback that passes ``key`` and the znode data (not the stat) on."""

    def callback(data: bytes | None, stat: ZnodeStat | None) -> None:
        apply(key, data)

    return callback
