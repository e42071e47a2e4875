"""Metadata cache: a topic is visible only when consistent; watch-driven updates from ZooKeeper."""

from __future__ import annotations

import asyncio
import base64
import uuid

from services.common.metadata_cache import MetadataCache, ZkMetadataSync, parse_topic_id
from services.common.zk import layout
from services.common.zk.client import AsyncZk


def _state(leader: int, epoch: int = 0, isr: list[int] | None = None) -> bytes:
    return layout.PartitionStateZk(leader, epoch, isr or [leader], 1).to_json()


def test_topic_visible_only_when_complete() -> None:
    cache = MetadataCache()
    cache.apply_topic_names(["t"])
    cache.apply_assignment("t", layout.topic_assignment_json({0: [1, 2], 1: [2, 1]}))
    cache.apply_partition_state("t", 0, _state(1))
    assert cache.topic("t") is None  # partition 1 has no state yet
    cache.apply_partition_state("t", 1, _state(2))
    assert cache.topic("t") is None  # config znode not read yet
    cache.apply_topic_config("t", None)
    t = cache.topic("t")
    assert t is not None and sorted(t.partitions) == [0, 1]
    assert t.partitions[1].leader == 2 and t.partitions[1].replicas == (2, 1)


def test_added_partitions_appear_when_all_their_states_are_loaded() -> None:
    cache = MetadataCache()
    cache.apply_topic_names(["t"])
    cache.apply_topic_config("t", layout.topic_config_json({"retention.ms": "1000"}))
    cache.apply_assignment("t", layout.topic_assignment_json({0: [1]}))
    cache.apply_partition_state("t", 0, _state(1))
    assert len(cache.topic("t").partitions) == 1  # type: ignore[union-attr]
    cache.apply_assignment("t", layout.topic_assignment_json({0: [1], 1: [1], 2: [1]}))
    cache.apply_partition_state("t", 1, _state(1))
    cache.apply_partition_state("t", 0, _state(1, epoch=5))
    t = cache.topic("t")
    assert t is not None and sorted(t.partitions) == [0]  # old set, fresh state
    assert t.partitions[0].leader_epoch == 5
    cache.apply_partition_state("t", 2, _state(1))
    assert sorted(cache.topic("t").partitions) == [0, 1, 2]  # type: ignore[union-attr]
    assert cache.topic("t").config == {"retention.ms": "1000"}  # type: ignore[union-attr]


def test_removal_topic_ids_and_listeners() -> None:
    cache = MetadataCache()
    removed: list[str] = []
    cache.on_topic_removed(removed.append)
    tid = uuid.uuid4()
    kafka_form = base64.urlsafe_b64encode(tid.bytes).decode().rstrip("=")
    cache.apply_topic_names(["t"])
    cache.apply_assignment("t", layout.topic_assignment_json({0: [1]}, kafka_form))
    cache.apply_partition_state("t", 0, _state(1))
    cache.apply_topic_config("t", None)
    assert cache.topic_by_id(tid) is cache.topic("t")
    cache.apply_topic_names([])
    assert cache.topic("t") is None and cache.topic_by_id(tid) is None
    assert removed == ["t"]
    assert parse_topic_id(str(tid)) == tid
    assert parse_topic_id("not-an-id") is None


def test_listeners_hear_of_a_removal_whose_assignment_went_first() -> None:
    """Deleting a topic removes /brokers/topics/<t> (its data watch fires) and the name (the
    children watch): in either order, listeners hear of it once."""
    cache = MetadataCache()
    removed: list[str] = []
    cache.on_topic_removed(removed.append)
    cache.apply_topic_names(["t"])
    cache.apply_assignment("t", layout.topic_assignment_json({0: [1]}, None))
    cache.apply_partition_state("t", 0, _state(1))
    cache.apply_topic_config("t", None)
    assert cache.topic("t") is not None
    cache.apply_assignment("t", None)
    assert cache.topic("t") is None and removed == []
    cache.apply_topic_names([])
    assert removed == ["t"]


async def test_wait_for_wakes_on_change() -> None:
    cache = MetadataCache()
    waiter = asyncio.create_task(cache.wait_for(lambda: cache.controller_id == 3, 5.0))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    cache.apply_controller(layout.controller_json(3))
    assert await asyncio.wait_for(waiter, 1.0) is True
    assert await cache.wait_for(lambda: cache.controller_id == 4, 0.05) is False


async def test_changed_is_armed_when_called_not_when_awaited() -> None:
    """A change between ``changed()`` and its first await still wakes it: the group
    coordinator reconciles its shards in between, and once slept through a shard-map update."""
    cache = MetadataCache()
    change = asyncio.ensure_future(cache.changed())  # not started yet
    cache.apply_controller(layout.controller_json(3))  # changes before the task first runs
    assert await asyncio.wait_for(change, 1.0) is True
    later = asyncio.ensure_future(cache.changed())  # and nothing wakes it without a change
    await asyncio.sleep(0.01)
    assert not later.done()
    later.cancel()


async def test_follows_zookeeper(zk_connect: str) -> None:
    writer = AsyncZk(zk_connect)
    await writer.start()
    await writer.ensure_layout()
    await writer.create(layout.CLUSTER_ID, layout.cluster_id_json("c1"), makepath=True)
    await writer.create(layout.topic_path("early"), layout.topic_assignment_json({0: [1]}))
    await writer.create(layout.partition_state_path("early", 0), _state(1), makepath=True)
    reader = AsyncZk(zk_connect)
    await reader.start()
    cache = MetadataCache()
    sync = ZkMetadataSync(reader, cache)
    try:
        await sync.start(load_timeout_s=5)
        assert cache.loaded and cache.cluster_id == "c1"
        assert cache.topic("early") is not None

        # a new topic: assignment first, states and config after (as the controller writes)
        await writer.create(layout.topic_path("t"), layout.topic_assignment_json({0: [1], 1: [2]}))
        await writer.create(layout.partition_state_path("t", 0), _state(1), makepath=True)
        await asyncio.sleep(0.1)
        assert cache.topic("t") is None
        await writer.create(layout.partition_state_path("t", 1), _state(2), makepath=True)
        assert await cache.wait_for(lambda: cache.topic("t") is not None, 5)

        await writer.set(layout.partition_state_path("t", 1), _state(1, epoch=7))
        assert await cache.wait_for(lambda: cache.partition("t", 1).leader_epoch == 7, 5)  # type: ignore[union-attr]
        await writer.create(
            layout.topic_config_path("t"),
            layout.topic_config_json({"cleanup.policy": "compact"}),
            makepath=True,
        )
        assert await cache.wait_for(
            lambda: cache.topic("t").config.get("cleanup.policy") == "compact", 5
        )  # type: ignore[union-attr]

        await writer.create(
            layout.broker_path(1), layout.BrokerRegistration(1, "h", 1).to_json(), ephemeral=True
        )
        await writer.create(
            layout.gateway_path(5), layout.Endpoint(5, "g", 9, "z").to_json(), ephemeral=True
        )
        await writer.create(
            layout.controller_endpoint_path(2), layout.Endpoint(2, "c", 8).to_json(), ephemeral=True
        )
        await writer.create(layout.CONTROLLER, layout.controller_json(2), ephemeral=True)
        assert await cache.wait_for(
            lambda: (
                1 in cache.brokers
                and 5 in cache.gateways
                and cache.controller_id == 2
                and 2 in cache.controllers
            ),
            5,
        )
        assert cache.gateways[5].rack == "z"

        await writer.delete(layout.gateway_path(5))
        await writer.delete(layout.topic_path("t"), recursive=True)
        assert await cache.wait_for(lambda: 5 not in cache.gateways and cache.topic("t") is None, 5)
        # recreated with the same name: seen again
        await writer.create(layout.topic_path("t"), layout.topic_assignment_json({0: [3]}))
        await writer.create(layout.partition_state_path("t", 0), _state(3), makepath=True)
        assert await cache.wait_for(
            lambda: (t := cache.topic("t")) is not None and t.partitions[0].leader == 3, 5
        )
    finally:
        sync.stop()
        await reader.stop()
        await writer.stop()
